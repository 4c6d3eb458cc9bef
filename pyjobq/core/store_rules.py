"""The rules every store keeps, written once: :class:`~pyjobq.memory.MemoryStore`,
:class:`~pyjobq.memory.VolatileStore` and :class:`~pyjobq.browser.idb.IndexedDBStore` each
call these, and differ only in how they read and write what a rule decided on.

Synchronous and pure: they run inside IndexedDB's request callbacks, while the transaction is
active (an ``await`` there would let it commit), as well as in the in-memory stores' one-turn
transactions. The contract suite (``tests/store_contract.py``) runs every store against them.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Collection, Iterable, NamedTuple, Protocol, Sequence, TypeVar

from .periodic import SCHEDULE_VERSION, Schedule, ScheduleError
from .ports import REPLACE, Change, KeyChange, Updated
from .records import JobRecord
from .status import CLAIMABLE, REPLACEABLE

log = logging.getLogger("pyjobq")


class _Ordered(Protocol):
    @property
    def created_at(self) -> float: ...

    @property
    def id(self) -> str: ...


_O = TypeVar("_O", bound=_Ordered)


def oldest_first(records: Iterable[_O]) -> list[_O]:
    """Records (or entries) in the store's one order: ``(created_at, id)``."""
    return sorted(records, key=lambda r: (r.created_at, r.id))


def number(value: Any) -> float | None:
    """``value`` as a stored moment or count: a finite int or float (never a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def is_status(value: Any, statuses: Collection[Any]) -> bool:
    """Whether a stored value's ``status`` is one of ``statuses``: a raw value's status may be
    anything, unhashable too, and only a str can be one of ours."""
    return isinstance(value, str) and value in statuses


def later(at: Any, after: float) -> bool:
    """Whether IndexedDB's ``by_next_retry`` index holds ``at`` above ``after`` (an open lower
    bound): a number above it (NaN is no key), or a string or an array (keys of those types
    order after every number); None, a bool or an object is not in the index at all."""
    if isinstance(at, bool):
        return False
    if isinstance(at, (int, float)):
        return at > after
    return isinstance(at, (str, list))


def soonest(timed: Iterable[tuple[Any, Any]], after: float | None) -> float | None:
    """``next_due_at``: the smallest "not before" of the (status, next_retry_at) pairs a pass
    could claim (a pending record, a running lease) that is a finite number, past ``after``
    when given."""
    times = [moment for status, at in timed if is_status(status, CLAIMABLE)
             and (moment := number(at)) is not None and (after is None or moment > after)]
    return min(times, default=None)


# ---------------------------------------------------------------- add

def last_per_key(records: Sequence[JobRecord]) -> tuple[list[JobRecord], list[JobRecord]]:
    """(what ``Store.add`` stores, what it drops): of several waiting records of one key in a
    burst, the last one filed replaces the others before any is stored. The rest are all kept."""
    last = {r.key: r.id for r in records if replaces(r)}
    kept = [r for r in records if not replaces(r) or last[r.key] == r.id]
    if len(kept) == len(records):
        return list(records), []
    return kept, [r for r in records if replaces(r) and last[r.key] != r.id]


def replaces(record: JobRecord) -> bool:
    """Whether storing ``record`` replaces the waiting jobs of its key: it has a key and waits
    itself (a new job does; a record written with another status — history — replaces none)."""
    return record.key is not None and record.status in REPLACEABLE


def check_ids(records: Sequence[JobRecord]) -> None:
    """``Store.add``'s one check before any write: no id twice in one add (``KeyError``)."""
    if len({r.id for r in records}) != len(records):
        raise KeyError("the same id appears twice in one add")


def replaced_by(keys: Collection[str | None], found: Iterable[JobRecord]) -> list[JobRecord]:
    """Of the records ``found`` under ``keys`` (read in the add's transaction), those the add
    replaces: the waiting ones, oldest first."""
    return oldest_first(r for r in found if r.key in keys and r.status in REPLACEABLE)


# ---------------------------------------------------------------- update_many, update_keyed

Load = Callable[[int, Change], "JobRecord | Updated"]
"""How a store reads change ``i``'s record in its transaction: the record, or the change's
final :class:`Updated` when there is none to change (no record, a newer pyjobq's, or a
malformed one the store has just failed)."""


