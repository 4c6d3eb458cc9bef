"""The scheduler's pass as decisions (spec: "Where jobs run", "What bounds a run").

Each job type is its own lane: a pass starts the oldest ready job of every type
that has none running, so a quick write is never held up by a long job of
another kind, and two jobs of one type never overlap. There is still one
database, one processor lease and one retry ladder — the lanes live inside the lease.
"""

from __future__ import annotations

from typing import Collection, Iterable, Mapping, TypeVar

from .records import DueKey, JobRecord
from .view import Entry
from .status import Status

R = TypeVar("R", JobRecord, DueKey)
#: What recovery and unparking read: a whole record, or the view's entry of it.
E = TypeVar("E", JobRecord, Entry)


def order_key(record: JobRecord | DueKey) -> tuple[float, str]:
    return (record.created_at, record.id)


def pick(due: Iterable[R], busy_types: Collection[str], *, leases: bool = False) -> list[R]:
    """The oldest due pending job of every type not in ``busy_types``, oldest first.

    With ``leases`` a due *running* record counts too: the store lists a running
    record as due only once its lease has run out, so it is claimable again.
    """
    claimable = (Status.PENDING, Status.RUNNING) if leases else (Status.PENDING,)
    oldest: dict[str, R] = {}
    for record in due:
        if record.status not in claimable or record.type in busy_types:
            continue
        held = oldest.get(record.type)
        if held is None or order_key(record) < order_key(held):
            oldest[record.type] = record
    return sorted(oldest.values(), key=order_key)


def run_lock(lock_name: str, job_id: str) -> str:
    """The Web Lock a scheduler holds from before it claims a job until its outcome is stored.

    Its holder's document outlives a freeze but not a discard, so a running record whose
    run lock is held is another page's run (perhaps a frozen one), never an orphan.
    """
    return f"{lock_name}:run:{job_id}"


def orphans(running: Iterable[E], in_flight: Collection[str],
            held_elsewhere: Collection[str] = ()) -> list[E]:
    """Running records nobody is running: not this page's, and no run lock held on them.

    ``held_elsewhere`` holds the ids whose run lock another page holds (a frozen tab's
    run, or one its worker handed off before its lease was revoked).
    """
    return [r for r in running
            if r.status is Status.RUNNING and r.id not in in_flight and r.id not in held_elsewhere]


def unparkable(paused: Iterable[E], held: Mapping[str, str]) -> list[E]:
    """Paused records whose yield lock nobody holds exclusively.

    ``held`` maps a lock name to ``"exclusive"`` or ``"shared"``. Records paused
    with no lock (a suspended volatile type) are never returned here.
    """
    return [
        r for r in paused
        if r.status is Status.PAUSED and r.yield_lock is not None and held.get(r.yield_lock) != "exclusive"
    ]
