"""The scheduler's pass as decisions (spec: "Where jobs run", "What bounds a run").

Each job type is its own lane: a pass starts the oldest ready job of every type
that has none running, so a quick write is never held up by a long job of
another kind, and two jobs of one type never overlap. There is still one
database, one processor lease and one retry ladder — the lanes live inside the lease.
The pick itself — the oldest due job of every idle type — is the view's
(:meth:`pyjobq.core.view.QueueView.picks`); what a pass does with each pick is here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Collection, Iterable, Mapping, Sequence, TypeVar

from .records import JobRecord
from .status import Status
from .view import Entry

#: What recovery and unparking read: a whole record, or the view's entry of it.
E = TypeVar("E", JobRecord, Entry)


def run_lock(lock_name: str, job_type: str, job_id: str) -> str:
    """The Web Lock a scheduler holds from before it claims a job until its outcome is stored:
    ``<lock>:run:["<type>","<id>"]``.

    Its holder's document outlives a freeze but not a discard, so a running record whose
    run lock is held is another page's run (perhaps a frozen one), never an orphan
    (why the queue needs that: pyjobq/engine/lease.py). The name carries the job's type so that a
    held run lock keeps its lane busy in every tab even once its record is gone: a job deleted
    while its frozen page was sending it is still on the wire, and the type's next job must
    wait for it: one type on the wire at a time.
    """
    return f"{lock_name}:run:{json.dumps([job_type, job_id], separators=(',', ':'))}"


def run_lock_job(lock_name: str, name: str) -> tuple[str, str] | None:
    """The ``(type, job id)`` a :func:`run_lock` name says, or None for any other lock (any
    script of the origin may name a lock)."""
    prefix = f"{lock_name}:run:["
    if not name.startswith(prefix):
        return None
    try:
        job_type, job_id = json.loads(name[len(prefix) - 1:])
    except (ValueError, TypeError):
        return None
    if isinstance(job_type, str) and isinstance(job_id, str):
        return job_type, job_id
    return None


def types_held(held: Mapping[str, str], lock_name: str, mine: Collection[str], *,
               skip: Collection[str] = ()) -> dict[str, str]:
    """Types of which another page holds a run lock exclusively, whatever its record says, with
    one such lock's name each (:func:`run_lock`; any other name counts nowhere):
    those lanes are busy here. A run on the wire (its record deleted while its frozen page sent
    it) and a lock taken ahead of a claim (a frozen former holder's) count alike: either page may
    yet run that job, so its type waits — in the pass's looks as in its claims, or a look would
    pick what the claim lets go, round and round. ``skip``: types left out (lanes running here,
    whose next run lock this page may hold before that job is in flight).

    Asked after this page took its own claims' run locks: two pages that each believe they hold
    the lease (one whose silent lease was just taken, before it hears: pyjobq/engine/lease.py) and
    start one type at once each take, then look — so at least one sees the other's lock."""
    busy: dict[str, str] = {}
    for name, mode in held.items():
        run = run_lock_job(lock_name, name) if mode == "exclusive" else None
        if run is not None and run[1] not in mine and run[0] not in skip:
            busy.setdefault(run[0], name)
    return busy


def orphans(running: Iterable[E], in_flight: Collection[str],
            held_elsewhere: Collection[str] = ()) -> list[E]:
    """Running records nobody is running: not this page's, and no run lock held on them.

    ``held_elsewhere`` holds the ids whose run lock another page holds (a frozen tab's
    run, or one its worker handed off before its lease was revoked).
    """
    return [r for r in running
            if r.status is Status.RUNNING and r.id not in in_flight and r.id not in held_elsewhere]


def unparkable(paused: Iterable[E], held: Mapping[str, str],
               suspended: Collection[str] = ()) -> list[E]:
    """Paused records whose yield lock nobody holds exclusively, and those paused with no yield
    lock whose type is not suspended.

    ``held`` maps a lock name to ``"exclusive"`` or ``"shared"``. A record paused with no lock
    is a suspended volatile type's while ``suspend_type`` holds it; one with no lock and no
    suspension (another writer's, an older pyjobq's) has nothing that would ever unpark it,
    so it waits as pending does.
    """
    return [
        r for r in paused
        if r.status is Status.PAUSED and (
            held.get(r.yield_lock) != "exclusive" if r.yield_lock is not None
            else r.type not in suspended)
    ]


@dataclass(frozen=True)
class Starts:
    """What a pass does with its picks (:func:`plan_starts`)."""

    #: Picks to park, each with the yield lock that holds its type (None: the type is suspended).
    parks: tuple[tuple[Entry, str | None], ...] = ()
    #: Picks to claim and hand off.
    claims: tuple[Entry, ...] = ()
    #: Yield locks to watch: the parked types go on the moment their holder lets go.
    watch: tuple[str, ...] = ()


def plan_starts(picks: Sequence[Entry], *, suspended: Collection[str], yields: Mapping[str, str],
                held: Mapping[str, str]) -> Starts:
    """Park or claim each pick (spec: "Yielding to foreground work", "Suspending volatile work").

    A suspended type's pick is parked with no lock (``resume_type`` returns it); a type
    whose yield lock someone holds exclusively is parked on that lock, which is then
    watched; every other pick is claimed. ``held`` maps a lock name to its mode.
    """
    parks: list[tuple[Entry, str | None]] = []
    claims: list[Entry] = []
    watch: list[str] = []
    for entry in picks:
        if entry.type in suspended:
            parks.append((entry, None))
            continue
        lock = yields.get(entry.type)
        if lock and held.get(lock) == "exclusive":
            parks.append((entry, lock))
            if lock not in watch:
                watch.append(lock)
            continue
        claims.append(entry)
    return Starts(tuple(parks), tuple(claims), tuple(watch))


def chains(job_type: str, *, suspended: Collection[str], yields: Mapping[str, str],
           busy_elsewhere: Collection[str]) -> bool:
    """Whether a settling run's lane may claim its next job in the settle's own transaction.

    Only when starting it needs nothing the full look decides: not a suspended type, not a
    type with a yield lock to check, not a type another page holds a run of.
    """
    return job_type not in suspended and job_type not in yields and job_type not in busy_elsewhere
