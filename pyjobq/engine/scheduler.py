"""The scheduler: owns the persistent store, the retry schedule, the lanes and the lease.

Theory of operation
-------------------
One scheduler runs per executor side (in the browser: a module Web Worker).
Every tab has one, but only the holder of the processor lease (a Web Lock
named by ``lock_name``) processes; the others wait on the lock, and a closed or
crashed tab releases it by itself (spec: "Preventing duplicate execution").

A *pass* runs inside the lease (:class:`~pyjobq.engine.passes.Pass`, pyjobq/engine/passes.py):
it recovers running records no page of ours has in flight, returns paused jobs
whose yield lock is free and starts the oldest due job of every idle lane, then
waits for a ``run_result``, a wake or the retry timer. It ends only once nothing
is in flight and nothing is due, so recovery never races this page's own runs.
After a pass one timer is armed for the soonest ``next_retry_at``.

The scheduler is the parts' meeting point; each part has its own module:

* the pass — :mod:`pyjobq.engine.passes` (its decisions: :mod:`pyjobq.core.lanes`,
  :mod:`pyjobq.core.policy`, over :mod:`pyjobq.core.view`);
* the in-flight table — :mod:`pyjobq.engine.inflight` (claims, deadlines, run locks'
  releases, waiters; every way out of it in one place);
* the run locks, lock watches and the one retry timer — :mod:`pyjobq.engine.runlocks`;
* the requests a page sends, as a table of handlers — :mod:`pyjobq.engine.requests`;
* the news it publishes — :mod:`pyjobq.engine.publisher`;
* the retention sweep — :mod:`pyjobq.engine.sweeper`;
* the mode, one frozen value — :mod:`pyjobq.core.mode`.

What stays here: the lifecycle, the lease, the message router, the handshake and
the settle (with its group commit of the lane's next claim), and ``write`` — the
one way a change reaches the store, so everything stored is published and seen by
the pass's view.

Volatile jobs and the outbox (:class:`pyjobq.outbox.Outbox`) are this same loop
in another :class:`~pyjobq.core.mode.Mode` (pyjobq/core/mode.py says what each
preset decides): on the outbox's leases a claim writes ``next_retry_at`` on the
running record, so processors that share a store but no lock reclaim a lease
that ran out as due work, and a done entry is deleted. ``backoff`` takes the
outbox's ladder.

The scheduler never runs user code: it posts ``run`` and the page answers
``run_started`` then ``run_result``. Only the handshake is timed.

Frozen and back/forward-cached tabs: the page holds the lease for its worker, and each run
holds a *run lock* until its outcome is stored, so a frozen run is neither doubled nor lost —
:mod:`pyjobq.engine.lease` explains it.

All decisions come from :mod:`pyjobq.core`; this module only carries them out
through the ports, so the same code runs in a worker and in the CPython
multi-tab simulation.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random as _random
from typing import Any, Callable, Mapping, Sequence

from .tasks import TaskSet
from ..core import messages, policy
from ..core.backoff import make_backoff
from ..core.messages import RECHECK_MS, make
from ..core.router import Router
from ..core.ports import Change, Channel, Clock, Lease, Link, LockManager, Store, Timer, Updated
from ..core.mode import JOB_QUEUE, Mode
from ..core.records import JobRecord, RunResult, check_json
from ..core.errors import InvalidJobError
from ..core.status import ONLY_PENDING, ONLY_RUNNING, Status
from ..core.codes import Code
from ..core.mode import RETENTION_MS  # noqa: F401  (re-exported: tests and callers import it here)
from .requests import RequestHandlers
from .inflight import Flight, FlightTable
from .lease import LEASE_MESSAGES, LockLease
from .passes import Pass
from .publisher import Publisher
from .sweeper import Sweeper
from .runlocks import RunLocks, WakeTimer

__all__ = ["Scheduler", "RETENTION_MS", "DEFAULT_HANDSHAKE_MS"]

log = logging.getLogger("pyjobq")

DEFAULT_HANDSHAKE_MS = 10_000.0
#: After a pass raised (a transient store error, say), the next one runs this soon, doubling to
#: PASS_RETRY_CAP_MS while passes keep failing: the queue runs on without an unrelated wake.
PASS_RETRY_MS = 1_000.0
PASS_RETRY_CAP_MS = 30_000.0
#: While lanes chain settle to claim, the pass still looks (recovery, unparking, other news) this often.
LOOK_EVERY_MS = 1_000.0


class Scheduler:
    def __init__(
        self,
        *,
        store: Store,
        locks: LockManager,
        channel: Channel,
        link: Link,
        clock: Clock,
        lock_name: str,
        source: str,
        yields: Mapping[str, str] | None = None,
        handshake_timeout_ms: float = DEFAULT_HANDSHAKE_MS,
        random: Callable[[], float] = _random.random,
        is_online: Callable[[], bool] = lambda: True,
        mode: Mode = JOB_QUEUE,
        backoff: Callable[[int], float] | None = None,
        lease: Lease | None = None,
    ) -> None:
        """The engine of one of pyjobq's queues, named by ``mode`` (pyjobq/core/mode.py).

        Args:
            mode: :data:`~pyjobq.core.mode.JOB_QUEUE` (the default), ``VOLATILE`` or
                ``OUTBOX`` (``OUTBOX.with_lease(ms)`` for another lease length).
            backoff: the retry ladder; default :func:`~pyjobq.core.backoff.make_backoff`.
            lease: the processor lease; default a :class:`~pyjobq.engine.lease.LockLease` on
                ``lock_name`` held by this scheduler. A worker whose page has a document
                gets a :class:`~pyjobq.engine.lease.LinkLease` (the page holds the lock).
        """
        if not isinstance(mode, Mode):
            raise TypeError(f"mode must be a pyjobq.core.mode.Mode (JOB_QUEUE, VOLATILE or OUTBOX), got {mode!r}")
        self.mode = mode
        self.store = store
        self.locks = locks
        self._channel = channel
        self.link = link
        self.clock = clock
        self._lock_name = lock_name
        self.source = source
        self.yields = dict(yields or {})
        self._handshake_ms = handshake_timeout_ms
        #: The retry ladder: attempt n → delay in ms.
        self.backoff = backoff if backoff is not None else make_backoff(random)
        #: ``navigator.onLine`` here, read when an outcome says nothing of the network.
        self.is_online = is_online
        #: The runs handed off, until their outcome is stored (pyjobq/engine/inflight.py).
        self.flights = FlightTable(clock, source, on_ended=self._on_ended)
        self._publisher = Publisher(link=link, channel=channel, source=source, volatile=mode.volatile)
        self._handlers = RequestHandlers(self)
        self.kick = asyncio.Event()
        self.wanted = False
        self._pass_task: asyncio.Future[None] | None = None
        self.retry_timer = WakeTimer(clock, self.wake)
        self._tasks = TaskSet(log, "pyjobq scheduler task failed")
        self.run_locks = RunLocks(locks, lock_name, enabled=mode.run_locks, spawn=self._spawn, wake=self.wake)
        self._unsubscribe: list[Callable[[], None]] = []
        self.stopped = False
        #: Suspended types (``suspend_type``): their pending jobs park, new ones too.
        self.suspended: set[str] = set()
        self._last_created = 0.0
        if lease is None:
            lease = LockLease(locks, lock_name)
        self._lease = lease
        self.revoked = False
        self._pass_failures = 0
        self._verify_timer: Timer | None = None
        #: Jobs other tabs said they deleted or cancelled while no run of them was in flight here,
        #: with when: a claim stored before that news and handed off after it (a tab frozen in
        #: between) is checked at its hand-off rather than at the 30 s recheck.
        self._told_gone: dict[str, float] = {}
        #: The pass: its view of the queue, its looks, claims and parks (pyjobq/engine/passes.py).
        self._look = Pass(self)
        #: The lease holder's retention sweep (pyjobq/engine/sweeper.py); inert unless mode.retention_ms.
        self.sweeper = Sweeper(mode.retention_ms, store=store, clock=clock, wake=self.wake,
                                publish=lambda records: self.publish_many(records, deleted=True))

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._unsubscribe = [
            self.link.subscribe(Router("pyjobq scheduler", {
                "run_started": self._live(self._run_started),
                "run_checked": self._live(self._run_checked),
                "run_result": self._on_run_result,
                "wake": self._live(lambda _msg: self.wake()),
                "online": self._live(lambda _msg: self.back_online()),
                "progress": self._live(self._progress),
                **{kind: self._answer for kind in self._handlers.table},
            }, ignore=LEASE_MESSAGES | {"debug_counts"},  # the LinkLease's; the worker host's
                refuse=self._handlers.refuse)),
            self._channel.subscribe(Router("pyjobq scheduler", {"job-update": self._on_news}, kind="channel")),
        ]
        self.link.send(make("ready", source=self.source))
        self.wake()

    def stop(self) -> None:
        """Stop processing: cancel timers and listeners. Records are left as they are.

        Runs in flight are abandoned (the page is told ``abandon_run``); under run locks each
        keeps its run lock until its page says the run ended (pyjobq/core/messages.py,
        :data:`~pyjobq.core.messages.ABANDON_GRACE_MS`, says what bounds that), so
        a tab that takes over — one with newer code after a database upgrade — does not
        recover and re-run a job this page is still running.
        """
        self.stopped = True
        self.sweeper.stop()
        self.run_locks.drop_prefetched()
        self.retry_timer.clear()
        if self._verify_timer is not None:
            self._verify_timer.cancel()
            self._verify_timer = None
        for flight in self.flights:
            if self.mode.run_locks:
                self.abandon(flight.job_id)
            else:
                self.flights.finish(flight)
        keep = self._unsubscribe[:1] if self.flights.ending else []  # the link: the pages' last answers
        for unsubscribe in self._unsubscribe[len(keep):]:
            unsubscribe()
        self._unsubscribe = keep
        self.kick.set()

    def back_online(self) -> None:
        """The ``online`` event: jobs waiting out an offline failure are due now; process."""
        self._spawn(self._back_online())

    async def _back_online(self) -> None:
        now = self.clock.now()
        # One transaction reads and changes them: a delete or cancel between a read and a write
        # is never undone (issue 22, finding 10).
        done = await self.store.update_by_status(ONLY_PENDING, lambda cur: policy.back_online(cur, now))
        self.publish_many([u.record for u in done if u.applied and u.record is not None])
        self.wake()

    def clear_retry_timer(self) -> None:
        """Drop the pending retry wake; the next enqueue or wake() arms it again."""
        self.retry_timer.clear()

    @property
    def in_flight(self) -> frozenset[str]:
        return self.flights.ids

    @property
    def passes(self) -> int:
        """How many passes this scheduler has run: each time it held the lease and looked at the
        queue until nothing was left to do. With :attr:`looks`, what a test counts to tell an
        idle holder from one that spins (issue 22: no passes back to back while nothing changes)."""
        return self._look.runs

    @property
    def looks(self) -> int:
        """How many looks its passes took (each time round a pass's loop: recover, unpark, start
        what is ready). A pass waiting on a lane, an ending run or a lock takes none."""
        return self._look.looks

    def wake(self) -> None:
        """Process soon: an enqueue, the ``online`` event or the retry timer."""
        if self.stopped:
            return
        self.wanted = True
        self.kick.set()
        if self._pass_task is None or self._pass_task.done():
            self._pass_task = asyncio.ensure_future(self._pass())

    def _spawn(self, coro: Any) -> None:
        self._tasks.spawn(coro)

    # ------------------------------------------------------------ the pass

    async def _pass(self) -> None:
        try:
            while not self.stopped:
                if self.wanted:
                    self.wanted = False
                    self.revoked = False
                    if not await self._lease.hold(self._look.run, self._on_revoked):
                        # Taken away mid-pass (the page froze): ask again; the page grants it on resume.
                        self.wanted = True
                    continue
                await self._arm_retry_timer()
                self._pass_failures = 0
                if not self.wanted:
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            # Re-arm the wake here, not from the store (it may be what failed): a job due in a
            # second must not wait for an unrelated wake.
            self._pass_failures += 1
            delay = min(PASS_RETRY_MS * 2 ** (self._pass_failures - 1), PASS_RETRY_CAP_MS)
            log.exception("pyjobq scheduler pass failed; it runs again in %g s", delay / 1000)
            if not self.stopped:
                self.retry_timer.arm_in(delay)

    def _on_revoked(self) -> None:
        self.revoked = True
        self.run_locks.drop_prefetched()
        self.kick.set()

    def _ours(self) -> set[str]:
        return self.flights.ours()

    async def write(self, changes: list[Change]) -> list[Updated]:
        """One transaction of read-modify-writes; what applied is published (and so seen)."""
        if not changes:
            return []
        done = await self.store.update_many(changes)
        self.publish_many([u.record for u in done if u.applied and u.record is not None])
        for change, updated in zip(changes, done):
            if updated.applied:
                continue
            if updated.record is None and self._look.view is not None:
                self._look.view.forget(change.job_id)
            elif updated.record is not None and self._look.view is not None:
                self._look.view.apply(updated.record)  # what is stored, whatever the view believed
        return done

    def hand_off(self, record: JobRecord, release_run_lock: Callable[[], None] | None = None) -> None:
        flight = self.flights.add(record.id, record.type, release_run_lock=release_run_lock,
                                  deadline_ms=self._handshake_ms, on_deadline=self._on_deadline)
        self.link.send(make(
            "run",
            job_id=record.id,
            claim=flight.claim,
            reconstructor=record._reconstructor,
            params=record._params,
            job_type=record.type,
            attempt=record.attempts,
        ))
        self._arm_verify()
        if self._told_gone.pop(record.id, None) is not None:
            self._spawn(self._verify_gone(record.id, flight.claim))
        self._look.prefetch(record.type)

    def _arm_verify(self) -> None:
        if self._verify_timer is None and self.flights and not self.stopped and self.mode.run_locks:
            self._verify_timer = self.clock.call_later(RECHECK_MS, self._verify_in_flight)

    def _verify_in_flight(self) -> None:
        """Read the records of the runs in flight: one deleted or cancelled by a tab that died (or
        froze) before broadcasting it is dropped here rather than run to its end."""
        self._verify_timer = None
        for flight in self.flights:
            if flight.started:
                self._spawn(self._verify_gone(flight.job_id, flight.claim))
        self._arm_verify()

    async def _arm_retry_timer(self) -> None:
        self.retry_timer.clear()
        if self.stopped:
            return
        # Work already due at the pass's last look waits for something that announces itself
        # (Pass.wake_after says what): a timer for it would fire at once, again and again.
        now = self.clock.now()
        due_at = await self.store.next_due_at(self._look.wake_after())
        if self.mode.recheck_ms is not None and not self.flights:
            # Idle: look again within the bound even with nothing due (Mode.recheck_ms says why).
            due_at = min(due_at if due_at is not None and math.isfinite(due_at) else math.inf,
                         now + self.mode.recheck_ms)
        if due_at is not None and due_at <= now:
            self.wanted = True  # due since the pass's last look (it froze, say): look again now
        elif due_at is not None and math.isfinite(due_at):
            self.retry_timer.arm_at(due_at)

    # ------------------------------------------------------------ the handshake

    def _run_started(self, msg: dict[str, Any]) -> None:
        flight = self.flights.for_answer(msg)
        if flight is not None:
            self.flights.started(flight)

    def _on_deadline(self, flight: Flight) -> None:
        """The handshake deadline passed with no ``run_started``: ask the page, rather than fail.

        The deadline is the scheduler's clock, and that clock runs while the page cannot answer:
        a page busy with long synchronous Python (a notebook cell), or a tab frozen between
        ``run`` and its handling (the worker thaws with it, its timer overdue). ``run_check``
        travels behind ``run`` on the FIFO link, so the page's answer comes after it handled
        ``run``: a late page answers late — ``run_started`` first — and never wrongly. Only a
        page that handled ``run`` and has no run of this claim in hand fails the job.
        """
        if self.flights.get(flight.job_id) is flight and not flight.started:
            self.link.send(make("run_check", job_id=flight.job_id, claim=flight.claim))

    def _run_checked(self, msg: dict[str, Any]) -> None:
        flight = self.flights.for_answer(msg)
        if flight is not None and not flight.started and msg["started"] is False:
            self._spawn(self._handshake_expired(flight))

    async def _handshake_expired(self, flight: Flight) -> None:
        if self.flights.get(flight.job_id) is not flight or flight.started:
            return
        self.flights.take(flight)
        self.link.send(make("abandon_run", job_id=flight.job_id, claim=flight.claim))
        now = self.clock.now()

        def change(cur: JobRecord) -> JobRecord | None:
            if cur.owner != self.source:
                return None
            return policy.fail(
                cur, now,
                "run_started never came: the page handled 'run' but has no run of this claim in "
                f"hand (asked after {int(self._handshake_ms)} ms). Its executor side did not take "
                f"the run: the handler for reconstructor {cur._reconstructor!r} is missing there.",
                code=Code.HANDSHAKE_TIMEOUT,
            )

        try:
            await self.write([Change(flight.job_id, change, ONLY_RUNNING)])
        finally:
            self.flights.finish(flight)
            self.kick.set()

    def _ended(self, msg: dict[str, Any]) -> bool:
        """A page's word that an abandoned run ended: free its type and its run lock."""
        return self.flights.ended(msg.get("claim"))

    def _on_ended(self) -> None:
        if self.stopped and not self.flights.ending:
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            self._unsubscribe = []
        self.kick.set()

    async def _run_result(self, msg: dict[str, Any]) -> None:
        job_id = msg["job_id"]
        if self._ended(msg):
            return
        flight = self.flights.for_answer(msg)
        if flight is None:
            log.debug("pyjobq: dropped run_result for %s (claim %s), not in flight here",
                      job_id, msg.get("claim"))
            return
        self.flights.started(flight)  # an answer is also a start: no deadline from here on
        offline = msg.get("offline")
        outcome = RunResult(
            ok=msg["ok"],
            result=msg.get("result"),
            error=_opt(msg.get("error"), str),
            status=_opt(msg.get("status"), int),
            code=_opt(msg.get("code"), str),
            terminal=msg.get("terminal") is True,
            interrupted=msg.get("interrupted") is True,
            offline=offline if isinstance(offline, bool) else None,
        )
        if outcome.ok:
            try:
                check_json(outcome.result, "the executor's result")
            except InvalidJobError as exc:
                # Storable means storable: running it again would give the same result.
                outcome = RunResult(ok=False, error=str(exc), status=outcome.status,
                                    code=Code.RESULT_NOT_STORABLE, terminal=True)
        if flight.settled is not None:  # suspend_type aborted this run
            outcome = policy.after_abort(outcome)
        held_lock = None
        yield_lock = self.yields.get(flight.type)
        if outcome.interrupted and yield_lock:
            if (await self.locks.held()).get(yield_lock) == "exclusive":
                held_lock = yield_lock
        now = self.clock.now()
        # The page's reading when the attempt failed; an older page sends none: ours, now.
        online = not outcome.offline if outcome.offline is not None else self.is_online()
        suspended = outcome.interrupted and flight.type in self.suspended

        def settle(cur: JobRecord) -> JobRecord | None:
            if cur.owner != self.source:
                return None
            return policy.settle(cur, outcome, now=now, online=online, backoff=self.backoff,
                                 held_yield_lock=held_lock, suspended=suspended,
                                 http_status_rules=self.mode.http_status_rules)

        change = Change(job_id, settle, ONLY_RUNNING)
        # Group commit: the settle and the claim of the lane's next job in one transaction.
        follow = await self._look.follow_on(flight, now)
        followed = False
        try:
            try:
                done = await self._look.group_commit([change], [follow[0]] if follow else [],
                                                dict([(follow[0].id, follow[1])]) if follow else {}, now)
                followed = follow is not None and follow[0].id in self.flights
            except Exception as exc:
                if not outcome.ok:
                    raise
                # A success whose result the store refused: fail it, clearly, rather than leave it
                # running for recovery to run again.
                log.error("pyjobq: storing the result of %s failed: %s", job_id, exc)
                outcome = RunResult(ok=False, error=f"the result could not be stored: {exc}",
                                    status=outcome.status, code=Code.RESULT_NOT_STORABLE, terminal=True)
                done = await self.write([change])
            settled = done[0]
            if self.mode.on_success == "delete" and settled.applied and settled.record is not None \
                    and settled.record.status is Status.DONE:
                # Done was published first, so whoever waits on the job sees it succeed.
                await self.store.delete_many([job_id])
                self.publish_many([settled.record], deleted=True)
        finally:
            self.flights.finish(flight)
            # The lane went on with its next job: the pass need not look again for this one,
            # unless it has not looked for LOOK_EVERY_MS (recovery and unparking keep going).
            if not followed or self.stopped or self.clock.now() - self._look.looked_at >= LOOK_EVERY_MS:
                self.kick.set()
        if held_lock:
            self.run_locks.watch(held_lock)

    # ------------------------------------------------------------ requests from the page

    def _live(self, handler: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
        """``handler``, heard only while this scheduler runs."""
        def live(msg: dict[str, Any]) -> None:
            if not self.stopped:
                handler(msg)
        return live

    def _answer(self, msg: dict[str, Any]) -> None:
        if self.stopped:  # still listening while its pages' runs end: say so, never drop it
            self._handlers.refuse(msg, f"pyjobq's scheduler has stopped on this page, so it did not "
                                       f"run {msg['type']}; reload the page", "PyjobqError")
            return
        self._spawn(self._handlers.answer(msg))

    def _on_run_result(self, msg: dict[str, Any]) -> None:
        if self.stopped:
            self._ended(msg)  # an abandoned run's last word: its run lock goes
            return
        flight = self.flights.for_answer(msg)
        if flight is not None:
            # An answer is also a start, from this event on: a ``run_checked`` right behind it
            # must not find the run unstarted while the settle waits for its task to run.
            self.flights.started(flight)
        self._spawn(self._run_result(msg))

    def _on_news(self, msg: dict[str, Any]) -> None:
        if msg["source"] != self.source:
            for job in messages.updated_jobs(msg):
                self._news(job)

    def _news(self, job: dict[str, Any]) -> None:
        """One record another tab (or any same-origin script) says it stored."""
        job_id = job.get("id")
        if self._look.view is not None and isinstance(job_id, str) and not job.get("progress_only") \
                and not job.get("volatile"):
            # News, not truth: the next look reads this record from the store.
            self._look.view.mark_stale(job_id)
            self.kick.set()
        # Another tab says it deleted or cancelled a job this page is running. The channel is
        # news (any same-origin script can post on it): drop the run only if the store agrees.
        flight = self.flights.get(job_id) if isinstance(job_id, str) else None
        gone = job.get("deleted") or job.get("status") == Status.CANCELLED.value
        if flight is None and gone and isinstance(job_id, str):
            now = self.clock.now()
            self._told_gone = {i: t for i, t in self._told_gone.items() if now - t < RECHECK_MS}
            self._told_gone[job_id] = now
        if flight is not None and gone:
            self._spawn(self._verify_gone(flight.job_id, flight.claim))
        # Another tab has persistent work under way: queue up on the lease, so that if that
        # tab goes away mid-run this one takes over (its pass recovers the running record)
        # with no enqueue, online event or retry timer of its own to prompt it. If the
        # other tab finishes normally, our pass finds nothing to do and ends.
        elif not self.mode.volatile and not job.get("volatile") and not job.get("progress_only") \
                and job.get("status") in (Status.PENDING.value, Status.RUNNING.value):
            self.wake()

    def _progress(self, msg: dict[str, Any]) -> None:
        """Progress travels in a job-update and is not stored: it is only news."""
        if msg["job_id"] in self.flights:
            self._publisher.progress(msg["job_id"], msg.get("progress"), msg.get("note"))

    async def _verify_gone(self, job_id: str, claim: str) -> None:
        record = await self.store.get(job_id)
        flight = self.flights.get(job_id)
        if flight is None or flight.claim != claim:
            return
        if record is None or record.status is not Status.RUNNING or record.owner != self.source:
            self.abandon(job_id)

    def abandon(self, job_id: str) -> None:
        """Drop a run (deleted, cancelled, or this scheduler stopped): nothing of it will be stored.

        Its type and run lock stay busy until the page says the run ended — its request may
        still be on the wire. The page bounds that: it ends the run within
        :data:`ABANDON_GRACE_MS` of *handling* ``abandon_run``, and this scheduler keeps no
        clock of its own (one started here would run out early on a busy or frozen page).
        """
        flight = self.flights.abandon(job_id)
        if flight is None:
            return
        self.link.send(make("abandon_run", job_id=job_id, claim=flight.claim))
        self.kick.set()

    def stamp(self) -> float:
        """A created_at that strictly increases on this scheduler, so jobs filed in one
        millisecond still drain in filing order (lanes order by created_at, then id)."""
        self._last_created = max(self.clock.now(), self._last_created + 0.001)
        return self._last_created

    # ------------------------------------------------------------ updates

    def publish_many(self, records: Sequence[JobRecord], **extra: Any) -> None:
        """Tell every page of records one transaction stored (or, ``deleted=True``, deleted).
        The pass's view takes them too: every write of ours passes here."""
        if self._look.view is not None:
            for record in records:
                if extra.get("deleted"):
                    self._look.view.forget(record.id)
                else:
                    self._look.view.apply(record)
        self._publisher.records(records, **extra)


def _opt(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None
