"""The outbox: a claim/lease worker with per-type handlers, on the job queue's engine.

Theory of operation
-------------------
:class:`Outbox` gives users of the ``@yorozu/outbox`` package its shape — a
store, a handler per entry type, ``start()`` / ``wake()`` / ``stop()`` — without a
second engine. Underneath it is one :class:`~pyjobq.scheduler.Scheduler` and one
:class:`~pyjobq.executor.ExecutorSide` wired by an in-memory link, exactly as the
volatile queue runs, over the injected :class:`~pyjobq.core.ports.Store`
(:class:`~pyjobq.memory.MemoryStore` or :class:`~pyjobq.browser.idb.IndexedDBStore`).
An entry is a :class:`~pyjobq.core.records.JobRecord` whose ``_reconstructor``
and ``type`` name its handler and whose ``_params`` is its payload.

The scheduler runs in its outbox mode (:data:`~pyjobq.core.mode.OUTBOX`): claims
are leases (``lease_ms``; a lease that ran out is due work, so outboxes in several
tabs share a store without sharing a lock), success deletes the record, claims are
FIFO by ``created_at`` across types and one at a time (a ``msg/react`` never reaches
the server before its ``msg/send``), and the backoff is the outbox's
``min(base·2^(attempts−1), cap)`` minus 0–20 %. None of the job queue's HTTP status
rules apply: a 401 or a 403/409/422 is an error like any other, which the handler's
``is_retryable_error`` classifies (non-retryable, or the last attempt spent →
``on_exhausted`` or ``rollback``); a failure while offline is released uncounted
(no attempt spent) and skipped until the network is back or its ladder slot comes.

The engine listens from the first request on, while its processor lease — a
:class:`~pyjobq.lease.GateLease` — is open only from ``start()`` to ``stop()``: an
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

Known limits: ``rollback`` runs after the failed record is stored, so a page that
dies in between leaves a failed record; the next ``start()`` finishes it (so
``rollback`` must be idempotent, like ``process``). Cross-tab wake-ups are the
host's to send (call :meth:`Outbox.wake`); the ``poll_interval_ms`` watchdog is
the fuse.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random as _random
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from .tasks import TaskSet
from .core import policy
from .core.backoff import Backoff
from .core.ports import Clock, Store
from .core.records import DEFAULT_MAX_ATTEMPTS, FETCH, JobRecord, check_str, new_id
from .core.status import Status
from .core.records import MALFORMED
from .errors import InvalidJobError, JobError, OrphanedJobError, StoreInUseError
from .executor import ExecutorSide, current_job_id
from .handle import Job, JobUpdate
from .lease import GateLease
from .memory import ChannelHub, LoopClock
from .core.mode import OUTBOX
from .wiring import in_process

_AN_ENTRY_ID = "an entry's id, a str such as job.id of what enqueue() returned or OutboxEntry.id"

DAY_MS = 24 * 3600 * 1000.0
DEFAULT_POLL_INTERVAL_MS = 30_000.0
DEFAULT_LEASE_MS = 60_000.0
#: The outbox's process-flow event name, carried in every log record's ``extra``.
EVENT = "outbox-process"


def outbox_backoff(random: Callable[[], float] = _random.random) -> Backoff:
    """The outbox's ladder: ``min(1000 · 2^(attempts−1), 30000)`` minus 0–20 % jitter."""
    return Backoff(jitter=-0.20, random=random)


@dataclass(frozen=True)
class Prune:
    """Failed entries to delete on ``start()``: older than ``max_age_ms``, and the oldest beyond ``max_failed``."""

    max_age_ms: float | None = 90 * DAY_MS
    max_failed: int | None = 200


@dataclass(frozen=True)
class OutboxEntry:
    """What a handler receives: the stored entry, with its payload copied out of the store."""

    id: str
    type: str
    payload: Any
    attempts: int
    max_attempts: int
    created_at: float
    status: str
    error: str | None = None
    code: str | None = None
    http_status: int | None = None

    @classmethod
    def of(cls, record: JobRecord) -> "OutboxEntry":
        return cls(id=record.id, type=record._reconstructor, payload=record._params,
                   attempts=record.attempts, max_attempts=record.max_attempts,
                   created_at=record.created_at, status=record.status.value, error=record.error,
                   code=record.code, http_status=record.http_status)


