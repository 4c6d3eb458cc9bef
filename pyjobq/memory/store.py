"""The in-memory stores: :class:`MemoryStore` (the origin's store on plain CPython, and the
simulation's) and :class:`VolatileStore` (each tab's volatile engine, in the browser too).

Each keeps the IndexedDB store's semantics (one transaction at a time, structured copies, the
``(created_at, id)`` order, keys that replace), because a store kinder than the browser's would
let races through."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import (
    Any,
    Awaitable,
    Callable,
    Collection,
    Concatenate,
    Coroutine,
    ParamSpec,
    Sequence,
    TypeVar,
)

from ..core import store_rules as rules
from ..core.periodic import Occurrence, Schedule
from ..core.ports import Change, Clock, KeyChange, KeyUpdated, Updated
from ..core.records import MAX_DEPTH, ForeignRecord, JobRecord, RecordError, depth, malformed
from ..core.status import REPLACEABLE, TERMINAL, UNFINISHED, Status
from ..core.view import Entry
from .delivery import structured_copy

log = logging.getLogger("pyjobq")
"""The library's logger (``"pyjobq"``), silent unless the application configures logging."""


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _transaction(
    method: Callable[Concatenate["MemoryStore", _P], Awaitable[_R]],
) -> Callable[Concatenate["MemoryStore", _P], Coroutine[Any, Any, _R]]:
    """One store call as IndexedDB runs it: the body (which never awaits) reads and writes
    atomically, and the caller gets back to the event loop :attr:`MemoryStore.yields` times
    before it begins and again after it commits, so other tasks run between two calls."""
    @functools.wraps(method)
    async def call(self: "MemoryStore", /, *args: _P.args, **kw: _P.kwargs) -> _R:
        await self._turns()
        try:
            return await method(self, *args, **kw)
        finally:
            await self._turns()

    return call


