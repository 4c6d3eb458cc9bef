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

Two processors, one entry. A live page never loses its lease (:class:`_Renewal`);
a page frozen past it does, and another outbox takes the entry over. Without a
common lock every decision between them is one conditional write on the record
(the pure functions below :class:`RunClaim`), so exactly one side wins each race:

* a renewal applies only to this run's own claim: it never takes an entry back;
* a delivery (``process()`` succeeded) takes the entry back from any other run,
  pending retry or failure, and is stored done — unless a rollback began;
* a rollback is marked on the failed record before it runs, so a delivery after
  the mark cannot undo it (logged ``late``, an error);
* a lease that ran out on the last attempt fails the entry (``page_gone``), but a
  revert cannot be taken back and that run may yet deliver: it is rolled back only
  once that run reports a failure (:meth:`RunClaim.failed_on`); ``on_exhausted``,
  which reverts nothing, is called at once.

Known limits: ``rollback`` runs after the failed record is stored, so a page that
dies in between leaves a failed record; the next ``start()`` finishes it before it
prunes (so ``rollback`` must be idempotent, like ``process``). Cross-tab wake-ups
are the host's to send (call :meth:`Outbox.wake`); the ``poll_interval_ms``
watchdog is the fuse.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import random as _random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine, Literal, Mapping, Protocol

from .core import policy
from .core.backoff import Backoff
from .core.codes import Code
from .core.errors import InvalidJobError, JobError, OrphanedJobError, StoreInUseError
from .core.mode import OUTBOX
from .core.ports import Change, Clock, Store, Timer
from .core.records import DEFAULT_MAX_ATTEMPTS, FETCH, MALFORMED, JobRecord, check_str, new_id
from .core.status import CLAIMABLE, ONLY_FAILED, ONLY_RUNNING, Event, Status, apply
from .engine.calls import Spawn
from .engine.lease import GateLease
from .engine.scheduler import Scheduler
from .engine.tasks import TaskSet
from .executor.side import ExecutorSide, current_job_id
from .executor.wiring import InProcess, in_process
from .handle import Job, JobUpdate
from .memory import ChannelHub, LoopClock

_AN_ENTRY_ID = "an entry's id, a str such as job.id of what enqueue() returned or OutboxEntry.id"

DAY_MS = 24 * 3600 * 1000.0
DEFAULT_POLL_INTERVAL_MS = 30_000.0
DEFAULT_LEASE_MS = 60_000.0
#: The outbox's process-flow event name, carried in every log record's ``extra``.
EVENT = "outbox-process"
#: A run renews its lease every ``lease_ms / RENEWALS_PER_LEASE``: two renewals can be missed
#: (a slow store, a busy page) before another processor may take the entry.
RENEWALS_PER_LEASE = 3
#: What a delivery takes back: the entry running under another processor's lease, back to
#: pending after that run failed, or failed with no rollback begun.
DELIVERABLE = CLAIMABLE | ONLY_FAILED
#: The error of an entry whose lease ran out on its last allowed attempt.
LEASE_RAN_OUT = (
    "its lease ran out on the last allowed attempt: the page running it closed, crashed "
    "or froze mid-run, so whether it was delivered is unknown")


def outbox_backoff(random: Callable[[], float] = _random.random) -> Backoff:
    """The outbox's ladder: ``min(1000 · 2^(attempts−1), 30000)`` minus 0–20 % jitter."""
    return Backoff(jitter=-0.20, random=random)


@dataclass(frozen=True)
class Prune:
    """Failed entries to delete on ``start()``: older than ``max_age_ms``,
    and the oldest beyond ``max_failed``."""

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
        """Accept an :class:`OutboxHandler` or a mapping with the same keys
        (the outbox's object literal)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"process", "on_exhausted", "rollback", "is_retryable_error"}
            if unknown:
                raise InvalidJobError(f"unknown handler keys {sorted(unknown)}")
            return cls(**value)
        raise InvalidJobError(
            f"a handler is an OutboxHandler or a dict with 'process', got {value!r}")

    def __post_init__(self) -> None:
        if not callable(self.process):
            raise InvalidJobError("a handler needs a callable process(entry)")


async def _call(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    value = fn(*args, **kw)
    return await value if inspect.isawaitable(value) else value


def _outbox_idle() -> Awaitable[None]:
    return asyncio.sleep(0)


class OutboxTransport(Protocol):
    """What ``Outbox(transport=...)`` takes: ``send(entry)``, sync or async, whose result is
    handed to the handler's ``process(entry, result=...)``."""

    def send(self, entry: OutboxEntry) -> Any: ...


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


