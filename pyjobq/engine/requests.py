"""The requests a page sends its scheduler, as one table of handlers.

Runs wherever an engine runs: in the scheduler worker, and in the page — the waiting tab's
request scheduler (which answers its page's store requests while its worker waits for the
lease, pyjobq/browser/page_main.py), the volatile engine and the outbox.

Theory of operation
-------------------
A request is a message with a ``request_id``; its handler's return value (JSON) or
its error goes back in a ``reply``. :class:`RequestTable` holds the table,
message type to handler, so the requests a scheduler answers are one list a reader
can see (:attr:`RequestTable.table`), not names found by ``getattr``. It is given only
what it uses of its engine (:class:`RequestEngine`), and owns the two pieces of state
the requests change: the suspended types (``suspend_type``, read by the pass and the
settle) and the filing stamp that keeps a burst in filing order.

Every change a handler makes is a :class:`~pyjobq.core.ports.Change` with its status
precondition, written through the engine's one way to the store (``RequestEngine.write``):
one transaction, and what applied is published — the guard lives in ``when``, not
in the closure; a delete reads what it deletes in its one transaction. Handlers run
on whichever tab the page is in, lease or not: the store's transactions are what keep
tabs apart, and they apply in the order the requests came (each handler's first store
call is made in its first step), so a page's calls take effect in the order it made them.

A request is always answered when it asked for a reply: with its value, its handler's
error, or — malformed, or come after the scheduler stopped — a refusal (:meth:`refuse`),
never silence that would leave the caller waiting for ever.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import AbstractSet, Any, Awaitable, Callable, Sequence

from ..core import keys, policy
from ..core.codes import REPLACED_ERROR, Code
from ..core.errors import InvalidJobError
from ..core.messages import make
from ..core.mode import RETENTION_MS, Mode
from ..core.ports import REPLACE, Change, Clock, KeyChange, KeyUpdated, Replace, Store, Updated
from ..core.records import JobRecord, NewJob
from ..core.status import KNOWN, ONLY_PAUSED, ONLY_PENDING, REVIVABLE, UNFINISHED
from .inflight import FlightTable
from .parts import Publish, Send, Write
from .sweeper import sweep

log = logging.getLogger("pyjobq")

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class RequestEngine:
    """What the request table uses of its engine (pyjobq/engine/scheduler.py makes it)."""

    #: ``volatile``: ``query_all`` marks its rows so; its retention: what ``cleanup_old`` sweeps.
    mode: Mode
    clock: Clock
    store: Store
    #: Read only: ``suspend_type`` waits for the runs of its type.
    flights: FlightTable
    send: Send
    write: Write
    publish: Publish
    #: Process soon: what a request filed or revived may be due.
    wake: Callable[[], None]
    #: Drop a run of a job deleted or cancelled here (pyjobq/engine/handoff.py).
    abandon: Callable[[str], None]


class RequestTable:
    """What a scheduler answers, by message type."""

    def __init__(self, engine: RequestEngine) -> None:
        self._engine = engine
        #: Suspended types (``suspend_type``): their pending jobs park, new ones too.
        self._suspended: set[str] = set()
        #: Per suspended type, when each job it parked in a backoff was due (by job id): what
        #: ``resume_type`` keeps (a paused record has no ``next_retry_at`` of its own). Kept in
        #: memory: suspending is the volatile engine's, whose jobs live only in this tab.
        self._backoffs: dict[str, dict[str, float]] = {}
        self._last_created = 0.0
        self.table: dict[str, Handler] = {
            "enqueue": self.enqueue,
            "query_all": self.query_all,
            "get_job": self.get_job,
            "ended_jobs": self.ended_jobs,
            "delete_job": self.delete_job,
            "delete_group": self.delete_group,
            "cancel_job": self.cancel_job,
            "retry_job": self.retry_job,
            "retry_all": self.retry_all,
            "cleanup_old": self.cleanup_old,
            "suspend_type": self.suspend_type,
            "resume_type": self.resume_type,
        }

    @property
    def suspended(self) -> AbstractSet[str]:
        """The types ``suspend_type`` suspended and ``resume_type`` has not resumed."""
        return self._suspended

    def _stamp(self) -> float:
        """A created_at that strictly increases on this engine, so jobs filed in one
        millisecond still drain in filing order (lanes order by created_at, then id)."""
        self._last_created = max(self._engine.clock.now(), self._last_created + 0.001)
        return self._last_created

    async def answer(self, msg: dict[str, Any]) -> None:
        """Run the request's handler and reply
        (when it asked for a reply) with its value or error."""
        request_id = msg.get("request_id")
        try:
            value = await self.table[msg["type"]](msg)
        except Exception as exc:
            log.info("pyjobq: %s failed: %s", msg["type"], exc)
            self._fail(request_id, str(exc), type(exc).__name__)
            return
        if request_id is not None:
            try:
                self._engine.send(make("reply", request_id=request_id, ok=True, value=value))
            except Exception as exc:  # a value the link cannot carry: the caller still hears
                self._fail(request_id, f"{msg['type']}'s answer could not be sent: {exc}",
                           "PyjobqError")

    def refuse(self, data: Any, why: str, error_type: str = "InvalidJobError") -> None:
        """Answer a request this scheduler will not run — malformed (the router's refusal), or
        come after it stopped — with an error, so its caller hears at once rather than never.
        Anything that is not a request of this table, with a ``request_id``, gets no answer."""
        if (isinstance(data, dict) and isinstance(data.get("type"), str)
                and data["type"] in self.table):
            self._fail(data.get("request_id"), why, error_type)

    def _fail(self, request_id: Any, error: str, error_type: str) -> None:
        if isinstance(request_id, str):
            self._engine.send(make("reply", request_id=request_id, ok=False, error=error,
                                   error_type=error_type))

    # ------------------------------------------------------------ filing and reading

    async def enqueue(self, msg: dict[str, Any]) -> int:
        engine = self._engine
        now = engine.clock.now()
        jobs = [NewJob.from_message(job) for job in msg["jobs"]]
        # The stamp only orders the burst; a job is due at now + delay_ms, or one filed in
        # the same millisecond as another would wait for the clock to pass its stamp.
        records = [job.to_record(self._stamp(), due=now + job.delay_ms) for job in jobs]
        # Keys that replace: the waiting job of each key goes in the transaction that stores
        # the new one (Store.add), so a debounce is one call and no moment holds both or neither.
        replaced = await engine.store.add(records)
        gone = {r.id for r in replaced}  # a burst's own earlier jobs of a key are never stored
        engine.publish([r for r in records if r.id not in gone])
        if replaced:  # waiting, never running: no run of them to abandon
            engine.publish(replaced, deleted=True, error=REPLACED_ERROR, code=Code.REPLACED)
        engine.wake()
        return len(records)

    async def query_all(self, msg: dict[str, Any]) -> list[dict[str, Any]]:
        """Every record; or, given ``status``, ``job_type`` or ``group``, those matching every
        one given, read through the store's status or group index where one is given and
        filtered before any is made a dict (``pyjobq.jobs``)."""
        status, job_type, group = msg.get("status"), msg.get("job_type"), msg.get("group")
        store = self._engine.store
        if status is not None and status not in KNOWN:
            raise InvalidJobError(f"query_all(status): not a status: {status!r}")
        if status is not None:
            records = await store.by_status(status)
        elif group is not None:
            records = await store.by_group(group)
        else:
            records = await store.all()
        return [self._listed(record) for record in records
                if (group is None or record.group == group)
                and (job_type is None or record.type == job_type)]

    async def get_job(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        record = await self._engine.store.get(msg["job_id"])
        return None if record is None else self._listed(record)

    async def ended_jobs(self, msg: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
        """Which of ``job_ids`` have ended: each finished one's record, None for each with no
        record; unfinished ones are left out (a page's recheck of the handles it awaits)."""
        job_ids = msg["job_ids"]
        if not all(isinstance(job_id, str) for job_id in job_ids):
            raise InvalidJobError(f"ended_jobs(job_ids): expected a list of job ids (str), got "
                                  f"{job_ids!r:.200}")
        store = self._engine.store
        # One transaction reads them all without their payloads. Only the ones not found
        # unfinished are read whole: the ended ones (their news lost, rare), the gone ones and a
        # malformed one, which entries() leaves out and get() returns failed.
        unfinished = {entry.id for entry in await store.entries(job_ids)
                      if entry.status in UNFINISHED}
        found: dict[str, dict[str, Any] | None] = {}
        for job_id in dict.fromkeys(job_ids):
            if job_id in unfinished:
                continue
            record = await store.get(job_id)
            if record is None:
                found[job_id] = None
            elif record.status not in UNFINISHED:
                found[job_id] = self._listed(record)
        return found

    def _listed(self, record: JobRecord) -> dict[str, Any]:
        """A record as ``query_all`` lists it: the volatile engine's marked ``volatile``."""
        listed = record.to_dict()
        return {**listed, "volatile": True} if self._engine.mode.volatile else listed

    # ------------------------------------------------------------ changing

    # Each delete reads what it deletes in its own transaction (Store.delete_many, delete_group):
    # a read and then a delete in another would lose a retry_job that landed between them.

    async def delete_job(self, msg: dict[str, Any]) -> bool:
        return self._deleted(await self._engine.store.delete_many([msg["job_id"]])) == 1

    async def delete_group(self, msg: dict[str, Any]) -> int:
        return self._deleted(await self._engine.store.delete_group(msg["group"]))

    def _deleted(self, records: list[JobRecord]) -> int:
        engine = self._engine
        for record in records:
            engine.abandon(record.id)
        engine.publish(records, deleted=True, error="deleted", code=Code.DELETED)
        return len(records)

    async def cancel_job(self, msg: dict[str, Any]) -> bool:
        now = self._engine.clock.now()
        [updated] = await self._engine.write(
            [Change(msg["job_id"], lambda cur: policy.cancel(cur, now), UNFINISHED)])
        if not updated.applied:
            return False
        self._engine.abandon(msg["job_id"])
        return True

    async def retry_job(self, msg: dict[str, Any]) -> bool:
        """Revive a failed or cancelled job; an older job of a key whose newer job is stored
        ends as replaced instead (:func:`pyjobq.core.keys.landed_over`): the newest of a key
        lands last. Returns whether it was revived."""
        done = await self._revived([msg["job_id"]])
        revived = self._published(done.updated) == 1
        if revived:
            self._engine.wake()
        return revived

    async def retry_all(self, _msg: dict[str, Any]) -> int:
        """Revive every failed and cancelled job, in one transaction; those of a key, each on
        its key's records as stored (as :meth:`retry_job`), in a second. Returns how many."""
        now = self._engine.clock.now()
        unkeyed = await self._engine.store.update_by_status(
            REVIVABLE, lambda cur: policy.revive(cur, now) if cur.key is None else None)
        count = self._published(unkeyed)
        keyed = [u.record.id for u in unkeyed
                 if not u.applied and u.record is not None and u.record.key is not None]
        if keyed:
            count += self._published((await self._revived(keyed)).updated)
        if count:
            self._engine.wake()
        return count

    async def _revived(self, job_ids: list[str]) -> KeyUpdated:
        engine = self._engine
        now = engine.clock.now()

        def revive(cur: JobRecord, others: Sequence[JobRecord]) -> JobRecord | Replace:
            return REPLACE if keys.landed_over(cur, others) else policy.revive(cur, now)

        done = await engine.store.update_keyed([KeyChange(i, revive, REVIVABLE) for i in job_ids])
        if done.replaced:
            engine.publish(done.replaced, deleted=True, error=REPLACED_ERROR, code=Code.REPLACED)
        return done

    async def cleanup_old(self, msg: dict[str, Any]) -> int:
        """Delete ``done`` records older than their retention (7 days unless configured) — and
        only those, with ``failed`` ones past theirs when the queue keeps failed jobs for a
        while (spec: "Startup and cleanup") — and publish the deletions so open tables drop
        the rows."""
        engine = self._engine
        return await sweep(engine.store, engine.clock.now(),
                           engine.mode.retention_ms or RETENTION_MS,
                           lambda records: engine.publish(records, deleted=True),
                           engine.mode.failed_retention_ms)

    # ------------------------------------------------------------ suspending a type (volatile)

    async def suspend_type(self, msg: dict[str, Any]) -> int:
        """Park pending jobs of the type (future ones too), abort its running one, and
        answer once that run has settled (spec: "Suspending volatile work")."""
        engine = self._engine
        job_type = msg["job_type"]
        self._suspended.add(job_type)
        now = engine.clock.now()
        # Read in the transaction that parks: the record as it was when parked.
        due: dict[str, float] = {}

        def park(cur: JobRecord) -> JobRecord | None:
            if cur.type != job_type:
                return None
            left = policy.backoff_left(cur, now)
            if left is not None:
                due[cur.id] = left
            return policy.park(cur, now, None)

        done = await engine.store.update_by_status(ONLY_PENDING, park)
        kept = self._backoffs.setdefault(job_type, {})
        kept.update({u.record.id: due[u.record.id] for u in done
                     if u.applied and u.record is not None and u.record.id in due})
        self._published(done)
        running = engine.flights.of_type(job_type)
        # A run abandoned (cancelled, deleted) but still ending is an executor that has not
        # settled either: it may still be saving its checkpoint. It was told to stop already.
        waits = [flight.wait_settled()
                 for flight in running + engine.flights.ending_of_type(job_type)]
        for flight in running:
            engine.send(make("abort_run", job_id=flight.job_id,
                             reason=f"type {job_type!r} suspended"))
        for wait in waits:
            await wait
        return sum(1 for updated in done if updated.applied)

    async def resume_type(self, msg: dict[str, Any]) -> int:
        engine = self._engine
        job_type = msg["job_type"]
        now = engine.clock.now()
        due = self._backoffs.pop(job_type, {})
        # Still suspended while the jobs unpark: a pass in between would see paused jobs of a
        # type not suspended and unpark them due now, dropping what was left of their backoff.
        count = self._published(await engine.store.update_by_status(
            ONLY_PAUSED, lambda cur: _unpark_suspended(cur, now, due.get(cur.id))
            if cur.type == job_type else None))
        self._suspended.discard(job_type)
        engine.wake()
        return count

    def _published(self, done: list[Updated]) -> int:
        """Publish what one transaction changed (as the engine's ``write`` does); how many."""
        changed = [u.record for u in done if u.applied and u.record is not None]
        self._engine.publish(changed)
        return len(changed)


def _unpark_suspended(cur: JobRecord, now: float, due_at: float | None) -> JobRecord | None:
    # Parked by a suspension, not by a yield lock (those unpark when their lock is free); due
    # when its backoff ends, if it was waiting one out when parked.
    return policy.unpark(cur, now, due_at) if cur.yield_lock is None else None