@dataclass(frozen=True)
class OutboxHandler:
    """One entry type's handlers.

    Args:
        process: ``process(entry)`` — or ``process(entry, result=...)`` with a
            transport. Must be idempotent: a page that dies after it succeeded
            but before the delete runs it again.
        on_exhausted: called once the entry failed for good; the record is kept
            as failed for :meth:`Outbox.retry`.
        rollback: without ``on_exhausted``: revert an optimistic change; the
            record is then deleted.
        is_retryable_error: ``False`` fails the entry at once, whatever its attempts.
    """

    process: Callable[..., Any]
    on_exhausted: Callable[[OutboxEntry], Any] | None = None
    rollback: Callable[[OutboxEntry], Any] | None = None
    is_retryable_error: Callable[[BaseException], bool] | None = None

    @classmethod
    def of(cls, value: Any) -> "OutboxHandler":
        """Accept an :class:`OutboxHandler` or a mapping with the same keys (the outbox's object literal)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"process", "on_exhausted", "rollback", "is_retryable_error"}
            if unknown:
                raise InvalidJobError(f"unknown handler keys {sorted(unknown)}")
            return cls(**value)
        raise InvalidJobError(f"a handler is an OutboxHandler or a dict with 'process', got {value!r}")

    def __post_init__(self) -> None:
        if not callable(self.process):
            raise InvalidJobError("a handler needs a callable process(entry)")


async def _call(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    value = fn(*args, **kw)
    return await value if inspect.isawaitable(value) else value


def _outbox_idle() -> Awaitable[None]:
    return asyncio.sleep(0)


class Outbox:
    """A durable outbox over an injected store: entries are claimed, processed by their type's handler, deleted.

    Args:
        store: a :class:`~pyjobq.core.ports.Store` (``MemoryStore()``, ``IndexedDBStore(name)``).
        handlers: entry type → :class:`OutboxHandler` (or a dict of its fields).
        clock: milliseconds and timers; default wall clock and asyncio timers.
        is_online: read when an attempt fails; offline failures cost no attempt.
        subscribe_online: ``subscribe_online(callback) -> unsubscribe``; the outbox drains on each call.
        is_retryable_error: for types whose handler has none; default: every error is retryable.
        on_activity: called with each job-update (a dict) — push the outbox's status from here.
        transport: an object whose ``send(entry)`` result is handed to ``process(entry, result=...)``.
        poll_interval_ms: the watchdog fuse (default 30 s); 0 or None disables it.
        yield_every: after this many handled entries, ``await idle()`` (default 1); 0 disables.
        idle: what yielding awaits; default ``asyncio.sleep(0)``. In a page, a
            ``requestIdleCallback`` with ``timeout: 1``.
        prune: :class:`Prune` (default: 90 days, 200 failed) run on ``start()``; False to disable.
        log: a logger; default ``logging.getLogger("pyjobq")``, silent until the host configures logging.
        lease_ms: how long a claim holds an entry before another processor may take it.
        backoff: the retry ladder; default :func:`outbox_backoff`. ``make_backoff()`` gives the job queue's.
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
        transport: Any = None,
        poll_interval_ms: float | None = DEFAULT_POLL_INTERVAL_MS,
        yield_every: int = 1,
        idle: Callable[[], Awaitable[Any]] = _outbox_idle,
        prune: Prune | bool = True,
        log: logging.Logger | None = None,
        lease_ms: float = DEFAULT_LEASE_MS,
        backoff: Callable[[int], float] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        if transport is not None and not callable(getattr(transport, "send", None)):
            raise InvalidJobError("transport must have a send(entry) method")
        if isinstance(yield_every, bool) or not isinstance(yield_every, int) or yield_every < 0:
            raise InvalidJobError(f"yield_every must be an int >= 0, got {yield_every!r}")
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, (int, float)) or not lease_ms > 0:
            raise InvalidJobError(f"lease_ms must be a positive number of milliseconds, got {lease_ms!r}")
        self.store = store
        self._handlers = {name: OutboxHandler.of(h) for name, h in handlers.items()}
        self._clock = clock or LoopClock()
        self._is_online = is_online
        self._subscribe_online = subscribe_online
        self._is_retryable = is_retryable_error
        self._on_activity = on_activity
        self.transport = transport
        self._poll_ms = poll_interval_ms or 0
        self._yield_every = yield_every
        self._idle = idle
        self._prune = Prune() if prune is True else (prune or None)
        self.log = log or logging.getLogger("pyjobq")
        self._max_attempts = max_attempts
        self.source = f"outbox-{new_id()[:12]}"

        # Private channels and locks: the outbox opens no BroadcastChannel and takes
        # no shared lock (its leases are what keep two tabs apart). Its processor lease is
        # the gate start() opens and stop() closes.
        self._gate = GateLease()
        engine = in_process(
            store=store, source=self.source, clock=self._clock, lock_name="pyjobq-outbox",
            is_online=is_online, mode=OUTBOX.with_lease(lease_ms), lease=self._gate,
            backoff=backoff if backoff is not None else outbox_backoff(),
            start=False)  # once the store check passed (_check_store)
        self._scheduler = engine.scheduler
        # An entry type with no handler must not fall through to the built-in 'fetch'.
        factories: dict[str, Callable[[Any], Any]] = {FETCH: self._unknown(FETCH)}
        factories.update({name: self._factory(name) for name in self._handlers})
        self._side = ExecutorSide(link=engine.link, engine=engine.scheduler, channel=ChannelHub().channel("outbox"),
                                  source=self.source, reconstructors=factories, clock=self._clock)
        # For the outbox's life: an entry that fails after stop() is still exhausted.
        self._side.on_update(self._on_update)
        self._started_with: dict[str, int] = {}  # entry id -> given_back when its run started
        self._handled = 0
        self._watchdog: Any = None
        self._unsubscribe: list[Callable[[], None]] = []
        self._tasks = TaskSet(self.log, "pyjobq outbox task failed")
        self._running = False
        #: Why this outbox refused its store (it holds the job queue's records); None if it did not.
        self.refused: StoreInUseError | None = None
        # The store check, run once by whichever comes first (start() or a request): the engine
        # listens only once it passed, so nothing is written to a store the outbox refuses.
        self._checked: asyncio.Task[None] | None = None
        self._finished_rollbacks = False

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Drain now, then on every wake; prune and finish interrupted rollbacks. Call from a running loop.

        Entries enqueued while the outbox was stopped (or before its first start) are sent now.
        Starting a running outbox does nothing; a stopped one starts again.
        """
        if self._running or self.refused is not None:
            return
        self._running = True
        if self._subscribe_online is not None:
            self._unsubscribe.append(self._subscribe_online(lambda *_: self._back_online()))
        self._gate.open()
        self._spawn(self._startup())
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

    def _spawn(self, coro: Any) -> None:
        self._tasks.spawn(coro)

    async def _startup(self) -> None:
        if not await self._engine():
            self.stop()
            return
        if not self._running:
            return
        self._scheduler.wake()
        if self._prune is not None:
            failed = await self.store.by_status(Status.FAILED)
            doomed = policy.prunable(failed, self._clock.now(), max_age_ms=self._prune.max_age_ms,
                                     max_count=self._prune.max_failed)
            if doomed:
                await self.store.delete_many(doomed)
                self.log.info("pyjobq outbox pruned %d failed entries", len(doomed),
                              extra={"outbox_event": "prune", "count": len(doomed)})
        if self._finished_rollbacks:
            return
        self._finished_rollbacks = True
        # A page that died between storing "failed" and the rollback left work half done.
        for record in await self.store.by_status(Status.FAILED):
            handler = self._handlers.get(record._reconstructor)
            if handler is None or handler.on_exhausted is None:
                await self._exhaust(record.id, notify=False)

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
        check_str(type, "Outbox.enqueue(type)", f"an entry type, a str naming a handler: one of {sorted(self._handlers)}")
        await self._ready()
        if type not in self._handlers:
            raise InvalidJobError(f"no outbox handler for type {type!r}; known: {sorted(self._handlers)}")
        job = self._side.enqueue_persistent(
            type, payload, type=type, group=group, label=label,
            max_attempts=self._max_attempts if max_attempts is None else max_attempts, delay_ms=delay_ms,
        )
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
        check_str(entry_id, "Outbox.retry(entry_id)", _AN_ENTRY_ID)
        await self._ready()
        return await self._side.retry_job(entry_id)

    async def retry_all(self) -> int:
        """Retry every failed entry; returns how many."""
        await self._ready()
        return await self._side.retry_all()

    async def delete(self, entry_id: str) -> bool:
        """Delete an entry (published like every change); False if there is none.

        Raises:
            InvalidJobError: ``entry_id`` is not a str.
        """
        check_str(entry_id, "Outbox.delete(entry_id)", _AN_ENTRY_ID)
        await self._ready()
        return await self._side.delete_job(entry_id)

    # ------------------------------------------------------------ running an entry

    def _unknown(self, name: str) -> Callable[[Any], Any]:
        def factory(_payload: Any) -> Any:
            raise OrphanedJobError(name)
        return factory

    def _factory(self, name: str) -> Callable[[Any], Any]:
        handler = self._handlers[name]

        def factory(_payload: Any) -> Callable[[Any], Awaitable[Any]]:
            async def run(_signal: Any) -> None:
                await self._process(handler, current_job_id())
            return run

        return factory

    async def _process(self, handler: OutboxHandler, job_id: str | None) -> None:
        record = None if job_id is None else await self.store.get(job_id)
        if record is None:
            return  # deleted while being handed over: nothing to do
        entry = OutboxEntry.of(record)
        self._started_with[entry.id] = record.given_back
        self._event("start", entry.id, entry.type, entry.attempts)
        try:
            if self.transport is not None:
                result = await _call(self.transport.send, entry)
                await _call(handler.process, entry, result=result)
            else:
                await _call(handler.process, entry)
        except Exception as err:
            classify = handler.is_retryable_error or self._is_retryable
            if classify is not None and not classify(err):
                raise JobError(f"{type(err).__name__}: {err}", terminal=True,
                               status=getattr(err, "status", None), code=getattr(err, "code", None)
                               or "not_retryable") from err
            raise
        finally:
            self._handled += 1
            if self._yield_every and self._handled % self._yield_every == 0:
                await self._idle()

    # ------------------------------------------------------------ outcomes

    def _on_update(self, update: JobUpdate) -> None:
        if self._on_activity is not None:
            try:
                self._on_activity(update)
            except Exception:
                self.log.exception("pyjobq outbox: on_activity raised")
        if update.get("progress_only") or update.get("deleted"):
            return
        job_id, status = update.id, update.get("status")
        job_type, attempts = update.get("type"), update.get("attempts")
        if status == Status.DONE.value:
            self._started_with.pop(job_id, None)
            self._event("done", job_id, job_type, attempts)
        elif status == Status.PENDING.value and job_id in self._started_with:
            given_back = self._started_with.pop(job_id)
            extra: dict[str, Any] = {"error": update.get("error"), "next_retry_at": update.get("next_retry_at")}
            if (update.get("given_back") or 0) > given_back:
                self._event("skip", job_id, job_type, attempts, **extra)  # offline: released uncounted
            else:
                self._event("retry", job_id, job_type, attempts, **extra)
        elif status == Status.FAILED.value:
            self._started_with.pop(job_id, None)
            self._spawn(self._exhaust(job_id))

    async def _exhaust(self, job_id: str, *, notify: bool = True) -> None:
        record = await self.store.get(job_id)
        if record is None or record.status is not Status.FAILED:
            return
        entry = OutboxEntry.of(record)
        handler = self._handlers.get(entry.type)
        if handler is None:
            self.log.warning("never-happen: outbox entry %s has unknown type %r; deleted", entry.id, entry.type,
                             extra={"outbox_event": EVENT, "phase": "unknown_type", "entry_id": entry.id,
                                    "entry_type": entry.type})
            await self._side.delete_job(entry.id)  # through the engine: published
            return
        if notify:
            self._event("error", entry.id, entry.type, entry.attempts, level=logging.WARNING,
                        error=entry.error, code=entry.code)
        try:
            if handler.on_exhausted is not None:
                if notify:
                    await _call(handler.on_exhausted, entry)
                return  # kept as failed: list_failed() / retry()
            if handler.rollback is not None:
                await _call(handler.rollback, entry)
        except Exception:
            # The record stays failed: the work is kept rather than half undone.
            self.log.exception("pyjobq outbox: exhaustion handler of %s raised; entry %s kept as failed",
                               entry.type, entry.id)
            return
        await self._side.delete_job(entry.id)  # through the engine: published

    def _event(self, phase: str, job_id: Any, job_type: Any, attempts: Any, *,
               level: int = logging.INFO, **more: Any) -> None:
        self.log.log(level, "%s %s %s %s", EVENT, phase, job_type, job_id, extra={
            "outbox_event": EVENT, "phase": phase, "entry_id": job_id, "entry_type": job_type,
            "attempt": attempts, **more,
        })
