"""The requests a page sends its scheduler, as one table of handlers.

Theory of operation
-------------------
A request is a message with a ``request_id``; its handler's return value (JSON) or
its error goes back in a ``reply``. :class:`RequestHandlers` holds the table,
message type to handler, so the requests a scheduler answers are one list a reader
can see (:data:`REQUESTS`), not names found by ``getattr``.

Every change a handler makes is a :class:`~pyjobq.core.ports.Change` with its status
precondition, written through the engine's :meth:`~pyjobq.engine.scheduler.Scheduler.write`:
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
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..core.codes import Code
from ..core import policy
from ..core.messages import make
from ..core.ports import Change, Updated
from ..core.records import JobRecord, NewJob
from ..core.mode import RETENTION_MS
from ..core.status import ONLY_PAUSED, ONLY_PENDING, REVIVABLE, UNFINISHED
from .sweeper import sweep

if TYPE_CHECKING:
    from .scheduler import Scheduler

log = logging.getLogger("pyjobq")

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class RequestHandlers:
    """What a scheduler answers, by message type."""

    def __init__(self, engine: "Scheduler") -> None:
        self._engine = engine
        self.table: dict[str, Handler] = {
            "enqueue": self.enqueue,
            "query_all": self.query_all,
            "get_job": self.get_job,
            "delete_job": self.delete_job,
            "delete_group": self.delete_group,
            "cancel_job": self.cancel_job,
            "retry_job": self.retry_job,
            "retry_all": self.retry_all,
            "cleanup_old": self.cleanup_old,
            "suspend_type": self.suspend_type,
            "resume_type": self.resume_type,
        }

    async def answer(self, msg: dict[str, Any]) -> None:
        """Run the request's handler and reply (when it asked for a reply) with its value or error."""
        request_id = msg.get("request_id")
        link = self._engine.link
        try:
            value = await self.table[msg["type"]](msg)
        except Exception as exc:
            log.info("pyjobq: %s failed: %s", msg["type"], exc)
            self._fail(request_id, str(exc), type(exc).__name__)
            return
        if request_id is not None:
            try:
                link.send(make("reply", request_id=request_id, ok=True, value=value))
            except Exception as exc:  # a value the link cannot carry: the caller still hears
                self._fail(request_id, f"{msg['type']}'s answer could not be sent: {exc}", "PyjobqError")

    def refuse(self, data: Any, why: str, error_type: str = "InvalidJobError") -> None:
        """Answer a request this scheduler will not run — malformed (the router's refusal), or
        come after it stopped — with an error, so its caller hears at once rather than never.
        Anything that is not a request of this table, with a ``request_id``, gets no answer."""
        if isinstance(data, dict) and isinstance(data.get("type"), str) and data["type"] in self.table:
            self._fail(data.get("request_id"), why, error_type)

    def _fail(self, request_id: Any, error: str, error_type: str) -> None:
        if isinstance(request_id, str):
            self._engine.link.send(make("reply", request_id=request_id, ok=False, error=error,
                                        error_type=error_type))

    # ------------------------------------------------------------ filing and reading

    async def enqueue(self, msg: dict[str, Any]) -> int:
        engine = self._engine
        now = engine.clock.now()
        jobs = [NewJob.from_message(job) for job in msg["jobs"]]
        # The stamp only orders the burst; a job is due at now + delay_ms, or one filed in
        # the same millisecond as another would wait for the clock to pass its stamp.
        records = [job.to_record(engine.stamp()).evolve(next_retry_at=now + job.delay_ms) for job in jobs]
        await engine.store.add(records)
        engine.publish_many(records)
        engine.wake()
        return len(records)

    async def query_all(self, _msg: dict[str, Any]) -> list[dict[str, Any]]:
        volatile = self._engine.mode.volatile
        return [
            {**record.to_dict(), "volatile": True} if volatile else record.to_dict()
            for record in await self._engine.store.all()
        ]

    async def get_job(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        record = await self._engine.store.get(msg["job_id"])
        return None if record is None else record.to_dict()

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
        engine.publish_many(records, deleted=True, error="deleted", code=Code.DELETED)
        return len(records)

    async def cancel_job(self, msg: dict[str, Any]) -> bool:
        now = self._engine.clock.now()
        [updated] = await self._engine.write([Change(msg["job_id"], lambda cur: policy.cancel(cur, now), UNFINISHED)])
        if not updated.applied:
            return False
        self._engine.abandon(msg["job_id"])
        return True

    async def retry_job(self, msg: dict[str, Any]) -> bool:
        now = self._engine.clock.now()
        [updated] = await self._engine.write([Change(msg["job_id"], lambda cur: policy.revive(cur, now), REVIVABLE)])
        if updated.applied:
            self._engine.wake()
        return updated.applied

    async def retry_all(self, _msg: dict[str, Any]) -> int:
        now = self._engine.clock.now()
        count = self._published(await self._engine.store.update_by_status(
            REVIVABLE, lambda cur: policy.revive(cur, now)))
        if count:
            self._engine.wake()
        return count

    async def cleanup_old(self, msg: dict[str, Any]) -> int:
        """Delete ``done`` records older than 7 days — and only those (spec: "Startup and cleanup"),
        in one transaction, and publish the deletions so open tables drop the rows."""
        engine = self._engine
        return await sweep(engine.store, engine.clock.now(), RETENTION_MS,
                           lambda records: engine.publish_many(records, deleted=True))

    # ------------------------------------------------------------ suspending a type (volatile)

    async def suspend_type(self, msg: dict[str, Any]) -> int:
        """Park pending jobs of the type (future ones too), abort its running one, and
        answer once that run has settled (spec: "Suspending volatile work")."""
        engine = self._engine
        job_type = msg["job_type"]
        engine.suspended.add(job_type)
        now = engine.clock.now()
        done = await engine.store.update_by_status(
            ONLY_PENDING, lambda cur: policy.park(cur, now, None) if cur.type == job_type else None)
        self._published(done)
        running = engine.flights.of_type(job_type)
        # A run abandoned (cancelled, deleted) but still ending is an executor that has not
        # settled either: it may still be saving its checkpoint. It was told to stop already.
        waits = [flight.wait_settled() for flight in running + engine.flights.ending_of_type(job_type)]
        for flight in running:
            engine.link.send(make("abort_run", job_id=flight.job_id, reason=f"type {job_type!r} suspended"))
        for wait in waits:
            await wait
        return sum(1 for updated in done if updated.applied)

    async def resume_type(self, msg: dict[str, Any]) -> int:
        engine = self._engine
        job_type = msg["job_type"]
        engine.suspended.discard(job_type)
        now = engine.clock.now()
        count = self._published(await engine.store.update_by_status(
            ONLY_PAUSED, lambda cur: _unpark_suspended(cur, now) if cur.type == job_type else None))
        engine.wake()
        return count

    def _published(self, done: list[Updated]) -> int:
        """Publish what one transaction changed (as :meth:`Scheduler.write` does); how many."""
        changed = [u.record for u in done if u.applied and u.record is not None]
        self._engine.publish_many(changed)
        return len(changed)


def _unpark_suspended(cur: JobRecord, now: float) -> JobRecord | None:
    # Parked by a suspension, not by a yield lock (those unpark when their lock is free).
    return policy.unpark(cur, now) if cur.yield_lock is None else None

