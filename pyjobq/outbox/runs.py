"""An outbox run from its claim to its outcome: the lease kept while it runs (:class:`_Renewal`),
the store's check (:class:`_Setup`), the run itself (:class:`_Runs`) and what a failure calls
(:class:`_Outcomes`). The pure decisions on a claim are :mod:`pyjobq.core.outbox_claims`'s."""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal, Mapping

from ..core.codes import Code
from ..core.errors import JobError
from ..core.outbox_claims import (
    RunClaim,
    delivered,
    lease_ran_out,
    renewed,
    rollback_begun,
    undecided,
)
from ..core.ports import Change, Clock, Store, Timer
from ..core.records import JobRecord
from ..core.status import ONLY_FAILED, ONLY_RUNNING, Status
from ..engine.parts import Spawn
from ..engine.scheduler import Scheduler
from ..handle import JobUpdate
from .entries import (
    DELIVERABLE,
    EVENT,
    RENEWALS_PER_LEASE,
    OutboxEntry,
    OutboxHandler,
    OutboxTransport,
    _call,
    log_event,
)


class _Renewal:
    """Keeps one run's lease while the run is in hand (spec outbox.txt: the claim is a lease,
    and a lease that ran out is another processor's to take): every third of the lease, one
    conditional write (:func:`renewed`) pushes its end a whole lease ahead.

    A renewal that finds the record no longer its claim means another processor took the entry
    over: :attr:`lost` is set, ``on_lost`` is called and renewing stops — never a write that
    would take the entry back.
    """

    def __init__(self, store: Store, clock: Clock, claim: RunClaim, lease_ms: float,
                 lease_end: float, on_lost: Callable[[], None], log: logging.Logger) -> None:
        self._store, self._clock, self._claim, self._lease_ms = store, clock, claim, lease_ms
        self._on_lost, self._log = on_lost, log
        #: The end of the lease as this run last wrote it: nobody can take the entry before.
        self.lease_end = lease_end
        self.lost = False
        self._timer: Timer | None = None
        self._writing: asyncio.Future[None] | None = None
        self._stopped = False

    def start(self) -> None:
        self._arm()

    def safe(self) -> bool:
        """True while the entry is certainly this run's: no renewal found it lost, and the lease
        it wrote has not run out (a claim takes a running record only once its lease ended)."""
        return not self.lost and self._clock.now() < self.lease_end

    def mark_lost(self) -> None:
        if not self.lost:
            self.lost = True
            self._on_lost()

    def _arm(self) -> None:
        if not self._stopped and not self.lost:
            self._timer = self._clock.call_later(self._lease_ms / RENEWALS_PER_LEASE, self._due)

    def _due(self) -> None:
        self._timer = None
        if not self._stopped:
            self._writing = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        now = self._clock.now()
        claim, lease_ms = self._claim, self._lease_ms
        try:
            updated = await self._store.update(
                Change(claim.entry_id, lambda cur: renewed(cur, claim, now, lease_ms),
                       ONLY_RUNNING))
        except Exception:
            # A store that failed once may not fail again: the lease has two more renewals in it.
            self._log.exception("pyjobq outbox: renewing the lease of %s failed", claim.entry_id)
        else:
            if updated.applied:
                self.lease_end = now + lease_ms
            else:
                self.mark_lost()
        finally:
            self._writing = None
        self._arm()

    async def stop(self) -> None:
        """Renew no more (the run settles now); a renewal being written is waited for."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writing is not None:
            await asyncio.shield(self._writing)


@dataclass(frozen=True)
class _Setup:
    """What an outbox's parts share: its store, clock, engine, identity and logger."""

    store: Store
    clock: Clock
    scheduler: Scheduler
    source: str
    lease_ms: float
    #: The outbox's logger, read at each use: ``Outbox.log`` may be set after it is made.
    get_log: Callable[[], logging.Logger]

    @property
    def log(self) -> logging.Logger:
        return self.get_log()

    def event(self, phase: str, job_id: Any, job_type: Any, attempts: Any, *,
              level: int = logging.INFO, **more: Any) -> None:
        log_event(self.log, phase, job_id, job_type, attempts, level=level, **more)


