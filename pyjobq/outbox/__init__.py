"""The outbox: a claim/lease worker with per-type handlers, on the job queue's engine.

Theory of operation
-------------------
:class:`Outbox` gives users of the ``@yorozu/outbox`` package its shape — a
store, a handler per entry type, ``start()`` / ``wake()`` / ``stop()`` — without a
second engine. Underneath it is one :class:`~pyjobq.engine.scheduler.Scheduler` and one
:class:`~pyjobq.executor.side.ExecutorSide` wired by an in-memory link, exactly as the
volatile queue runs, over the injected :class:`~pyjobq.core.ports.Store`
(:class:`~pyjobq.memory.MemoryStore` or :class:`~pyjobq.browser.idb.IndexedDBStore`).
An entry is a :class:`~pyjobq.core.records.JobRecord` whose ``_reconstructor``
and ``type`` name its handler and whose ``_params`` is its payload.

The scheduler runs in its outbox mode (:data:`~pyjobq.core.mode.OUTBOX`): claims
are leases (``lease_ms``; a lease that ran out is due work, so outboxes in several
tabs share a store without sharing a lock; the page renews the lease every third
of it while ``process()`` runs), success deletes the record, claims are
FIFO by ``created_at`` across types and one at a time (a ``msg/react`` never reaches
the server before its ``msg/send``), and the backoff is the outbox's
``min(base·2^(attempts−1), cap)`` minus 0–20 %. None of the job queue's HTTP status
rules apply: a 401 or a 403/409/422 is an error like any other, which the handler's
``is_retryable_error`` classifies (non-retryable, or the last attempt spent →
``on_exhausted`` or ``rollback``); a failure while offline is released uncounted
(no attempt spent) and skipped until the network is back or its ladder slot comes.

The engine listens from the first request on, while its processor lease — a
:class:`~pyjobq.engine.lease.GateLease` — is open only from ``start()`` to ``stop()``: an
entry enqueued before ``start()`` or after ``stop()`` is stored at once and sent
when the outbox (re)starts; ``stop()`` then ``start()`` drains again, and so does
:meth:`Outbox.resume`, the spec's "drains on … resume".

What is the outbox's own lives here, on the page side: calling ``process`` (after
``transport.send`` when one is set), classifying errors with
``is_retryable_error`` (a non-retryable error becomes a terminal failure), and —
once the engine has stored a record as failed — ``on_exhausted`` (kept for a
manual retry) or ``rollback`` then delete. An unknown type is logged and deleted.
Both deletes go through the engine, so they are published like any other change
(``on_activity`` and a ``job-update`` with ``deleted``).

Two processors, one entry. A live page never loses its lease (``_Renewal``, in
:mod:`pyjobq.outbox.runs`); a page frozen past it does, and another outbox takes the entry
over. Without a common lock every decision between them is one conditional write on the
record (:mod:`pyjobq.core.outbox_claims`: a run's ``RunClaim`` and the pure functions on it),
so exactly one side wins each race:

* a renewal applies only to this run's own claim: it never takes an entry back;
* a delivery (``process()`` succeeded) takes the entry back from any other run,
  pending retry or failure, and is stored done — unless a rollback began;
* a rollback is marked on the failed record before it runs, so a delivery after
  the mark cannot undo it (logged ``late``, an error);
* a lease that ran out on the last attempt fails the entry (``page_gone``), but a
  revert cannot be taken back and that run may yet deliver: it is rolled back only
  once that run reports a failure (``RunClaim.failed_on``); ``on_exhausted``,
  which reverts nothing, is called at once.

Known limits: ``rollback`` runs after the failed record is stored, so a page that
dies in between leaves a failed record; the next ``start()`` finishes it before it
prunes (so ``rollback`` must be idempotent, like ``process``). Cross-tab wake-ups
are the host's to send (call :meth:`Outbox.wake`); the ``poll_interval_ms``
watchdog is the fuse.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Coroutine, Mapping

from ..core import policy
from ..core.errors import InvalidJobError, OrphanedJobError, StoreInUseError
from ..core.mode import OUTBOX
from ..core.ports import Clock, Store, Timer
from ..core.records import DEFAULT_MAX_ATTEMPTS, FETCH, MALFORMED, JobRecord, check_str, new_id
from ..core.status import Status
from ..engine.lease import GateLease
from ..executor.side import ExecutorSide, current_job_id
from ..executor.wiring import InProcess, in_process
from ..handle import Job, JobUpdate
from ..loop import TaskSet
from ..memory import ChannelHub, LoopClock
from .entries import (
    _AN_ENTRY_ID,
    DAY_MS,
    DEFAULT_LEASE_MS,
    DEFAULT_POLL_INTERVAL_MS,
    EVENT,
    RENEWALS_PER_LEASE,
    OutboxEntry,
    OutboxHandler,
    OutboxTransport,
    Prune,
    _outbox_idle,
    log_event,
    outbox_backoff,
)
from .runs import _Outcomes, _Runs, _Setup

__all__ = ["Outbox", "OutboxEntry", "OutboxHandler", "OutboxTransport", "Prune", "outbox_backoff",
           "log_event", "DAY_MS", "DEFAULT_LEASE_MS", "DEFAULT_POLL_INTERVAL_MS", "EVENT",
           "RENEWALS_PER_LEASE"]


def _check_options(transport: Any, yield_every: Any, lease_ms: Any) -> None:
    """Raise :class:`InvalidJobError` naming the first option an :class:`Outbox` cannot use."""
    if transport is not None and not callable(getattr(transport, "send", None)):
        raise InvalidJobError("transport must have a send(entry) method")
    if isinstance(yield_every, bool) or not isinstance(yield_every, int) or yield_every < 0:
        raise InvalidJobError(f"yield_every must be an int >= 0, got {yield_every!r}")
    if isinstance(lease_ms, bool) or not isinstance(lease_ms, (int, float)) or not lease_ms > 0:
        raise InvalidJobError(
            f"lease_ms must be a positive number of milliseconds, got {lease_ms!r}")


def _outbox_engine(store: Store, source: str, clock: Clock, is_online: Callable[[], bool],
            lease_ms: float, gate: GateLease, backoff: Callable[[int], float] | None) -> InProcess:
    """The outbox's engine, in this process: private channels and locks (its leases are what keep
    two tabs apart), its processor lease the gate ``start()`` opens and ``stop()`` closes, not
    started until the store check passed (``Outbox._check_store``)."""
    return in_process(
        store=store, source=source, clock=clock, lock_name="pyjobq-outbox", is_online=is_online,
        mode=OUTBOX.with_lease(lease_ms), lease=gate,
        backoff=backoff if backoff is not None else outbox_backoff(), start=False)



class Outbox:
    """A durable outbox over an injected store: entries are claimed, processed by their type's
    handler, deleted.

    Args:
        store: a :class:`~pyjobq.core.ports.Store` (``MemoryStore()``, ``IndexedDBStore(name)``).
        handlers: entry type → :class:`OutboxHandler` (or a dict of its fields).
        clock: milliseconds and timers; default wall clock and asyncio timers.
        is_online: read when an attempt fails; offline failures cost no attempt.
        subscribe_online: ``subscribe_online(callback) -> unsubscribe``; the outbox drains on each
            call.
        is_retryable_error: for types whose handler has none; default: every error is retryable.
        on_activity: called with each job-update (a dict) — push the outbox's status from here.
        transport: an object whose ``send(entry)`` result is handed to
            ``process(entry, result=...)``.
        poll_interval_ms: the watchdog fuse (default 30 s); 0 or None disables it.
        yield_every: after this many handled entries, ``await idle()`` (default 1); 0 disables.
        idle: what yielding awaits; default ``asyncio.sleep(0)``. In a page, a
            ``requestIdleCallback`` with ``timeout: 1``.
        prune: :class:`Prune` (default: 90 days, 200 failed) run on ``start()``; False to disable.
        log: a logger; default ``logging.getLogger("pyjobq")``, silent until the host configures
            logging.
        lease_ms: how long a claim holds an entry before another processor may take it.
        backoff: the retry ladder; default :func:`outbox_backoff`. ``make_backoff()`` gives the
            job queue's.
        max_attempts: default ceiling for :meth:`enqueue`.
    """

    def __init__(
        self,
        store: Store,
        handlers: Mapping[str, OutboxHandler | Mapping[str, Any]],
        *,
        clock: Clock | None = None,
        is_online: Callable[[], bool] = lambda: True,
        subscribe_online: Callable[[Callable[..., None]], Callable[[], None]] | None = None,
        is_retryable_error: Callable[[BaseException], bool] | None = None,
        on_activity: Callable[[JobUpdate], None] | None = None,
        transport: OutboxTransport | None = None,
        poll_interval_ms: float | None = DEFAULT_POLL_INTERVAL_MS,
        yield_every: int = 1,
        idle: Callable[[], Awaitable[Any]] = _outbox_idle,
        prune: Prune | bool = True,
        log: logging.Logger | None = None,
        lease_ms: float = DEFAULT_LEASE_MS,
        backoff: Callable[[int], float] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        _check_options(transport, yield_every, lease_ms)
        self.store = store
        self._handlers = {name: OutboxHandler.of(h) for name, h in handlers.items()}
        self._clock = clock or LoopClock()
        self._subscribe_online = subscribe_online
        self.transport = transport
        self._poll_ms = poll_interval_ms or 0
        self._prune = Prune() if prune is True else (prune or None)
        self.log = log or logging.getLogger("pyjobq")
        self._max_attempts = max_attempts
        self.source = f"outbox-{new_id()[:12]}"
        self._gate = GateLease()
        engine = _outbox_engine(store, self.source, self._clock, is_online, lease_ms, self._gate,
                                backoff)
        self._scheduler = engine.scheduler
        self._tasks = TaskSet(self.log, "pyjobq outbox task failed")
        setup = _Setup(store, self._clock, engine.scheduler, self.source, float(lease_ms),
                       lambda: self.log)
        self._runs = _Runs(setup, transport=lambda: self.transport,
                           is_retryable=is_retryable_error, yield_every=yield_every, idle=idle,
                           exhaust_failed=lambda entry_id: self._spawn(
                               self._outcomes.exhaust(entry_id, notify=False, why="failed")))
        self._side = ExecutorSide(link=engine.link, engine=engine.scheduler, clock=self._clock,
                                  channel=ChannelHub().channel("outbox"), source=self.source,
                                  reconstructors=self._factories())
        self._outcomes = _Outcomes(setup, handlers=self._handlers, runs=self._runs,
                                   delete=self._side.delete_job, on_activity=on_activity,
                                   spawn=self._spawn)
        # For the outbox's life: an entry that fails after stop() is still exhausted.
        self._side.on_update(self._outcomes.on_update)
        self._watchdog: Timer | None = None
        self._unsubscribe: list[Callable[[], None]] = []
        self._running, self._starts = False, 0  # _starts: which start() the running one is in
        #: Why this outbox refused its store (it holds the job queue's records); None if it did not.
        self.refused: StoreInUseError | None = None
        # The store check, run once by whichever comes first (start() or a request): the engine
        # listens only once it passed, so nothing is written to a store the outbox refuses.
        self._checked: asyncio.Task[None] | None = None
        self._finished_rollbacks = False

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Drain now, then on every wake; prune and finish interrupted rollbacks. Call from a
        running loop.

        Entries enqueued while the outbox was stopped (or before its first start) are sent now.
        Starting a running outbox does nothing; a stopped one starts again.
        """
        if self._running or self.refused is not None:
            return
        self._running = True
        self._starts += 1
        if self._subscribe_online is not None:
            self._unsubscribe.append(self._subscribe_online(lambda *_: self._back_online()))
        self._spawn(self._startup(self._starts))  # opens the gate
        self._arm_watchdog()

    def resume(self) -> None:
        """Drain now: start a stopped outbox, wake a running one.

        The spec's "drains on start / resume": call it from the page's ``resume`` and
        ``pageshow`` handlers (a frozen or back/forward-cached page's timers did not fire) and
        when the app lifts its own pause (``stop()`` then ``resume()``).
        """
        if self._running:
            self.wake()
        else:
            self.start()

    def wake(self) -> None:
        """Drain soon: the host calls this on resume, on another tab's enqueue, on connectivity."""
        if self._running:
            self._scheduler.wake()

    def _back_online(self) -> None:
        # Entries released by an offline failure are due at once, not at their ladder slot.
        if self._running:
            self._scheduler.back_online()

    def stop(self) -> None:
        """Stop claiming and cancel the timers. A process() already running finishes and its
        outcome is stored. Entries enqueued while stopped are stored and wait for start()."""
        if not self._running:
            return
        self._running = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        self._gate.close()
        self._scheduler.clear_retry_timer()

    def _arm_watchdog(self) -> None:
        if self._poll_ms > 0 and self._running:
            self._watchdog = self._clock.call_later(self._poll_ms, self._fuse)

    def _fuse(self) -> None:
        self.wake()
        self._arm_watchdog()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._tasks.spawn(coro)

    async def _startup(self, start: int) -> None:
        if not await self._engine():
            self.stop()
            return
        if not self._running or start != self._starts:
            return
        # A page that died between storing "failed" and the rollback left work half done. Read
        # before the gate opens: an entry this start's own claims fail is handled as they fail it.
        found = [] if self._finished_rollbacks else await self.store.by_status(Status.FAILED)
        if not self._running or start != self._starts:
            return  # stopped (and maybe started again) meanwhile: that start() does all this
        self._finished_rollbacks = True
        self._gate.open()
        self._scheduler.wake()
        # Finished before prune looks, so an old entry's optimistic change is still reverted.
        for record in found:
            handler = self._handlers.get(record._reconstructor)
            if handler is None or handler.on_exhausted is None:
                await self._outcomes.exhaust(record.id, notify=False, why="found")
        if self._prune is not None:
            await self._prune_failed(self._prune)

    async def _prune_failed(self, prune: Prune) -> None:
        failed = await self.store.by_status(Status.FAILED)
        doomed = policy.prunable(failed, self._clock.now(), max_age_ms=prune.max_age_ms,
                                 max_count=prune.max_failed)
        if not doomed:
            return
        await self.store.delete_many(doomed)
        # Published like the engine's own deletes: on_activity, and a job-update with deleted.
        gone = set(doomed)
        self._scheduler.publish_many([r for r in failed if r.id in gone], deleted=True)
        self.log.info("pyjobq outbox pruned %d failed entries", len(doomed),
                      extra={"outbox_event": "prune", "count": len(doomed)})

    async def _engine(self) -> bool:
        """Check the store once, then let the engine listen; False if the store was refused."""
        if self._checked is None:
            self._checked = asyncio.ensure_future(self._check_store())
        await asyncio.shield(self._checked)
        return self.refused is None

    async def _ready(self) -> None:
        """Before any request: the store check passed and the engine listens; raise if refused."""
        if not await self._engine():
            assert self.refused is not None
            raise self.refused

    async def _check_store(self) -> None:
        # Before anything is claimed or stored: an outbox deletes what it has no handler for, so
        # on the job queue's database it would delete the queue's jobs.
        foreign: list[JobRecord] = []
        for status in Status:  # through the status index: every record, status by status
            foreign += [r for r in await self.store.by_status(status)
                        if r._reconstructor != r.type and r.code != MALFORMED]
        if foreign:
            self.refused = StoreInUseError(
                f"this outbox's store holds {len(foreign)} record(s) of pyjobq's job queue (e.g. "
                f"{foreign[0].id!r}, reconstructor {foreign[0]._reconstructor!r}, type "
                f"{foreign[0].type!r}); an outbox would delete them. Give the outbox a database "
                "of its own (a name the job queue does not use).")
            self.log.error("pyjobq outbox refused its store: %s", self.refused)
            return
        # Requests flow from now on; passes wait for the gate (start()).
        self._scheduler.start()

    # ------------------------------------------------------------ entries

    async def enqueue(
        self,
        type: str,
        payload: Any = None,
        *,
        max_attempts: int | None = None,
        delay_ms: float = 0,
        group: str | None = None,
        label: str | None = None,
    ) -> Job:
        """Store an entry and drain. Returns once it is stored; ``await job.done`` for its outcome.

        Before ``start()`` or after ``stop()`` the entry is stored all the same and sent once
        the outbox starts (a durable queue: the call never waits for the worker).

        Raises:
            StoreInUseError: the store holds the job queue's records (see :attr:`refused`).
            InvalidJobError: no handler for ``type``, or a payload that is not JSON-like.
        """
        check_str(type, "Outbox.enqueue(type)",
                  f"an entry type, a str naming a handler: one of {sorted(self._handlers)}")
        await self._ready()
        if type not in self._handlers:
            raise InvalidJobError(
                f"no outbox handler for type {type!r}; known: {sorted(self._handlers)}")
        job = self._side.enqueue_persistent(
            type, payload, type=type, group=group, label=label,
            max_attempts=self._max_attempts if max_attempts is None else max_attempts,
            delay_ms=delay_ms)
        await job.stored
        return job

    async def list_failed(self) -> list[OutboxEntry]:
        """Failed entries kept for a manual retry, oldest first."""
        return [OutboxEntry.of(r) for r in await self.store.by_status(Status.FAILED)]

    async def retry(self, entry_id: str) -> bool:
        """Run a failed entry again with a fresh attempt budget. False if it is not failed.

        Raises:
            InvalidJobError: ``entry_id`` is not a str.
        """
        return await self._about_entry("retry", entry_id, self._side.retry_job)

    async def retry_all(self) -> int:
        """Retry every failed entry; returns how many."""
        await self._ready()
        return await self._side.retry_all()

    async def delete(self, entry_id: str) -> bool:
        """Delete an entry (published like every change); False if there is none.

        Raises:
            InvalidJobError: ``entry_id`` is not a str.
        """
        return await self._about_entry("delete", entry_id, self._side.delete_job)

    async def _about_entry(self, call: str, entry_id: str,
                           request: Callable[[str], Awaitable[bool]]) -> bool:
        """``Outbox.<call>(entry_id)``: the id checked, then ``request(entry_id)`` sent once the
        outbox is ready."""
        check_str(entry_id, f"Outbox.{call}(entry_id)", _AN_ENTRY_ID)
        await self._ready()
        return await request(entry_id)

    # ------------------------------------------------------------ running an entry

    def _factories(self) -> dict[str, Callable[[Any], Any]]:
        # An entry type with no handler must not fall through to the built-in 'fetch'.
        factories: dict[str, Callable[[Any], Any]] = {FETCH: self._unknown(FETCH)}
        factories.update({name: self._factory(name) for name in self._handlers})
        return factories

    def _unknown(self, name: str) -> Callable[[Any], Any]:
        def factory(_payload: Any) -> Any:
            raise OrphanedJobError(name)
        return factory

    def _factory(self, name: str) -> Callable[[Any], Any]:
        handler = self._handlers[name]

        def factory(_payload: Any) -> Callable[[Any], Awaitable[Any]]:
            async def run(_signal: Any) -> None:
                await self._runs.process(handler, current_job_id())
            return run

        return factory

