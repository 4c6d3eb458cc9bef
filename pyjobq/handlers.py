"""The requests a page sends its scheduler, as one table of handlers.

Theory of operation
-------------------
A request is a message with a ``request_id``; its handler's return value (JSON) or
its error goes back in a ``reply``. :class:`RequestHandlers` holds the table,
message type to handler, so the requests a scheduler answers are one list a reader
can see (:data:`REQUESTS`), not names found by ``getattr``.

Every change a handler makes is a :class:`~pyjobq.core.ports.Change` with its status
precondition, written through the engine's :meth:`~pyjobq.scheduler.Scheduler.write`:
one transaction, and what applied is published — the guard lives in ``when``, not
in the closure. Handlers run on whichever tab the page is in, lease or not: the
store's transactions are what keep tabs apart.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from .codes import Code
from .core import policy
from .core.messages import make
from .core.ports import Change
from .core.records import JobRecord, NewJob
from .core.mode import RETENTION_MS
from .core.status import ONLY_PAUSED, ONLY_PENDING, REVIVABLE, UNFINISHED, Status
from .retention import sweep

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
            if request_id is not None:
                link.send(make("reply", request_id=request_id, ok=False,
                               error=str(exc), error_type=type(exc).__name__))
            return
        if request_id is not None:
            link.send(make("reply", request_id=request_id, ok=True, value=value))

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

    async def delete_job(self, msg: dict[str, Any]) -> bool:
        return await self._delete([msg["job_id"]]) == 1

    async def delete_group(self, msg: dict[str, Any]) -> int:
        return await self._delete([r.id for r in await self._engine.store.by_group(msg["group"])])

    async def _delete(self, job_ids: list[str]) -> int:
        engine = self._engine
        existing = [r for r in [await engine.store.get(i) for i in job_ids] if r is not None]
        await engine.store.delete_many([r.id for r in existing])
        for record in existing:
            engine.abandon(record.id)
        engine.publish_many(existing, deleted=True, error="deleted", code=Code.DELETED)
        return len(existing)

    async def cancel_job(self, msg: dict[str, Any]) -> bool:
        now = self._engine.clock.now()
        [updated] = await self._engine.write([Change(msg["job_id"], lambda cur: policy.cancel(cur, now), UNFINISHED)])
        if not updated.applied:
            return False
        self._engine.abandon(msg["job_id"])
        return True

    async def retry_job(self, msg: dict[str, Any]) -> bool:
        return await self._revive([msg["job_id"]]) == 1

    async def retry_all(self, _msg: dict[str, Any]) -> int:
        store = self._engine.store
        ids = [r.id for r in await store.by_status(Status.FAILED)]
        ids += [r.id for r in await store.by_status(Status.CANCELLED)]
        return await self._revive(ids)

    async def _revive(self, job_ids: list[str]) -> int:
        now = self._engine.clock.now()
        done = await self._engine.write([Change(i, lambda cur: policy.revive(cur, now), REVIVABLE) for i in job_ids])
        count = sum(1 for updated in done if updated.applied)
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
        pending = [r.id for r in await engine.store.by_status(Status.PENDING) if r.type == job_type]
        done = await engine.write([Change(i, lambda cur: policy.park(cur, now, None), ONLY_PENDING) for i in pending])
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
        paused = [r.id for r in await engine.store.by_status(Status.PAUSED)
                  if r.type == job_type and r.yield_lock is None]
        done = await engine.write([Change(i, lambda cur: _unpark_suspended(cur, now), ONLY_PAUSED) for i in paused])
        engine.wake()
        return sum(1 for updated in done if updated.applied)


def _unpark_suspended(cur: JobRecord, now: float) -> JobRecord | None:
    # Parked by a suspension, not by a yield lock (those unpark when their lock is free).
    return policy.unpark(cur, now) if cur.yield_lock is None else None