class Applied(NamedTuple):
    """What :func:`apply_changes` decided: each change's :class:`Updated`, in order, and the
    records to write, one per id, each the last change's (write them all or none)."""

    done: list[Updated]
    writes: list[JobRecord]


def apply_changes(changes: Sequence[Change], load: Load) -> Applied:
    """``update_many``'s decision: each change applied in order — on what an earlier change of
    the same call wrote to its record, else on what ``load`` read — so two changes of one id
    in one call see each other."""
    written: dict[str, JobRecord] = {}
    done: list[Updated] = []
    for i, change in enumerate(changes):
        current = written.get(change.job_id)
        if current is None:
            loaded = load(i, change)
            if isinstance(loaded, Updated):
                done.append(loaded)
                continue
            current = loaded
        new = change.replacement(current)
        if new is None:
            done.append(Updated(current, False))
            continue
        written[change.job_id] = new
        done.append(Updated(new, True))
    return Applied(done, list(written.values()))


class KeyDecision(NamedTuple):
    """What one :class:`~pyjobq.core.ports.KeyChange` does: its :class:`Updated`, and the record
    to write or the record to delete as replaced (at most one of the two)."""

    updated: Updated
    write: JobRecord | None = None
    gone: JobRecord | None = None


def decide_keyed(change: KeyChange, current: JobRecord,
                 others: Sequence[JobRecord]) -> KeyDecision:
    """What ``change`` does to ``current``, given the other records of its key read in the same
    transaction: it leaves it (also when its status is not one of ``when``), replaces it (the
    record is deleted: ``Updated(None, True)``), or writes what it decided."""
    if current.status not in change.when:
        return KeyDecision(Updated(current, False))
    decided = change.decide(current, [o for o in others if o.id != current.id])
    if decided is None:
        return KeyDecision(Updated(current, False))
    if decided is REPLACE:
        return KeyDecision(Updated(None, True), gone=current)
    assert isinstance(decided, JobRecord)
    return KeyDecision(Updated(decided, True), write=decided)


class Taken:
    """``update_keyed``'s rule that each record is decided once: a second change of one id in
    the same call is left (``Updated(None, False)``), as IndexedDB's reads before the first
    change's write would leave it."""

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def first(self, job_id: str) -> bool:
        """Whether this is the call's first change of ``job_id`` (and take it)."""
        if job_id in self._ids:
            return False
        self._ids.add(job_id)
        return True


# ---------------------------------------------------------------- schedules

def schedule_of(data: Any) -> Schedule | None:
    """A stored schedule's value as a :class:`Schedule`; None for a value that is not one
    (logged) or a newer pyjobq's (left as it is)."""
    try:
        return Schedule.from_dict(data)
    except ScheduleError as exc:
        if not exc.foreign:
            log.error("pyjobq: skipping a stored schedule that is not one: %s", exc)
        return None


def foreign_schedule(data: Any) -> bool:
    """Whether a stored schedule value is a newer pyjobq's (left as it is, even by a delete)."""
    version = data.get("v") if isinstance(data, dict) else None
    # As Schedule.from_dict reads it: any number above ours, Infinity too (NaN is above none).
    return isinstance(version, (int, float)) and not isinstance(version, bool) \
        and version > SCHEDULE_VERSION


class PutSchedule(NamedTuple):
    """What ``put_schedule`` does: the schedule to write (None: nothing), and its answer."""

    write: Schedule | None
    answer: Schedule | None


def put_schedule(present: bool, current: Schedule | None,
                 apply: Callable[[Schedule | None], Schedule | None]) -> PutSchedule:
    """``put_schedule``'s decision on what its transaction read: a stored value that is not one
    of ours (a newer pyjobq's, or malformed) is never overwritten (answer None); otherwise
    ``apply`` decides, and the answer is what is stored afterwards."""
    if current is None and present:
        return PutSchedule(None, None)
    new = apply(current)
    return PutSchedule(new, current if new is None else new)


def deletes_schedule(current: Schedule | None, data: Any) -> bool:
    """Whether ``delete_schedule`` deletes the stored value ``data`` (read as ``current``): ours
    and malformed ones go; a newer pyjobq's stays."""
    return current is not None or not foreign_schedule(data)
