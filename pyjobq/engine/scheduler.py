"""The scheduler: owns the persistent store, the retry schedule, the lanes and the lease.

Where it runs
-------------
One engine, four places. Every tab's scheduler worker runs one on the persistent store
(pyjobq/browser/worker_main.py); and in the page, the waiting tab's request scheduler
answers its page's store requests on the same store while its worker waits for the lease
(``NeverLease``, pyjobq/browser/page_main.py), the volatile engine runs this tab's volatile
jobs (pyjobq/executor/side.py), and the outbox runs its entries (pyjobq/outbox/) — the
last two in their own :class:`~pyjobq.core.mode.Mode`. The CPython simulation runs them
all in one process.

Theory of operation
-------------------
Every tab has a scheduler worker, but only the holder of the processor lease (a Web Lock
named by ``lock_name``) processes; the others wait on the lock, and a closed or
crashed tab releases it by itself (spec: "Preventing duplicate execution").

A *pass* runs inside the lease (:class:`~pyjobq.engine.passes.Pass`, pyjobq/engine/passes.py):
it recovers running records no page of ours has in flight, returns paused jobs
whose yield lock is free and starts the oldest due job of every idle lane, then
waits for a ``run_result``, a wake or the retry timer. It ends only once nothing
is in flight and nothing is due, so recovery never races this page's own runs.
After a pass one timer is armed for the soonest ``next_retry_at``.

The scheduler is the parts' meeting point. Each part has its own module and is given only
what it uses — callables, or a frozen record of them (``PassEngine``, ``RequestEngine``,
``SettleEngine``) — never the scheduler itself, and each piece of state has one owner:

* the loop's control (wanted, kicked, revoked, stopped) — :mod:`pyjobq.engine.control`;
* the pass and its view of the queue — :mod:`pyjobq.engine.passes` (its decisions:
  :mod:`pyjobq.core.lanes`, :mod:`pyjobq.core.policy`, over :mod:`pyjobq.core.view`);
* the in-flight table — :mod:`pyjobq.engine.inflight` (claims, deadlines, run locks'
  releases, waiters; every way out of it in one place);
* the hand-off, the handshake and abandoned runs — :mod:`pyjobq.engine.handoff`;
* the settle, with its group commit of the lane's next claim — :mod:`pyjobq.engine.settle`;
* the run locks, lock watches and the one retry timer — :mod:`pyjobq.engine.runlocks`;
* the requests a page sends, as a table of handlers, and the suspended types —
  :mod:`pyjobq.engine.requests`;
* the news it publishes — :mod:`pyjobq.engine.publisher`;
* the network coming back, heard or missed — :mod:`pyjobq.engine.online`;
* the retention sweep — :mod:`pyjobq.engine.sweeper`;
* periodic work: the stored schedules' looks, timer and requests — :mod:`pyjobq.engine.periodic`;
* the mode, one frozen value — :mod:`pyjobq.core.mode`.

What stays here: the lifecycle, the lease and the loop that holds it, the message router,
and ``write`` — the one way a change reaches the store, so everything stored is published
and seen by the pass's view.

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
through the ports, so the same code runs in a worker, in the page and in the CPython
multi-tab simulation.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random as _random
from typing import Any, Callable, Coroutine, Final, Mapping, Sequence

from ..core import messages
from ..core.backoff import make_backoff
from ..core.messages import make
from ..core.mode import JOB_QUEUE, Mode
from ..core.ports import (
    Change,
    Channel,
    Clock,
    Lease,
    Link,
    LockManager,
    ScheduleStore,
    Store,
    Updated,
)
from ..core.records import JobRecord
from ..core.router import Router
from ..core.status import Status
from ..loop import TaskSet
from .control import PassControl
from .handoff import Handoff, HandoffEngine
from .inflight import FlightTable
from .lease import LEASE_MESSAGES, LockLease
from .online import BackOnline
from .passes import LeftForPages, Pass, PassEngine
from .periodic import Periodic, PeriodicEngine
from .publisher import Publisher
from .requests import RequestEngine, RequestTable
from .runlocks import RunLocks, WakeTimer
from .settle import SettleEngine, Settler
from .sweeper import Sweeper

__all__ = ["Scheduler", "DEFAULT_HANDSHAKE_MS"]

log = logging.getLogger("pyjobq")

DEFAULT_HANDSHAKE_MS = 10_000.0
#: After a pass raised (a transient store error, say), the next one runs this soon, doubling to
#: PASS_RETRY_CAP_MS while passes keep failing: the queue runs on without an unrelated wake.
PASS_RETRY_MS = 1_000.0
PASS_RETRY_CAP_MS = 30_000.0


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
        schedules: ScheduleStore | None = None,
    ) -> None:
        """The engine of one of pyjobq's queues, named by ``mode`` (pyjobq/core/mode.py).

        Args:
            mode: :data:`~pyjobq.core.mode.JOB_QUEUE` (the default), ``VOLATILE`` or
                ``OUTBOX`` (``OUTBOX.with_lease(ms)`` for another lease length).
            backoff: the retry ladder; default :func:`~pyjobq.core.backoff.make_backoff`.
            lease: the processor lease; default a :class:`~pyjobq.engine.lease.LockLease` on
                ``lock_name`` held by this scheduler. A worker whose page has a document
                gets a :class:`~pyjobq.engine.lease.LinkLease` (the page holds the lock).
            schedules: where periodic schedules are stored (the job queue's store, as a
                :class:`~pyjobq.core.ports.ScheduleStore`); None: this engine keeps none and
                refuses the schedule requests (pyjobq/engine/periodic.py).
        """
        if not isinstance(mode, Mode):
            raise TypeError("mode must be a pyjobq.core.mode.Mode (JOB_QUEUE, VOLATILE or "
                            f"OUTBOX), got {mode!r}")
        # Final: the parts were given them (_wire), so they are never reassigned.
        self.mode: Final = mode
        self.store: Final = store
        #: This engine's end of its link to the page.
        self.link: Final = link
        #: The retry ladder: attempt n → delay in ms.
        self.backoff = backoff if backoff is not None else make_backoff(random)
        #: ``navigator.onLine`` here, read when an outcome says nothing of the network.
        self.is_online = is_online
        #: The runs handed off, until their outcome is stored (pyjobq/engine/inflight.py).
        self.flights: Final = FlightTable(clock, source, on_ended=self._on_ended,
                                          is_online=lambda: self.is_online())
        self._channel = channel
        self._locks = locks
        self._clock = clock
        self._source = source
        self._yields = dict(yields or {})
        self._lease = lease if lease is not None else LockLease(locks, lock_name)
        self._control = PassControl()
        self._tasks = TaskSet(log, "pyjobq scheduler task failed")
        self._loop_task: asyncio.Future[None] | None = None
        self._pass_failures = 0
        self._unsubscribe: list[Callable[[], None]] = []
        #: The types this context leaves to the pages (the Service Worker's drain adds them).
        self.left_for_pages: Final = LeftForPages(mode)
        self._publisher = Publisher(link=link, channel=channel, source=source,
                                    volatile=mode.volatile)
        self._retry_timer = WakeTimer(clock, self.wake)
        self._run_locks = RunLocks(locks, lock_name, enabled=mode.run_locks, spawn=self._spawn,
                                   wake=self.wake)
        #: The lease holder's retention sweep (pyjobq/engine/sweeper.py), if mode.retention_ms.
        self._sweeper = Sweeper(mode, store=store, clock=clock, wake=self.wake,
                                publish=lambda records: self.publish_many(records, deleted=True))
        #: The stored schedules' looks, timer and requests (pyjobq/engine/periodic.py).
        self._periodic = Periodic(PeriodicEngine(
            schedules, clock, publish=self.publish_many,
            announce=schedule_news(channel, source), wake=self.wake))
        self._wire(handshake_timeout_ms)

    def _wire(self, handshake_ms: float) -> None:
        """The parts that meet here, each given only what it uses of the others."""
        mode, store, link = self.mode, self.store, self.link
        clock, source, locks = self._clock, self._source, self._locks
        self._handoff = Handoff(HandoffEngine(
            self.flights, send=link.send, clock=clock, source=source, handshake_ms=handshake_ms,
            recheck=mode.run_locks, control=self._control, get=store.get, write=self.write,
            spawn=self._spawn))
        self._requests = RequestTable(RequestEngine(
            mode=mode, clock=clock, store=store, flights=self.flights, send=link.send,
            write=self.write, publish=self.publish_many, wake=self.wake,
            abandon=self._handoff.abandon))
        self._requests.table.update(self._periodic.handlers)
        #: The pass: its view of the queue, its looks, claims and parks (pyjobq/engine/passes.py).
        self._pass = Pass(PassEngine(
            mode=mode, source=source, clock=clock, store=store, locks=locks, yields=self._yields,
            suspended=self._requests.suspended, flights=self.flights, run_locks=self._run_locks,
            retry_timer=self._retry_timer, sweeper=self._sweeper, periodic=self._periodic,
            control=self._control, write=self.write, hand_off=self._handoff.hand_off,
            publish=self.publish_many, left_for_pages=self.left_for_pages))
        self._online = BackOnline(store=store, clock=clock, flights=self.flights,
                                  is_online=lambda: self.is_online(), publish=self.publish_many,
                                  wake=self.wake, spawn=self._spawn)
        self._settler = Settler(SettleEngine(
            mode=mode, source=source, clock=clock, store=store, locks=locks, yields=self._yields,
            suspended=self._requests.suspended, is_online=lambda: self.is_online(),
            # Read at each settle: the ladder is the engine's attribute, and may be swapped.
            backoff=lambda attempt: self.backoff(attempt),
            flights=self.flights, lanes=self._pass, write=self.write, publish=self.publish_many,
            control=self._control, watch=self._run_locks.watch,
            stored_offline=self._online.stored_offline))

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        requests = self._requests
        self._unsubscribe = [
            self.link.subscribe(Router("pyjobq scheduler", {
                "run_started": self._live(self._handoff.run_started),
                "run_checked": self._live(self._handoff.run_checked),
                "run_result": self._on_run_result,
                "wake": self._live(lambda _msg: self.wake()),
                "online": self._live(lambda _msg: self.back_online()),
                "progress": self._live(self._progress),
                **{kind: self._answer for kind in requests.table},
            }, ignore=LEASE_MESSAGES | {"debug_counts"},  # the LinkLease's; the worker host's
                refuse=requests.refuse))]
        # Under a lease it never gets (the page's request scheduler) there is no pass to keep
        # current, no run to drop, no line to queue in: no news to hear, and no event a message.
        if self._lease.can_be_granted:
            self._unsubscribe.append(self._channel.subscribe(Router("pyjobq scheduler", {
                "job-update": self._on_news,
                "schedule-update": self._live(self._on_schedule_news)}, kind="channel")))
        self.link.send(make("ready", source=self._source))
        self.wake()

    def stop(self) -> None:
        """Stop processing: cancel timers and listeners. Records are left as they are.

        Runs in flight are abandoned (the page is told ``abandon_run``); under run locks each
        keeps its run lock until its page says the run ended (pyjobq/core/messages.py,
        :data:`~pyjobq.core.messages.ABANDON_GRACE_MS`, says what bounds that), so
        a tab that takes over — one with newer code after a database upgrade — does not
        recover and re-run a job this page is still running.
        """
        self._control.stop()
        self._online.close()
        self._sweeper.stop()
        self._periodic.stop()
        self._run_locks.drop_prefetched()
        self._retry_timer.clear()
        self._handoff.stop()
        for flight in self.flights:
            if self.mode.run_locks:
                self._handoff.abandon(flight.job_id)
            else:
                self.flights.finish(flight)
        # The link stays while runs end: the pages' last answers come on it.
        keep = self._unsubscribe[:1] if self.flights.ending else []
        for unsubscribe in self._unsubscribe[len(keep):]:
            unsubscribe()
        self._unsubscribe = keep

    def back_online(self) -> None:
        """The ``online`` event: jobs waiting out an offline failure are due now, and so is each
        run in flight now if it fails offline (its answer may come after the sweep); process."""
        self._online.heard()

    def clear_retry_timer(self) -> None:
        """Drop the pending retry wake; the next enqueue or wake() arms it again."""
        self._retry_timer.clear()

    @property
    def in_flight(self) -> frozenset[str]:
        return self.flights.ids

    @property
    def passes(self) -> int:
        """How many passes this scheduler has run: each time it held the lease and looked at the
        queue until nothing was left to do. With :attr:`looks`, what a test counts to tell an
        idle holder from one that spins (no passes back to back while nothing changes)."""
        return self._pass.runs

    @property
    def looks(self) -> int:
        """How many looks its passes took (each time round a pass's loop: recover, unpark, start
        what is ready). A pass waiting on a lane, an ending run or a lock takes none."""
        return self._pass.looks

    def wake(self) -> None:
        """Process soon: an enqueue, the ``online`` event or the retry timer."""
        if self._control.stopped:
            return
        self._control.want()
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.ensure_future(self._loop())

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._tasks.spawn(coro)

    # ------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        """Hold the lease for a pass while one is wanted; then arm the retry timer."""
        control = self._control
        try:
            while not control.stopped:
                if control.wanted:
                    control.begin_pass()
                    if not await self._lease.hold(self._held_pass, self._on_revoked):
                        # Taken away mid-pass (the page froze): ask again; the page grants it
                        # on resume.
                        control.want_again()
                    continue
                await self._arm_retry_timer()
                self._pass_failures = 0
                if not control.wanted:
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            # Re-arm the wake here, not from the store (it may be what failed): a job due in a
            # second must not wait for an unrelated wake.
            self._pass_failures += 1
            delay = min(PASS_RETRY_MS * 2 ** (self._pass_failures - 1), PASS_RETRY_CAP_MS)
            log.exception("pyjobq scheduler pass failed; it runs again in %g s", delay / 1000)
            if not control.stopped:
                self._retry_timer.arm_in(delay)

    async def _held_pass(self) -> None:
        self._online.begin_pass()  # an online event missed meanwhile (pyjobq/engine/online.py)
        await self._pass.run()

    def _on_revoked(self) -> None:
        self._online.lease_lost()
        self._control.revoke()
        self._run_locks.drop_prefetched()

    async def _arm_retry_timer(self) -> None:
        self._retry_timer.clear()
        if self._control.stopped:
            return
        # Work already due at the pass's last look waits for something that announces itself
        # (Pass.wake_after says what): a timer for it would fire at once, again and again.
        now = self._clock.now()
        due_at = await self.store.next_due_at(self._pass.wake_after())
        if self.mode.recheck_ms is not None and not self.flights:
            # Idle: look again within the bound even with nothing due (Mode.recheck_ms says why).
            due_at = min(due_at if due_at is not None and math.isfinite(due_at) else math.inf,
                         now + self.mode.recheck_ms)
        if due_at is not None and due_at <= now:
            # Due since the pass's last look (it froze, say): look again now.
            self._control.want_again()
        elif due_at is not None and math.isfinite(due_at):
            self._retry_timer.arm_at(due_at)

    # ------------------------------------------------------------ the store

    async def write(self, changes: list[Change]) -> list[Updated]:
        """One transaction of read-modify-writes; what applied is published (and so seen)."""
        if not changes:
            return []
        done = await self.store.update_many(changes)
        self.publish_many([u.record for u in done if u.applied and u.record is not None])
        for change, updated in zip(changes, done):
            if updated.applied:
                continue
            if updated.record is None:
                self._pass.forget(change.job_id)
            else:
                self._pass.saw(updated.record)  # what is stored, whatever the view believed
        return done

    def publish_many(self, records: Sequence[JobRecord], **extra: Any) -> None:
        """Tell every page of records one transaction stored (or, ``deleted=True``, deleted).
        The pass's view takes them too: every write of ours passes here."""
        for record in records:
            if extra.get("deleted"):
                self._pass.forget(record.id)
            else:
                self._pass.saw(record)
        self._publisher.records(records, **extra)

    # ------------------------------------------------------------ what the page and others say

    def _live(self, handler: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
        """``handler``, heard only while this scheduler runs."""
        def live(msg: dict[str, Any]) -> None:
            if not self._control.stopped:
                handler(msg)
        return live

    def _answer(self, msg: dict[str, Any]) -> None:
        if self._control.stopped:  # still listening while its pages' runs end: say so
            self._requests.refuse(msg, "pyjobq's scheduler has stopped on this page, so it did "
                                       f"not run {msg['type']}; reload the page", "PyjobqError")
            return
        self._spawn(self._requests.answer(msg))

    def _on_run_result(self, msg: dict[str, Any]) -> None:
        if self._control.stopped:
            self.flights.ended(msg.get("claim"))  # an abandoned run's last word: its lock goes
            return
        flight = self.flights.for_answer(msg)
        if flight is not None:
            # An answer is also a start, from this event on: a ``run_checked`` right behind it
            # must not find the run unstarted while the settle waits for its task to run.
            self.flights.started(flight)
        self._tasks.spawn(self._settler.settle(msg), now=self.mode.volatile)  # Settler.settle

    def _on_ended(self) -> None:
        if self._control.stopped and not self.flights.ending:
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            self._unsubscribe = []
        self._control.kick()

    def _on_news(self, msg: dict[str, Any]) -> None:
        if msg["source"] != self._source:
            for job in messages.updated_jobs(msg):
                self._news(job)

    def _news(self, job: dict[str, Any]) -> None:
        """One record another tab (or any same-origin script) says it stored."""
        job_id = job.get("id")
        if isinstance(job_id, str) and not job.get("progress_only") and not job.get("volatile"):
            self._pass.heard(job_id)
        # Another tab says it deleted or cancelled a job this page is running. The channel is
        # news (any same-origin script can post on it): the run goes only if the store agrees.
        gone = job.get("deleted") or job.get("status") == Status.CANCELLED.value
        if gone and isinstance(job_id, str) and self._handoff.told_gone(job_id):
            return
        # Another tab has persistent work under way: queue up on the lease, so that if that tab
        # goes away mid-run this one takes over (its pass recovers the running record) with
        # nothing of its own to prompt it. Its offline failure: see BackOnline.heard_of.
        if not self.mode.volatile and not job.get("volatile") and not job.get("progress_only") \
                and job.get("status") in (Status.PENDING.value, Status.RUNNING.value):
            self._online.heard_of(job.get("status"), job.get("code"))
            self.wake()

    @property
    def periodic(self) -> Periodic:
        """The stored schedules' part (its counts: ``enqueued``, ``skipped``)."""
        return self._periodic

    def _on_schedule_news(self, msg: dict[str, Any]) -> None:
        # Another tab changed a schedule: the holder reads them again (a tab in line queues up).
        if msg["source"] != self._source:
            self._periodic.heard()
            self.wake()

    def _progress(self, msg: dict[str, Any]) -> None:
        """Progress travels in a job-update and is not stored: it is only news."""
        if msg["job_id"] in self.flights:
            self._publisher.progress(msg["job_id"], msg.get("progress"), msg.get("note"))


def schedule_news(channel: Channel, source: str) -> Callable[[str], None]:
    """What tells the other tabs that this one changed a stored schedule."""
    def announce(name: str) -> None:
        try:
            channel.post(make("schedule-update", source=source, name=name))
        except Exception as exc:  # a closed channel: other tabs find it at their next pass
            log.info("pyjobq: could not announce schedule %r: %s", name, exc)
    return announce
