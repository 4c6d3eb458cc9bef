"""The settle: a run's outcome stored, with its lane's next claim in the same transaction.

Runs wherever an engine holds a lease: in the scheduler worker, and in the page — the
volatile engine and the outbox settle their runs the same way (the waiting tab's request
scheduler holds no lease, hands nothing off, and so settles nothing).

Theory of operation
-------------------
The page answers ``run`` with ``run_result`` (:meth:`pyjobq.core.records.RunResult.from_message`
reads it). The settle is one read-modify-write of the running record,
:func:`pyjobq.core.policy.settle`, applied only while the record is still this engine's
(its ``owner``): a run recovered or taken over meanwhile is not settled twice. An abandoned
run's ``run_result`` is its page's last word instead (pyjobq/engine/inflight.py) and frees
its type and run lock; an answer for another claim is dropped.

*Group commit*: when the settling run's lane has a next job ready and its start needs
nothing the full look decides (:meth:`pyjobq.engine.passes.Pass.follow_on`), its claim
goes into the settle's own transaction and it is handed off once that committed, so a
lane with work goes on without waiting for a look. The pass still looks at least every
:data:`LOOK_EVERY_MS` while lanes chain (recovery and unparking keep going).

*Queued settles*: at most :data:`IN_FLIGHT` settle transactions are under way; the lanes'
settles that arrive meanwhile wait, and the next transaction takes them all, each change
with its lane's next claim (:meth:`Settler._queued`). IndexedDB runs readwrite
transactions on one store one after another anyway, so several lanes' outcomes cost one
transaction's turn instead of one each. Each is decided on its own record, as alone; when
the shared transaction fails, each is committed again on its own, without its claim (as a
settle alone is, once: a success whose result is still refused then fails).

*An answer in hand is kept*: a settle the store refuses through :data:`RETRY_MS` keeps its
run in flight — its lane and its run lock with it — and is tried again, backing off to
:data:`KEEP_MAX_MS`, for as long as the engine runs; recovery skips a run in flight, here and
(by its run lock) in every other tab, so the page's answer is never thrown away and the job
never sent again for the store's trouble. A success the store refuses for its value (a value
it cannot clone, a quota: :func:`refused_the_value`) is failed, clearly
(``result_not_storable``), rather than left running for recovery to run again. Under the
outbox's mode a ``done`` entry is deleted once its ``done`` was published, so whoever waits
on it sees it succeed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ..core import policy
from ..core.codes import Code
from ..core.errors import DatabaseUpgradedError, StorageError
from ..core.ports import Change, Release, Updated
from ..core.records import JobRecord, RunResult
from ..core.status import ONLY_RUNNING, Status
from ..core.view import Entry
from ..loop import again_doubling, new_future, sleep
from .control import PassControl
from .inflight import Flight, FlightTable
from .parts import EngineBasics, Publish, Write

log = logging.getLogger("pyjobq")

#: While lanes chain settle to claim, the pass still looks (recovery, unparking, other news)
#: this often.
LOOK_EVERY_MS = 1_000.0

#: A settle whose transaction failed is tried again after each of these waits (alone, without
#: its lane's next claim, in the queue of settles); then it leaves the queue and is kept
#: (:meth:`Settler._kept`).
RETRY_MS = (100.0, 1_000.0)

#: A kept outcome (the store refused it through :data:`RETRY_MS`) is tried again after this
#: wait, doubling up to :data:`KEEP_MAX_MS`, for as long as the engine runs: its run, lane and
#: run lock stay this engine's meanwhile, so no recovery sends the job again.
KEEP_MS = 2_000.0
KEEP_MAX_MS = 30_000.0

#: At most this many settle transactions under way: IndexedDB queues the second behind the
#: first (no wait between them), and what arrives meanwhile goes together in the next.
IN_FLIGHT = 2


#: Words of a store's error that blame the value written, not the store: IndexedDB's
#: ``DataCloneError`` and ``DataError``, and a quota the record does not fit in.
VALUE_ERRORS = ("DataCloneError", "DataError", "QuotaExceededError")


def refused_the_value(exc: BaseException) -> bool:
    """Whether a failed write blames what was written: an error raised before the store was
    reached (encoding it), or one of :data:`VALUE_ERRORS`. Any other is the store's own trouble
    (an aborted transaction, a connection closing), which passes."""
    if not isinstance(exc, StorageError):
        return True
    return any(word in str(exc) for word in VALUE_ERRORS)


class Lanes(Protocol):
    """What the settle uses of the pass (pyjobq/engine/passes.py): the lane's next job, and the
    group commit that stores an outcome and claims it in one transaction."""

    @property
    def looked_at(self) -> float: ...

    async def follow_on(self, flight: Flight, now: float) -> tuple[Entry, Release] | None: ...

    async def group_commit(self, changes: list[Change], claims: list[Entry],
                           releases: dict[str, Release], now: float) -> list[Updated]: ...


@dataclass(frozen=True)
class SettleEngine(EngineBasics):
    """What the settle uses of its engine (pyjobq/engine/scheduler.py makes it)."""

    #: ``navigator.onLine`` here, read when the page did not say (an older page).
    is_online: Callable[[], bool]
    #: The engine's retry ladder, read at each settle (a test may swap the engine's).
    backoff: Callable[[int], float]
    flights: FlightTable
    #: The pass: the lane's next job (:meth:`Pass.follow_on`) and the group commit.
    lanes: Lanes
    write: Write
    publish: Publish
    control: PassControl
    #: Watch a yield lock: an interrupted run parked under it goes on once it is let go.
    watch: Callable[[str], None]
    #: A failure with no network was stored: watch for the network (pyjobq/engine/online.py).
    stored_offline: Callable[[], None]


@dataclass(frozen=True)
class _Stored:
    """What a settle's transaction did: the settle's update, and whether its lane went on with
    its next job (claimed in the same transaction)."""

    done: list[Updated]
    followed: bool


class _Turn:
    """The answer of a waiting settle whose turn it is to commit the queue (:data:`YOUR_TURN`)."""


#: A waiting settle is handed the turn to commit the queue.
YOUR_TURN = _Turn()


@dataclass
class _Queued:
    """A settle waiting for its transaction (:meth:`Settler._queued`)."""

    job_id: str
    change: Callable[[RunResult], Change]
    outcome: RunResult
    #: The lane's next job and its run lock, claimed in the same transaction.
    follow: tuple[Entry, Release] | None
    now: float
    #: What the transaction did, or :data:`YOUR_TURN`: the waiting is over, and this settle
    #: commits the queue.
    answer: asyncio.Future[_Stored | _Turn]


class Settler:
    """Stores each run's outcome, and claims its lane's next job in the same transaction."""

    def __init__(self, engine: SettleEngine) -> None:
        self._engine = engine
        #: Settles waiting for the one committing now: the next transaction takes them all.
        self._queue: list[_Queued] = []
        #: How many transactions of settles are under way (at most IN_FLIGHT).
        self._committing = 0

    async def settle(self, msg: dict[str, Any]) -> None:
        """Handle a page's ``run_result``: settle its run, or end an abandoned one.

        The volatile engine starts it in the answer's own event (``spawn(now=True)``: on a page,
        a browser task fewer a job). The persistent engine's worker runs what the event made
        ready in that event anyway (:func:`pyjobq.browser.batching.event`), so its settle stays an
        ordinary task there."""
        e = self._engine
        if e.flights.ended(msg.get("claim")):
            return  # an abandoned run's last word: its type and run lock are free
        flight = e.flights.for_answer(msg)
        if flight is None:
            log.debug("pyjobq: dropped run_result for %s (claim %s), not in flight here",
                      msg["job_id"], msg.get("claim"))
            return
        e.flights.started(flight)  # an answer is also a start: no deadline from here on
        outcome = RunResult.from_message(msg)
        if flight.settled is not None:  # suspend_type aborted this run
            outcome = policy.after_abort(outcome)
        held_lock = await self._held_yield_lock(flight.type, outcome)
        now = e.clock.now()
        change = functools.partial(
            self._change, flight.job_id, now=now, held_lock=held_lock,
            # The page's reading when the attempt failed; an older page sends none: ours, now.
            online=not outcome.offline if outcome.offline is not None else e.is_online(),
            suspended=outcome.interrupted and flight.type in e.suspended,
            # Read as the record is written: an online event may come while the settle waits.
            online_again=lambda: flight.online_again and e.is_online())
        # Group commit: the settle and the claim of the lane's next job in one transaction,
        # with the other lanes' settles that arrived while the last one committed.
        follow = await e.lanes.follow_on(flight, now)
        followed = keyed = False
        try:
            try:
                stored = await self._queued(_Queued(flight.job_id, change, outcome, follow, now,
                                                    new_future()))
            except Exception as exc:
                if e.control.stopped or isinstance(exc, DatabaseUpgradedError):
                    raise
                # The answer is in hand: its run, its lane and its run lock are kept until it is
                # stored, so recovery (here or in another tab) never sends it again.
                stored = await self._kept(flight.job_id, change, outcome, exc)
            followed = stored.followed
            settled = stored.done[0]
            if settled.record is not None and policy.waits_offline(settled.record):
                e.stored_offline()
            # A keyed run's end frees its key, whose next job may wait in another lane.
            keyed = settled.record is not None and settled.record.key is not None
            await self._delete_if_done(settled)
        finally:
            e.flights.finish(flight)
            # The lane went on with its next job: the pass need not look again for this one,
            # unless it has not looked for LOOK_EVERY_MS (recovery and unparking keep going).
            if not followed or keyed or e.control.stopped \
                    or e.clock.now() - e.lanes.looked_at >= LOOK_EVERY_MS:
                e.control.kick()
        if held_lock:
            e.watch(held_lock)

    async def _held_yield_lock(self, job_type: str, outcome: RunResult) -> str | None:
        """The yield lock an interrupted run stopped for, when someone holds it exclusively
        now: the job parks under it."""
        lock = self._engine.yields.get(job_type)
        if outcome.interrupted and lock \
                and (await self._engine.locks.held()).get(lock) == "exclusive":
            return lock
        return None

    def _change(self, job_id: str, outcome: RunResult, *, now: float, held_lock: str | None,
                online: bool, suspended: bool, online_again: Callable[[], bool]) -> Change:
        """The settle's read-modify-write, on the record only while it is still ours. A run the
        network came back during, and is still back (``online_again()``, read as the record is
        written), that failed offline is due now, as the ``online`` event's sweep would have
        made it had it been waiting then."""
        e = self._engine

        def settle(cur: JobRecord) -> JobRecord | None:
            if cur.owner != e.source:
                return None
            new = policy.settle(cur, outcome, now=now, online=online, backoff=e.backoff,
                                held_yield_lock=held_lock, suspended=suspended,
                                http_status_rules=e.mode.http_status_rules)
            return (policy.back_online(new, now) or new) if online_again() else new

        return Change(job_id, settle, ONLY_RUNNING)

    async def _queued(self, item: _Queued) -> _Stored:
        """``item`` committed: at once while fewer than :data:`IN_FLIGHT` settle transactions are
        under way; otherwise it waits, and goes with every settle that queued meanwhile, in one
        transaction. Whoever commits hands the turn on to the first that queued meanwhile — no
        task of its own, and no settle waits longer than a transaction before its own."""
        if self._committing >= IN_FLIGHT:
            self._queue.append(item)
            try:
                answer = await item.answer
            except asyncio.CancelledError:
                self._leave(item)
                raise
            if isinstance(answer, _Stored):
                return answer  # it went in another's transaction
            item.answer = new_future()  # its turn, handed on: the count stays as it was
        else:
            self._committing += 1
        # A waiter cancelled before its transaction began is left out: its settle never ran,
        # as a cancelled settle's never did (its run is recovered like any unsettled run).
        batch = [item, *(other for other in self._queue if not other.answer.done())]
        self._queue = []
        try:
            await self._commit_all(batch)
        finally:
            for other in batch:  # cancelled mid-transaction: none of them waits for ever
                if not other.answer.done():
                    other.answer.cancel()
            self._hand_on()
        answer = item.answer.result()
        assert isinstance(answer, _Stored), "a settle's own transaction answers what it stored"
        return answer

    def _hand_on(self) -> None:
        """A settle transaction ended: the first settle still waiting commits the queue next
        (one cancelled meanwhile, whose task has not yet run to leave, is passed over)."""
        while self._queue:
            waiting = self._queue.pop(0)
            if not waiting.answer.done():
                waiting.answer.set_result(YOUR_TURN)
                return
        self._committing -= 1

    def _leave(self, item: _Queued) -> None:
        """A waiting settle was cancelled: it leaves the queue, or, when the turn to commit it
        was already handed to it, hands that on (the count never keeps a turn no one takes)."""
        if item in self._queue:
            self._queue.remove(item)
        elif item.answer.done() and not item.answer.cancelled() \
                and item.answer.exception() is None and item.answer.result() is YOUR_TURN:
            self._hand_on()

    async def _commit_all(self, batch: list[_Queued]) -> None:
        """Every settle of ``batch`` and its lane's next claim, in one transaction: each item's
        answer set. When that transaction fails (a result the store refuses, say), each is
        committed alone, without its claim (the pass then claims it)."""
        if len(batch) > 1:
            claims: dict[str, tuple[Entry, Release]] = {}
            for item in batch:
                if item.follow is not None and item.follow[0].id not in claims:
                    claims[item.follow[0].id] = item.follow
                elif item.follow is not None:  # two lanes' next is one job: claimed once
                    item.follow = None
            try:
                done = await self._engine.lanes.group_commit(
                    [item.change(item.outcome) for item in batch],
                    [entry for entry, _ in claims.values()],
                    {job_id: release for job_id, (_, release) in claims.items()},
                    max(item.now for item in batch))
            except Exception as exc:
                log.debug("pyjobq: %d settles in one transaction failed (%s): each alone",
                          len(batch), exc)
                for item in batch:
                    item.follow = None  # its run lock was let go with the transaction
            else:
                for i, item in enumerate(batch):
                    if not item.answer.done():  # its settle cancelled meanwhile: stored anyway
                        follows_here = item.follow is not None \
                            and item.follow[0].id in self._engine.flights
                        item.answer.set_result(_Stored([done[i]], follows_here))
                return
        # Each alone, whatever the others did (one cancelled meanwhile not), side by side: one
        # whose store refuses it waits out its tries without holding the others back. A settle
        # that came alone (the usual case) is awaited here: a task of its own would cost a
        # browser task a job.
        alone = [item for item in batch if not item.answer.done()]
        if len(alone) == 1:
            await self._commit_alone(alone[0])
        elif alone:
            await asyncio.gather(*(self._commit_alone(item) for item in alone))

    async def _commit_alone(self, item: _Queued) -> None:
        try:
            answer = await self._commit(item.job_id, item.change, item.outcome, item.follow,
                                        item.now)
        except Exception as exc:
            if not item.answer.done():
                item.answer.set_exception(exc)
        else:
            if not item.answer.done():
                item.answer.set_result(answer)

    async def _commit(self, job_id: str, change: Callable[[RunResult], Change],
                      outcome: RunResult, follow: tuple[Entry, Release] | None,
                      now: float) -> _Stored:
        """Store ``outcome`` with the claim of ``follow``, one transaction: what each change did,
        the settle first, and whether the lane went on with ``follow``. Tried again after each of
        :data:`RETRY_MS`; then the store's error is raised (:meth:`_kept` goes on from there)."""
        e = self._engine
        for wait in (*RETRY_MS, None):
            try:
                done = await e.lanes.group_commit(
                    [change(outcome)], [follow[0]] if follow else [],
                    {follow[0].id: follow[1]} if follow else {}, now)
                return _Stored(done, follow is not None and follow[0].id in e.flights)
            except Exception as exc:
                follow = None  # its run lock went with the transaction: the pass claims it
                if wait is None or e.control.stopped or isinstance(exc, DatabaseUpgradedError):
                    raise
                # A store's failure may pass (an aborted transaction, a connection closing):
                # the outcome is the page's answer, and is not to be lost for it.
                log.warning("pyjobq: storing the outcome of %s failed (%s): again in %g ms",
                            job_id, exc, wait)
                await sleep(e.clock, wait)
        raise AssertionError("unreachable: the last try returns or raises")

    async def _kept(self, job_id: str, change: Callable[[RunResult], Change],
                    outcome: RunResult, failure: Exception) -> _Stored:
        """Store ``outcome`` however long the store refuses it: tried again after
        :data:`KEEP_MS` doubling to :data:`KEEP_MAX_MS`, for as long as the engine runs (the
        page's life). A success whose write failed for its value (:func:`refused_the_value`:
        a value the store cannot clone, a quota) is stored failed, clearly
        (``result_not_storable``), once the store takes the record without its result: running
        the job again would give the same result. Any other failure is the store's, and passes:
        the success is tried again whole. Raises once the engine stopped."""
        e = self._engine
        last = failure

        async def store() -> _Stored:
            nonlocal last
            if e.control.stopped:
                raise last
            value = outcome
            if outcome.ok and refused_the_value(last):
                log.error("pyjobq: storing the result of %s failed (%s): it is failed as not "
                          "storable", job_id, last)
                value = RunResult(ok=False, error=f"the result could not be stored: {last}",
                                  status=outcome.status, code=Code.RESULT_NOT_STORABLE,
                                  terminal=True)
            try:
                return _Stored(await e.write([change(value)]), False)
            except Exception as exc:
                last = exc
                raise

        # A value the store refused is stored failed at once; a store's failure waits first.
        return await again_doubling(
            e.clock, store, first_ms=KEEP_MS, max_ms=KEEP_MAX_MS,
            passes=lambda exc: not e.control.stopped and not isinstance(exc, DatabaseUpgradedError),
            said=lambda exc, wait: log.warning(
                "pyjobq: storing the outcome of %s failed (%s): it is kept, and tried again in "
                "%g s", job_id, exc, wait / 1000),
            failed=None if outcome.ok and refused_the_value(failure) else failure)

    async def _delete_if_done(self, settled: Updated) -> None:
        if self._engine.mode.on_success == "delete" and settled.applied \
                and settled.record is not None and settled.record.status is Status.DONE:
            # Done was published first, so whoever waits on the job sees it succeed.
            await self._engine.store.delete_many([settled.record.id])
            self._engine.publish([settled.record], deleted=True)