# ------------------------------------------------------------ a run's claim (pure decisions)
#
# Processors sharing a store hold no common lock: each decision below is the ``apply`` of one
# conditional write (a :class:`~pyjobq.core.ports.Change`), so two processors racing on one
# entry each read what the store holds at that moment, and exactly one of them wins.

@dataclass(frozen=True)
class RunClaim:
    """The claim one run holds: the processor that claimed the entry (the record's ``owner``)
    and the attempt it was handed. A claim taken over by another processor, or a later claim
    of the same entry, is a different claim."""

    entry_id: str
    owner: str
    attempts: int
    given_back: int

    @classmethod
    def of(cls, record: JobRecord) -> "RunClaim":
        assert record.owner is not None, "a running record has an owner"
        return cls(record.id, record.owner, record.attempts, record.given_back)

    def holds(self, record: JobRecord | None) -> bool:
        """The record is still this claim: running, under this owner, on this attempt."""
        return (
            record is not None and record.status is Status.RUNNING and record.owner == self.owner
            and record.attempts == self.attempts and record.given_back == self.given_back)

    def failed_on(self, record: JobRecord | None) -> bool:
        """The record was failed *on* this claim — its lease ran out on the last allowed attempt
        and another processor's claim failed it (no run came after) — and no rollback began."""
        return (record is not None and record.status is Status.FAILED and record.owner is None
                and record.attempts == self.attempts and record.given_back == self.given_back)


def renewed(record: JobRecord, claim: RunClaim, now: float, lease_ms: float) -> JobRecord | None:
    """The lease pushed a whole ``lease_ms`` past ``now`` — only while the record is still
    ``claim``: a renewal never resurrects a settled entry nor takes one back from a processor
    that took it over."""
    if not claim.holds(record):
        return None
    return record.evolve(next_retry_at=now + lease_ms, updated_at=now)


def delivered(record: JobRecord, claim: RunClaim, now: float, lease_ms: float) -> JobRecord | None:
    """``claim``'s ``process()`` succeeded: the entry becomes that claim's running record again,
    so the engine's settle stores it done (and deletes it), whoever held it meanwhile.

    A delivery wins over another processor's lease, its failure (pending again) and a failure
    on the ceiling — everything but a rollback that has begun (a failed record with an owner:
    :func:`rollback_begun`), which cannot be taken back. None: nothing to take back (still
    ``claim``), or too late.
    """
    if claim.holds(record):
        return None
    if record.status is Status.RUNNING:
        status = Status.RUNNING
    elif record.status is Status.PENDING:
        status = apply(Status.PENDING, Event.CLAIM)
    elif record.status is Status.FAILED and record.owner is None:
        status = apply(apply(Status.FAILED, Event.REVIVE), Event.CLAIM)
    else:
        return None
    return record.evolve(status=status, owner=claim.owner, next_retry_at=now + lease_ms,
                         updated_at=now, yield_lock=None)


def rollback_begun(record: JobRecord, owner: str) -> JobRecord | None:
    """A failed entry about to be rolled back, marked so (``owner`` on a failed record) before
    ``rollback`` runs: from here on no delivery takes it back. A mark left by a page that died
    mid-rollback is taken over (``rollback`` is idempotent). ``updated_at`` is kept: prune's age."""
    if record.status is not Status.FAILED:
        return None
    return record.evolve(owner=owner)


def lease_ran_out(record: JobRecord, seen: JobRecord) -> JobRecord | None:
    """The failure ``seen`` — this processor's claim found the entry's lease run out on its last
    attempt — said as what it is (code ``page_gone``), not as an earlier attempt's error: the
    mark by which every later start knows that its last run's fate is unknown."""
    if (record.status is not Status.FAILED or record.owner is not None
            or record.code == Code.PAGE_GONE
            or (record.attempts, record.given_back) != (seen.attempts, seen.given_back)):
        return None
    return record.evolve(code=Code.PAGE_GONE.value, error=LEASE_RAN_OUT, http_status=None)


def undecided(record: JobRecord) -> bool:
    """A failed entry whose last run lost its lease on the ceiling and has not reported: it may
    have been delivered, so it is not rolled back until that run says it failed."""
    return record.status is Status.FAILED and record.owner is None and record.code == Code.PAGE_GONE


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


def log_event(log: logging.Logger, phase: str, job_id: Any, job_type: Any, attempts: Any, *,
              level: int = logging.INFO, **more: Any) -> None:
    """Log one step of the outbox's process flow, with :data:`EVENT` and the entry in ``extra``."""
    log.log(level, "%s %s %s %s", EVENT, phase, job_type, job_id, extra={
        "outbox_event": EVENT, "phase": phase, "entry_id": job_id, "entry_type": job_type,
        "attempt": attempts, **more,
    })