@dataclass(eq=False)
class _Runs:
    """Running an entry on this page: its handler, its lease's renewal, what its end stores.

    It remembers each entry whose run started here with its ``given_back`` then, so that the
    engine's news of it can tell a retry from an offline release (:meth:`ended`).
    """

    setup: _Setup
    #: The outbox's transport, read at each run: ``Outbox.transport`` may be set later.
    transport: Callable[[], OutboxTransport | None]
    is_retryable: Callable[[BaseException], bool] | None
    yield_every: int
    idle: Callable[[], Awaitable[Any]]
    #: Ends a failed entry whose rollback waited for this run's word.
    exhaust_failed: Callable[[str], None]
    _started_with: dict[str, int] = field(default_factory=dict)
    _handled: int = 0

    def ended(self, entry_id: str) -> int | None:
        """The run of ``entry_id`` that started here has ended: its ``given_back`` when it
        started; None if no run of it started here (or its end was already told)."""
        return self._started_with.pop(entry_id, None)

    def running_here(self, entry_id: str) -> bool:
        return entry_id in self._started_with

    async def process(self, handler: OutboxHandler, job_id: str | None) -> None:
        setup = self.setup
        record = None if job_id is None else await setup.store.get(job_id)
        if record is None:
            return  # deleted while being handed over: nothing to do
        entry = OutboxEntry.of(record)
        if record.status is not Status.RUNNING or record.owner != setup.source:
            # Taken over before it began (this page froze between the claim and the run): it is
            # another processor's now, and this run sends nothing.
            setup.event("lost", entry.id, entry.type, entry.attempts, level=logging.WARNING)
            return
        claim = RunClaim.of(record)
        self._started_with[entry.id] = record.given_back
        setup.event("start", entry.id, entry.type, entry.attempts)
        # The lease is kept for as long as the run is in hand, transport.send included.
        lease_end = record.next_retry_at if record.next_retry_at is not None else -math.inf
        renewal = _Renewal(setup.store, setup.clock, claim, setup.lease_ms, lease_end=lease_end,
                           on_lost=lambda: self._lost(entry), log=setup.log)
        renewal.start()
        try:
            await self._run(handler, entry, claim, renewal)
        finally:
            self._handled += 1
            if self.yield_every and self._handled % self.yield_every == 0:
                await self.idle()

    async def _run(self, handler: OutboxHandler, entry: OutboxEntry, claim: RunClaim,
                   renewal: _Renewal) -> None:
        sent = False
        try:
            transport = self.transport()
            if transport is not None:
                result = await _call(transport.send, entry)
                await _call(handler.process, entry, result=result)
            else:
                await _call(handler.process, entry)
            sent = True
        except Exception as err:
            classify = handler.is_retryable_error or self.is_retryable
            if classify is not None and not classify(err):
                raise JobError(f"{type(err).__name__}: {err}", terminal=True,
                               status=getattr(err, "status", None),
                               code=getattr(err, "code", None) or "not_retryable") from err
            raise
        finally:
            await renewal.stop()
            if sent:
                await self._deliver(claim, entry, renewal)
            else:
                await self._after_failure(claim, renewal)

    def _lost(self, entry: OutboxEntry) -> None:
        # Another processor took the entry over (this page was frozen past its lease). Its run is
        # the entry's now; this one is not cancelled — process() must be idempotent, and a request
        # already on the wire may deliver — but only a delivery of it is still stored.
        self._started_with.pop(entry.id, None)
        self.setup.event("lost", entry.id, entry.type, entry.attempts, level=logging.WARNING)

    async def _deliver(self, claim: RunClaim, entry: OutboxEntry, renewal: _Renewal) -> None:
        """process() succeeded: if the entry was taken over meanwhile, take it back, so that the
        engine's settle of this run stores it done and deletes it (a delivered entry is never
        rolled back) — unless its rollback has already begun."""
        if renewal.safe():
            return  # still this run's claim: the engine's settle applies as it is
        setup = self.setup
        now, lease_ms = setup.clock.now(), setup.lease_ms
        try:
            [done] = await setup.scheduler.write(
                [Change(claim.entry_id, lambda cur: delivered(cur, claim, now, lease_ms),
                        DELIVERABLE)])
        except Exception:
            setup.log.exception("pyjobq outbox: storing the delivery of %s failed", claim.entry_id)
            return
        if done.applied or claim.holds(done.record):
            return
        if not renewal.lost:
            self._lost(entry)
        late = done.record
        if late is not None and late.status is Status.FAILED:
            setup.event("late", entry.id, entry.type, entry.attempts, level=logging.ERROR,
                        error="delivered after another processor began rolling it back: the "
                              "rollback reverted an entry the server has")
        else:
            setup.event("late", entry.id, entry.type, entry.attempts, level=logging.WARNING,
                        error="delivered after the entry was settled elsewhere (delivered by "
                              "another run, or rolled back and deleted)")

    async def _after_failure(self, claim: RunClaim, renewal: _Renewal) -> None:
        """process() did not succeed. On this run's claim the engine's settle decides; a run that
        lost its claim stores nothing, except when the entry was failed on that very claim (its
        lease ran out on the ceiling): then this failure is the fate its rollback waited for."""
        if renewal.safe():
            return
        current = await self.setup.store.get(claim.entry_id)
        if claim.holds(current):
            return
        renewal.mark_lost()
        if claim.failed_on(current):
            self.exhaust_failed(claim.entry_id)


