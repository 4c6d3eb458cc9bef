"""The scheduler's pass as decisions (spec: "Where jobs run", "What bounds a run").

Each job type is its own lane: a pass starts the oldest ready job of every type
that has none running, so a quick write is never held up by a long job of
another kind, and two jobs of one type never overlap. There is still one
database, one processor lease and one retry ladder — the lanes live inside the lease.
"""

from __future__ import annotations

from typing import Collection, Iterable, Mapping

from .records import JobRecord
from .status import Status


def order_key(record: JobRecord) -> tuple[float, str]:
    return (record.created_at, record.id)


def pick(due: Iterable[JobRecord], busy_types: Collection[str]) -> list[JobRecord]:
    """The oldest due pending job of every type not in ``busy_types``, oldest first."""
    oldest: dict[str, JobRecord] = {}
    for record in due:
        if record.status is not Status.PENDING or record.type in busy_types:
            continue
        held = oldest.get(record.type)
        if held is None or order_key(record) < order_key(held):
            oldest[record.type] = record
    return sorted(oldest.values(), key=order_key)


def orphans(running: Iterable[JobRecord], in_flight: Collection[str]) -> list[JobRecord]:
    """Running records this page is not running: inside the lease, their page is gone."""
    return [r for r in running if r.status is Status.RUNNING and r.id not in in_flight]


def unparkable(paused: Iterable[JobRecord], held: Mapping[str, str]) -> list[JobRecord]:
    """Paused records whose yield lock nobody holds exclusively.

    ``held`` maps a lock name to ``"exclusive"`` or ``"shared"``. Records paused
    with no lock (a suspended volatile type) are never returned here.
    """
    return [
        r for r in paused
        if r.status is Status.PAUSED and r.yield_lock is not None and held.get(r.yield_lock) != "exclusive"
    ]