class MemoryStore:
    """The :class:`~pyjobq.core.ports.Store` contract, in a dict.

    Like the IndexedDB store it holds whatever other code wrote (:meth:`put_raw`): a stored
    value that is not a job record is failed in one write when a read meets it
    (:func:`~pyjobq.core.records.malformed`), and a record with a status this version does
    not know (a newer pyjobq's) is left exactly as it is and skipped by every read.
    ``clock`` stamps those failed records; default the wall clock.

    ``yields``: how many event-loop turns each call gives away before its transaction begins
    and after it commits (``True`` is one). IndexedDB does: a transaction's requests run in
    later tasks, and the Python code awaiting it resumes in a later task still, so whatever
    else is ready — another request's handler, a message, a timer — runs between two store
    calls of one operation. Each call stays one atomic transaction, and calls begin in the
    order they were made, as IndexedDB's transactions on one object store do. The default 0
    never yields: a call runs to its end at once, which hides races a browser would show.
    """

    def __init__(self, clock: Clock | None = None, *, yields: int = 0) -> None:
        self._rows: dict[Any, dict[str, Any]] = {}
        #: The schedules object store (:class:`~pyjobq.core.ports.ScheduleStore`), by name.
        self._schedule_rows: dict[Any, dict[str, Any]] = {}
        self._clock = clock
        if not isinstance(yields, int) or yields < 0:
            raise ValueError(f"yields must be an int >= 0 (or a bool), got {yields!r}")
        #: Event-loop turns each call yields before it begins and after it commits.
        self.yields = int(yields)

    async def _turns(self) -> None:
        for _ in range(self.yields):
            await asyncio.sleep(0)

    def _now(self) -> float:
        return self._clock.now() if self._clock is not None else time.time() * 1000.0

    def _read(self, key: Any) -> JobRecord | None:
        """The record under ``key``: decoded; failed in place if malformed; None if foreign."""
        return self._load(key)[0]

    def _load(self, key: Any) -> tuple[JobRecord | None, bool]:
        """(the record, whether it was just failed as malformed);
        (None, False) for a foreign one."""
        row = self._rows[key]
        try:
            if depth(row, MAX_DEPTH + 1) > MAX_DEPTH + 1:  # before a copy that would recurse
                raise RecordError(
                    f"job record {str(row.get('id'))[:80]!r} nests deeper than {MAX_DEPTH} levels")
            return self._decode(row), False
        except ForeignRecord:
            return None, False
        except RecordError as exc:
            log.error("pyjobq: failing a malformed record in the store: %s", exc)
            failed = malformed(row, exc, self._now())
            del self._rows[key]
            self._rows[failed.id] = structured_copy(failed.to_dict())
            return failed, True

    def _decode(self, row: dict[str, Any]) -> JobRecord:
        return JobRecord.from_dict(structured_copy(row))

    def _sorted(self, keys: Any, status: Status | None = None) -> list[JobRecord]:
        records = (r for r in (self._read(k) for k in list(keys)) if r is not None)
        if status is not None:
            records = (r for r in records if r.status is status)  # a malformed one is failed now
        return rules.oldest_first(records)

    @_transaction
    async def add(self, records: Sequence[JobRecord]) -> list[JobRecord]:
        kept, dropped = rules.last_per_key(records)
        rows = [structured_copy(r.to_dict()) for r in kept]
        for record in records:
            if record.id in self._rows:
                raise KeyError(f"a job with id {record.id!r} already exists")
        rules.check_ids(records)
        # A walk over every row per keyed add: this store is the tests' (IndexedDB reads its
        # by_key index).
        keys = {r.key for r in kept if rules.replaces(r)}
        waiting = [k for k, r in self._rows.items()
                   if isinstance(r.get("key"), str) and r["key"] in keys
                   and rules.is_status(r.get("status"), REPLACEABLE)] if keys else []
        # A malformed one is failed by the read, and not replaced.
        replaced = rules.replaced_by(keys, (r for r in map(self._read, waiting) if r is not None))
        for record in replaced:
            del self._rows[record.id]
        for row in rows:
            self._rows[row["id"]] = row
        return replaced + dropped

    @_transaction
    async def get(self, job_id: str) -> JobRecord | None:
        return self._read(job_id) if job_id in self._rows else None

    @_transaction
    async def update(self, change: Change) -> Updated:
        return self._update_many([change])[0]

    @_transaction
    async def update_many(self, changes: Sequence[Change]) -> list[Updated]:
        return self._update_many(changes)

    @_transaction
    async def update_by_status(self, statuses: Collection[Status],
                               apply: Callable[[JobRecord], JobRecord | None], *,
                               due_after: float | None = None) -> list[Updated]:
        wanted = frozenset(Status(s) for s in statuses)
        found: list[JobRecord] = []
        for key in [k for k, r in self._rows.items() if rules.is_status(r.get("status"), wanted)
                    and (due_after is None or rules.later(r.get("next_retry_at"), due_after))]:
            record, failed = self._load(key)
            if record is not None and not failed:
                found.append(record)
        return self._update_many(
            [Change(r.id, apply, wanted) for r in rules.oldest_first(found)])

    @_transaction
    async def update_keyed(self, changes: Sequence[KeyChange]) -> KeyUpdated:
        # All or none: rows are written and deleted only once every change has been decided.
        written: dict[str, dict[str, Any]] = {}
        gone: list[JobRecord] = []
        done: list[Updated] = []
        taken = rules.Taken()
        for change in changes:
            if change.job_id not in self._rows or not taken.first(change.job_id):
                done.append(Updated(None, False))
                continue
            current, failed = self._load(change.job_id)
            if current is None or failed:
                done.append(Updated(current, False))
                continue
            # A walk over every row per keyed change: this store is the tests' (IndexedDB
            # reads its by_key index).
            others = [] if current.key is None else [
                r for r in (self._read(k) for k, v in list(self._rows.items())
                            if v.get("key") == current.key and k != change.job_id)
                if r is not None]
            decision = rules.decide_keyed(change, current, others)
            done.append(decision.updated)
            if decision.write is not None:
                written[change.job_id] = structured_copy(decision.write.to_dict())
            if decision.gone is not None:
                gone.append(decision.gone)
        self._rows.update(written)
        for record in gone:
            self._rows.pop(record.id, None)
        return KeyUpdated(done, gone)

    def _update_many(self, changes: Sequence[Change]) -> list[Updated]:
        def load(_i: int, change: Change) -> JobRecord | Updated:
            if change.job_id not in self._rows:
                return Updated(None, False)
            current, failed = self._load(change.job_id)
            return Updated(current, False) if current is None or failed else current

        applied = rules.apply_changes(changes, load)
        # All or none: the new rows are written only once every change has run.
        self._rows.update({r.id: structured_copy(r.to_dict()) for r in applied.writes})
        return applied.done

    @_transaction
    async def entries(self, ids: Sequence[str] | None = None) -> list[Entry]:
        keys = list(self._rows) if ids is None else [i for i in ids if i in self._rows]
        found: list[Entry] = []
        for key in keys:
            if ids is None and rules.is_status(self._rows[key].get("status"), TERMINAL):
                continue  # not decoded: a look never pays for the history
            record = self._read(key)
            if record is not None and (ids is not None or record.status in UNFINISHED):
                found.append(Entry.of(record))
        return rules.oldest_first(found)

    @_transaction
    async def delete_many(self, job_ids: Sequence[str],
                          when: Collection[Status] | None = None) -> list[JobRecord]:
        return self._delete([i for i in dict.fromkeys(job_ids) if i in self._rows], when)

    @_transaction
    async def delete_group(self, group: str) -> list[JobRecord]:
        keys = [k for k, r in self._rows.items() if r.get("group") == group]
        return rules.oldest_first(self._delete(keys))

    def _delete(self, keys: Sequence[Any],
                when: Collection[Status] | None = None) -> list[JobRecord]:
        deleted: list[JobRecord] = []
        for key in keys:
            record = self._read(key)  # a malformed value is failed first: deleted as that
            if record is None or (when is not None and record.status not in when):
                continue  # a newer pyjobq's record: left as it is
            self._rows.pop(key, None)
            self._rows.pop(record.id, None)
            deleted.append(record)
        return deleted

    @_transaction
    async def by_status(self, status: str) -> list[JobRecord]:
        wanted = Status(status)
        return self._sorted((k for k, r in self._rows.items() if r.get("status") == wanted), wanted)

    @_transaction
    async def by_group(self, group: str) -> list[JobRecord]:
        return [r for r in self._sorted(k for k, r in self._rows.items() if r.get("group") == group)
                if r.group == group]

    @_transaction
    async def next_due_at(self, after: float | None = None) -> float | None:
        return rules.soonest(
            ((r.get("status"), r.get("next_retry_at")) for r in self._rows.values()), after)

    @_transaction
    async def all(self) -> list[JobRecord]:
        return self._sorted(list(self._rows))

    # ------------------------------------------------------------ the ScheduleStore contract

    def _schedule(self, name: Any) -> Schedule | None:
        """The stored schedule ``name``; None when there is none, or it is not one (logged) or a
        newer pyjobq's (left as it is)."""
        row = self._schedule_rows.get(name)
        return None if row is None else rules.schedule_of(structured_copy(row))

    @_transaction
    async def schedules(self) -> list[Schedule]:
        found = (self._schedule(name) for name in sorted(self._schedule_rows, key=str))
        return [s for s in found if s is not None]

    @_transaction
    async def put_schedule(self, name: str,
                           apply: Callable[[Schedule | None], Schedule | None]) -> Schedule | None:
        put = rules.put_schedule(name in self._schedule_rows, self._schedule(name), apply)
        if put.write is not None:
            self._schedule_rows[name] = structured_copy(put.write.to_dict())
        return put.answer

    @_transaction
    async def delete_schedule(self, name: str) -> Schedule | None:
        current = self._schedule(name)
        if name in self._schedule_rows and rules.deletes_schedule(current,
                                                                  self._schedule_rows[name]):
            del self._schedule_rows[name]
        return current

    @_transaction
    async def advance_schedule(
            self, name: str,
            decide: Callable[[Schedule, JobRecord | None], Occurrence | None],
    ) -> Occurrence | None:
        current = self._schedule(name)
        if current is None:
            return None
        previous: JobRecord | None = None
        if current.last_job_id is not None and current.last_job_id in self._rows:
            previous, failed = self._load(current.last_job_id)
            if failed:
                previous = None
        decided = decide(current, previous)
        if decided is None:
            return None
        if decided.job is not None and decided.job.id in self._rows:
            raise KeyError(f"a job with id {decided.job.id!r} already exists")
        # All or none: both rows are made before either is written.
        schedule_row = structured_copy(decided.schedule.to_dict())
        if decided.job is not None:
            self._rows[decided.job.id] = structured_copy(decided.job.to_dict())
        self._schedule_rows[name] = schedule_row
        return decided

    def raw_schedules(self) -> dict[str, dict[str, Any]]:
        """The stored schedules' raw values, as DevTools would show them (a test helper)."""
        rows: dict[str, dict[str, Any]] = structured_copy(self._schedule_rows)
        return rows

    def put_raw_schedule(self, value: dict[str, Any]) -> None:
        """Store any value in the schedules store, as other code could (a test helper)."""
        self._schedule_rows[value.get("name")] = structured_copy(value)

    # Test helpers: the raw stored values, as DevTools would show them.
    def raw(self) -> dict[str, dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = structured_copy(self._rows)
        return rows

    def put_raw(self, value: dict[str, Any]) -> None:
        """Store any value as other code could (DevTools, a newer pyjobq): NaN, any depth."""
        try:
            self._rows[value["id"]] = structured_copy(value)
        except RecursionError:
            self._rows[value["id"]] = value  # deeper than json recurses: kept by reference


class VolatileStore:
    """The :class:`~pyjobq.core.ports.Store` of one tab's volatile jobs: records held as they
    are, no copies and no decoding.

    Only the in-tab volatile engine writes here, and only whole :class:`JobRecord` values
    (frozen; a volatile job's ``_params`` is None and its closure stays with the page), so
    nothing foreign or malformed can reach it and nothing else holds a record to change it
    afterwards — what IndexedDB's structured copies and :class:`MemoryStore`'s guard against.
    With ``forget_done``, a record that becomes ``done`` is not kept: the engine publishes it
    from what the write returned, and memory and per-job time stay flat however many jobs ran.
    Failed and cancelled ones stay (``retry_job`` runs their closure again) until deleted —
    or until a new job is added under the same id: only a duplicate *outstanding* id is
    refused (spec "Suspending volatile work": "A duplicate outstanding id returns the existing
    completion promise"; a finished one is free to use again).
    """

    def __init__(self, *, forget_done: bool = True) -> None:
        self._records: dict[str, JobRecord] = {}
        self._forget_done = forget_done

    def _keep(self, record: JobRecord) -> None:
        if self._forget_done and record.status is Status.DONE:
            self._records.pop(record.id, None)
        else:
            self._records[record.id] = record

    async def add(self, records: Sequence[JobRecord]) -> list[JobRecord]:
        kept, dropped = rules.last_per_key(records)
        for record in records:
            existing = self._records.get(record.id)
            if existing is not None and existing.status not in TERMINAL:
                raise KeyError(
                    f"a job with id {record.id!r} already exists and has not finished")
        rules.check_ids(records)
        keys = {r.key for r in kept if rules.replaces(r)}
        replaced = rules.replaced_by(keys, self._records.values()) if keys else []
        for record in replaced:
            del self._records[record.id]
        for record in kept:
            self._keep(record)
        return replaced + dropped

    async def get(self, job_id: str) -> JobRecord | None:
        return self._records.get(job_id)

    async def update(self, change: Change) -> Updated:
        return (await self.update_many([change]))[0]

    async def update_many(self, changes: Sequence[Change]) -> list[Updated]:
        applied = rules.apply_changes(
            changes, lambda _i, change: self._records.get(change.job_id) or Updated(None, False))
        for record in applied.writes:  # all or none: kept only once every change has run
            self._keep(record)
        return applied.done

    async def update_keyed(self, changes: Sequence[KeyChange]) -> KeyUpdated:
        written: dict[str, JobRecord] = {}
        gone: dict[str, JobRecord] = {}
        done: list[Updated] = []
        taken = rules.Taken()
        for change in changes:
            current = self._records.get(change.job_id)
            if current is None or not taken.first(change.job_id):
                done.append(Updated(None, False))
                continue
            others = [] if current.key is None else [
                r for r in self._records.values() if r.key == current.key and r.id != current.id]
            decision = rules.decide_keyed(change, current, others)
            done.append(decision.updated)
            if decision.write is not None:
                written[change.job_id] = decision.write
            if decision.gone is not None:
                gone[current.id] = decision.gone
        for record in written.values():  # all or none: kept only once every change has run
            self._keep(record)
        for job_id in gone:
            del self._records[job_id]
        return KeyUpdated(done, list(gone.values()))

    async def update_by_status(self, statuses: Collection[Status],
                               apply: Callable[[JobRecord], JobRecord | None], *,
                               due_after: float | None = None) -> list[Updated]:
        wanted = frozenset(Status(s) for s in statuses)
        found = rules.oldest_first(r for r in self._records.values() if r.status in wanted and (
            due_after is None or rules.later(r.next_retry_at, due_after)))
        return await self.update_many([Change(r.id, apply, wanted) for r in found])

    async def entries(self, ids: Sequence[str] | None = None) -> list[Entry]:
        if ids is None:
            found = [Entry.of(r) for r in self._records.values() if r.status in UNFINISHED]
        else:
            found = [Entry.of(self._records[i]) for i in ids if i in self._records]
        return rules.oldest_first(found)

    async def delete_many(self, job_ids: Sequence[str],
                          when: Collection[Status] | None = None) -> list[JobRecord]:
        found = (self._records.get(i) for i in dict.fromkeys(job_ids))
        deleted = [r for r in found if r is not None and (when is None or r.status in when)]
        for record in deleted:
            del self._records[record.id]
        return deleted

    async def delete_group(self, group: str) -> list[JobRecord]:
        return await self.delete_many([
            r.id for r in rules.oldest_first(self._records.values()) if r.group == group])

    async def by_status(self, status: str) -> list[JobRecord]:
        wanted = Status(status)
        return rules.oldest_first(r for r in self._records.values() if r.status is wanted)

    async def by_group(self, group: str) -> list[JobRecord]:
        return rules.oldest_first(r for r in self._records.values() if r.group == group)

    async def next_due_at(self, after: float | None = None) -> float | None:
        return rules.soonest(((r.status, r.next_retry_at) for r in self._records.values()), after)

    async def all(self) -> list[JobRecord]:
        return rules.oldest_first(self._records.values())