@dataclass(eq=False)
class _Outcomes:
    """A settled entry's consequences on this page: ``on_activity``, the process-flow log, and a
    failed entry's end (``on_exhausted``, or ``rollback`` then delete)."""

    setup: _Setup
    handlers: Mapping[str, OutboxHandler]
    runs: _Runs
    #: Deletes an entry through the engine (published like every change).
    delete: Callable[[str], Awaitable[bool]]
    on_activity: Callable[[JobUpdate], None] | None
    spawn: Spawn
    #: Entries whose failure this outbox is re-stating (:meth:`_say_lease_ran_out`).
    _saying: set[str] = field(default_factory=set)

    def on_update(self, update: JobUpdate) -> None:
        if self.on_activity is not None:
            try:
                self.on_activity(update)
            except Exception:
                self.setup.log.exception("pyjobq outbox: on_activity raised")
        if update.get("progress_only") or update.get("deleted"):
            return
        job_id, status = update.id, update.get("status")
        job_type, attempts = update.get("type"), update.get("attempts")
        runs, event = self.runs, self.setup.event
        if status == Status.DONE.value:
            runs.ended(job_id)
            event("done", job_id, job_type, attempts)
        elif status == Status.PENDING.value and runs.running_here(job_id):
            given_back = runs.ended(job_id) or 0
            extra: dict[str, Any] = {"error": update.get("error"),
                                     "next_retry_at": update.get("next_retry_at")}
            if (update.get("given_back") or 0) > given_back:
                event("skip", job_id, job_type, attempts, **extra)  # offline: released uncounted
            else:
                event("retry", job_id, job_type, attempts, **extra)
        elif status == Status.FAILED.value and job_id in self._saying:
            self._saying.discard(job_id)  # the news of our own re-statement: handled already
        elif status == Status.FAILED.value:
            ran_here = runs.ended(job_id) is not None
            # Failed with no run of this page ending: this page's claim found the entry's lease
            # run out on its last attempt (the outbox makes no pending entry at its ceiling).
            lease_ran_out = not ran_here and update.get("code") != Code.HANDSHAKE_TIMEOUT
            self.spawn(self.exhaust(job_id, why="lease_ran_out" if lease_ran_out else "failed"))

    async def exhaust(self, job_id: str, *, notify: bool = True,
                      why: Literal["failed", "lease_ran_out", "found"]) -> None:
        """A failed entry's end: ``on_exhausted`` (kept), or ``rollback`` then delete.

        ``why`` says what is known of its last run: ``"failed"`` — it failed (a run said so);
        ``"lease_ran_out"`` — this processor's claim found its lease run out on the ceiling, so
        it may still deliver and is not rolled back (:func:`undecided`); ``"found"`` — failed in
        the store at ``start()``: rolled back unless it is :func:`undecided`.
        """
        record = await self.setup.store.get(job_id)
        if record is None or record.status is not Status.FAILED:
            return
        handler = self.handlers.get(record._reconstructor)
        if handler is None:
            self.setup.log.warning(
                "never-happen: outbox entry %s has unknown type %r; deleted", record.id,
                record._reconstructor, extra={"outbox_event": EVENT, "phase": "unknown_type",
                                              "entry_id": record.id,
                                              "entry_type": record._reconstructor})
            await self.delete(record.id)  # through the engine: published
            return
        if why == "lease_ran_out":
            record = await self._say_lease_ran_out(record)
        entry = OutboxEntry.of(record)
        if notify:
            self.setup.event("error", entry.id, entry.type, entry.attempts, level=logging.WARNING,
                              error=entry.error, code=entry.code)
        if handler.on_exhausted is None and handler.rollback is not None \
                and not await self._begin_rollback(record, entry, why):
            return
        try:
            if handler.on_exhausted is not None:
                if notify:
                    await _call(handler.on_exhausted, entry)
                return  # kept as failed: list_failed() / retry()
            if handler.rollback is not None:
                await _call(handler.rollback, entry)
        except Exception:
            # The record stays failed: the work is kept rather than half undone.
            self.setup.log.exception(
                "pyjobq outbox: exhaustion handler of %s raised; entry %s kept as failed",
                entry.type, entry.id)
            return
        await self.delete(entry.id)  # through the engine: published

    async def _begin_rollback(self, record: JobRecord, entry: OutboxEntry,
                              why: Literal["failed", "lease_ran_out", "found"]) -> bool:
        """Whether the rollback of a failed entry may run now; marks it begun if so."""
        if why == "lease_ran_out" or (why == "found" and undecided(record)):
            # A revert cannot be taken back, and the run may yet deliver: the rollback waits
            # for that run's word (RunClaim.failed_on); until then it is in list_failed().
            self.setup.event("undecided", entry.id, entry.type, entry.attempts,
                              error="not rolled back while the run whose lease ran out may "
                                    "still deliver")
            return False
        # Marked first, in one conditional write: a delivery that lands before this takes the
        # entry back and the rollback does not run; one after cannot undo it. Straight to the
        # store, unpublished: the mark changes nothing a user sees.
        source = self.setup.source
        begun = await self.setup.store.update(
            Change(entry.id, lambda cur: rollback_begun(cur, source), ONLY_FAILED))
        return begun.applied  # False: delivered, retried or deleted meanwhile

    async def _say_lease_ran_out(self, seen: JobRecord) -> JobRecord:
        """Store the failure as what happened (:func:`lease_ran_out`), published; what is
        stored after."""
        if lease_ran_out(seen, seen) is None:
            return seen
        self._saying.add(seen.id)
        try:
            [said] = await self.setup.scheduler.write(
                [Change(seen.id, lambda cur: lease_ran_out(cur, seen), ONLY_FAILED)])
        except BaseException:
            self._saying.discard(seen.id)
            raise
        if not said.applied:
            self._saying.discard(seen.id)  # nothing published
        return said.record if said.record is not None else seen

