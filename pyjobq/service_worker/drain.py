"""The Service Worker's drain, on ports: :func:`drain`.

Theory of operation
-------------------
pyjobq's Service Worker is a tab without a page. When the browser wakes it (a ``sync`` event,
or its own start where Background Sync is refused) it runs this drain with the browser's ports
(:mod:`pyjobq.service_worker.worker`); CPython tests run the very same drain on the memory adapters
(``tests/test_sw_drain.py``). It runs the pages' engine — the scheduler and the executor side
linked in this one context, on the origin's store, locks and channel — so the retry policy,
lanes, run locks, the attempt ceiling and the ``job-update`` news are the pages' own. What
differs is only when it holds the processor lease:

* **Only if no page holds it.** It asks for the lock with ``if_available``: a page that holds
  it is processing (``lease_held``). While jobs are unfinished it asks again every
  :data:`WAIT_LOOK_MS` until its budget ends: a page closed a moment after saving leaves its
  run ``running`` with no page to recover it, and the Service Worker takes the lease the
  moment the page is gone (the sync that woke it was asked for by that save). When every job
  has ended meanwhile, the page did the work, and it stops.
* **Never against a page.** A page that opens gets in line for the lease and pings its holder
  (the lease watch, pyjobq/engine/lease.py): the drain hears the ping, answers it (it is alive:
  no page takes the lease from it while it finishes) and lets the lease go to the page; it also
  looks every :data:`LOOK_MS` at the origin's waiting lock requests, for a page whose ping it
  missed. It stops claiming at once — before its running job's settle could chain the lane's
  next — its runs finish under their run
  locks (pyjobq/engine/lease.py: a run lock keeps a run from being recovered or doubled) —
  however long they take, up to the event's end — then it releases the lock: one processor
  throughout (``page``).
* **Before the browser's limit.** A sync event may run about 3 minutes. At ``budget_ms`` (the
  script gives 120 s, counted from the event) it stops claiming (``budget``); runs still going
  :data:`GRACE_MS` later are abandoned — the jobs pending for the next sync. A Service Worker
  the browser ends anyway (its run locks go with it) leaves running records that the next
  holder recovers with the attempt given back (``policy.recover``: the owner is a Service
  Worker's source), a bounded number of times, so being cut short does not spend attempts
  while a job that kills the Service Worker every time still reaches its end.
* **Only what it can run.** ``fetch`` jobs through the app's transport, and the reconstructors
  it was given (the page's tasks whose modules import there). A job of another kind is given
  back at once (interrupted, no attempt spent) and its type is left to the pages
  (:class:`~pyjobq.engine.passes.LeftForPages`): that lane waits for a page,
  which has the reconstructor — the job is never failed as orphaned here, and its lane's later
  jobs keep their place behind it — while every other lane drains. With no tab open, one job
  only a page can run must not hold back the work the Service Worker can do. When what is left
  due is only such lanes', the drain ends (``refused``); their jobs are reported apart
  (``for_pages``) and fail no event — no sync could run them; the next page that opens does.

The drain ends on its own when nothing runs and nothing falls due before its budget ends
(``done``): a job filed with a delay due in a few seconds is waited for, but not the retry of
a job whose attempt failed in this drain — that retry is the next sync's. With no tab open an
API outage would otherwise spend a job's whole ladder (1 s, 2 s, 4 s, 8 s) within one event,
and fail a save made just before the laptop closed over a 20-second outage; left to the next
sync, its tries are spaced by the browser's own sync back-off (minutes), one try a sync. (A
retry that falls due while other work keeps the drain running is run then, as usual.) Its
:class:`DrainReport` says how many pending jobs it left (due now or later), so the script can
make the event fail and the browser fire it again later (Background Sync's retries): no job it
can run is left waiting for a page.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random as _random
from dataclasses import dataclass
from typing import AbstractSet, Any, Awaitable, Callable, Mapping

from ..core.errors import DatabaseUpgradedError, Interrupted, LockStolen
from ..core.mode import JOB_QUEUE
from ..core.ports import Channel, Clock, LockManager, Store
from ..core.records import JobRecord
from ..core.router import Router
from ..core.status import TERMINAL, Status
from ..engine.lease import ServiceWorkerLease, answer_pings
from ..engine.scheduler import Scheduler
from ..executor.side import ExecutorSide
from ..executor.wiring import in_process
from ..loop import sleep as _sleep

log = logging.getLogger("pyjobq")

#: How often the holder looks for a page waiting for the lease, and whether it is done.
LOOK_MS = 250.0
#: How often a drain that found a page holding the lease looks again, while jobs are unfinished.
WAIT_LOOK_MS = 1_000.0
#: How long runs may go on after the drain stopped claiming before they are abandoned.
GRACE_MS = 20_000.0


@dataclass
class DrainReport:
    """How a drain went (``self.pyjobqDrains`` in the Service Worker's console lists them)."""

    #: Why it stopped: ``lease_held`` (a page processes), ``done`` (nothing due), ``page`` (a
    #: page asked for the lease), ``budget`` (the event's time was spent), ``refused`` (what is
    #: due is only in lanes of a kind only pages can run), ``upgraded`` (another tab upgraded
    #: the database).
    stopped: str = "done"
    #: Jobs that reached an end (done, failed, cancelled) during the drain.
    ended: int = 0
    #: Jobs still pending (due now or later) or running when it stopped, but for those in
    #: lanes only a page can run (``for_pages``): the sync is fired again later.
    left: int = 0
    #: Jobs pending in the lanes of a kind only pages can run (their first job's type): no
    #: sync can run them, so they fail no event; the next page that opens runs them.
    for_pages: int = 0

    def to_json(self) -> str:
        return json.dumps({"stopped": self.stopped, "ended": self.ended, "left": self.left,
                           "for_pages": self.for_pages})


@dataclass(frozen=True)
class DrainPorts:
    """What the drain runs on: the origin's store, locks and channels, and this context's clock.

    ``channel`` makes a new channel object for each user (the scheduler's and the executor
    side's, as in a tab); ``lease_channel`` one on the lease's channel
    (:func:`pyjobq.engine.lease.lease_channel_name`), where a page in line pings the holder —
    the drain hears a page that waits for the lease the moment it gets in line (None: only its
    look every :data:`LOOK_MS` does); ``random`` is the retry ladder's jitter source."""

    store: Store
    locks: LockManager
    channel: Callable[[], Channel]
    clock: Clock
    is_online: Callable[[], bool]
    lease_channel: Callable[[], Channel] | None = None
    random: Callable[[], float] = _random.random


@dataclass(frozen=True)
class DrainQueue:
    """Which queue to drain, and with what (``ServiceWorkerConfig`` resolved)."""

    lock_name: str
    source: str
    transport: Callable[..., Any]
    reconstructors: Mapping[str, Callable[[Any], Any]]
    yields: Mapping[str, str]
    handshake_timeout_ms: float


#: The drain sweeps nothing: the pages' retention (``configure(keep_done_days=...)``) is theirs
#: to apply, and a drain on the default rules would delete what a page keeps longer.
NO_SWEEP = JOB_QUEUE.with_retention(None, None)


def _not_here(name: str) -> Callable[[Any], Callable[[Any], Awaitable[Any]]]:
    """The factory of a kind this Service Worker cannot run: its run is given back."""
    def factory(_params: Any) -> Callable[[Any], Awaitable[Any]]:
        async def run(signal: Any) -> Any:
            # Given back on purpose: the signal says so, or the run would count as a failure.
            signal.abort("left for a page")
            raise Interrupted(f"the Service Worker has no reconstructor {name!r}: left for a page")
        return run
    return factory


async def drain(ports: DrainPorts, queue: DrainQueue, budget_ms: float, *,
                report: DrainReport | None = None,
                lease: ServiceWorkerLease | None = None) -> DrainReport:
    """Run the due jobs of ``queue``, if no page processes it; see the module docstring.

    ``report`` and ``lease`` may be given to watch or stop the drain from outside (the store's
    ``versionchange`` revokes the lease; a test kit reads the report as it goes)."""
    report = report if report is not None else DrainReport()
    lease = lease if lease is not None else ServiceWorkerLease()
    ended: asyncio.Future[None] = asyncio.get_event_loop().create_future()

    async def holding(budget_now: float, lock: Any) -> None:
        try:
            if lock is None:
                if report.stopped != "lease_held":
                    log.info("pyjobq service worker: a page holds the processor lease")
                report.stopped = "lease_held"
                return
            report.stopped, report.left = "done", 0
            await _drain(ports, queue, budget_now, report, lease)
        finally:
            if not ended.done():
                ended.set_result(None)

    deadline = ports.clock.now() + budget_ms
    try:
        while True:
            ended = asyncio.get_event_loop().create_future()
            budget_now = max(0.0, deadline - ports.clock.now())
            await ports.locks.request(queue.lock_name, functools.partial(holding, budget_now),
                                      if_available=True)
            if report.stopped != "lease_held":
                break
            # A page processes. Its jobs are its own while it lives; but a page closed mid-run
            # (a moment after saving) leaves them running, with no page to recover them: while
            # jobs are unfinished, look again for a free lease until the budget ends.
            report.left, report.for_pages = await _left(ports.store, frozenset())
            if report.left == 0 or ports.clock.now() + WAIT_LOOK_MS >= deadline:
                break
            await _sleep(ports.clock, WAIT_LOOK_MS)
    except DatabaseUpgradedError as exc:
        # A page with newer code upgraded the database (the store's ``on_upgraded`` revoked the
        # lease): this Service Worker's code can no longer read it. The newer page processes;
        # the drain ends with its report rather than the store's error.
        log.info("pyjobq service worker: %s", exc)
        report.stopped, report.left, report.for_pages = "upgraded", 0, 0
    except LockStolen:
        # A page in line took the lease (its lease watch hears no answer to its pings from a
        # Service Worker: pyjobq/engine/lease.py) while runs outlasted its wait. It asked first,
        # so the drain had stopped claiming; its runs go on under their run locks, and the drain
        # ends as it would have — with its report, not the lock manager's error.
        log.info("pyjobq service worker: a page took the lease over; finishing the runs")
        if not lease.revoked:
            report.stopped = "page"
        lease.stolen = True  # its pings are the new holder's to answer
        lease.revoke()
        await ended
    return report


async def _drain(ports: DrainPorts, queue: DrainQueue, budget_ms: float, report: DrainReport,
                 lease: ServiceWorkerLease) -> None:
    clock = ports.clock
    started = clock.now()
    engine = in_process(
        store=ports.store, source=queue.source, clock=clock, lock_name=queue.lock_name,
        locks=ports.locks, channel=ports.channel(), yields=queue.yields,
        handshake_timeout_ms=queue.handshake_timeout_ms, is_online=ports.is_online, lease=lease,
        random=ports.random, mode=NO_SWEEP)
    refused: list[str] = []
    #: The types of the kinds it cannot run: their lanes wait for a page.
    left = engine.scheduler.left_for_pages

    def unknown_kind(name: str, job_type: str) -> Callable[[Any], Any]:
        refused.append(name)
        left.add(job_type)  # the pages have the reconstructor
        return _not_here(name)

    side = ExecutorSide(link=engine.link, engine=engine.scheduler, channel=ports.channel(),
                        source=queue.source, transport=queue.transport, locks=ports.locks,
                        yields=queue.yields, reconstructors=queue.reconstructors,
                        is_online=ports.is_online, unknown_kind=unknown_kind)
    scheduler = engine.scheduler

    #: The jobs whose attempt failed in this drain and wait out a retry: left for the next sync.
    tried: set[str] = set()
    side.on_update(functools.partial(_heard, report, tried))
    unhear = _hear_pages(ports, queue.source, lease, report)
    try:
        try:
            await _hold(lease, scheduler, ports, queue.lock_name, started + budget_ms, report,
                        left.types, tried)
            # Runs in flight finish under their run locks, however the drain stopped (a page
            # that asked for the lease waits for them): abandoned only at the event's end —
            # budget plus grace — since an abandoned request may still reach the server (its
            # transport may not heed the signal), and the job's next run would send it again.
            grace_end = max(clock.now(), started + budget_ms) + GRACE_MS
            await _until(clock, lambda: not scheduler.in_flight, grace_end)
        finally:
            scheduler.stop()
            side.stop()
            lease.end()
        # The abandoned runs' answers (interrupted) are being stored: wait for those stores, up
        # to the same grace end, so budget + grace stays inside the browser's limit on the event.
        # A run whose answer never came stays ``running`` under this source: counted in ``left``.
        await _until(clock, lambda: not scheduler.flights.ending, grace_end)
    finally:
        unhear()
    await _sleep(clock, LOOK_MS)  # the last settles' news reach the report (the link is async)
    if refused:
        if report.stopped == "done":
            report.stopped = "refused"
        log.warning("pyjobq service worker: left jobs of kind(s) %s (type(s) %s) for a page",
                    ", ".join(sorted(set(refused))), ", ".join(sorted(left.types)))
    report.left, report.for_pages = await _left(ports.store, left.types, frozenset(refused))


def _heard(report: DrainReport, tried: set[str], update: Any) -> None:
    """A job's news during the drain: an end is counted, a failed attempt's job is ``tried``."""
    if update.get("status") in TERMINAL and not update.get("deleted"):
        report.ended += 1
    elif update.get("status") == Status.PENDING and update.get("error") is not None \
            and isinstance(update.get("id"), str):
        tried.add(update["id"])


def _hear_pages(ports: DrainPorts, source: str, lease: ServiceWorkerLease,
                report: DrainReport) -> Callable[[], None]:
    """While the drain holds the lease: a ping from a page in line (pyjobq/engine/lease.py, the
    lease watch) is a page that waits for it — the drain claims nothing more from that moment,
    not from its next look, so its run's settle does not chain the lane's next job — and it is
    answered while the drain holds the lock: the Service Worker is alive, finishing its runs,
    and no page takes the lease from it. Once a page took it (``lease.stolen``), the pings are
    the new holder's: a silent one must be found silent. Returns what stops hearing."""
    if ports.lease_channel is None:
        return lambda: None
    channel = ports.lease_channel()

    def page_waits(_msg: Any) -> None:
        if not lease.revoked:
            log.info("pyjobq service worker: a page asks for the lease; letting it go")
            report.stopped = "page"
            lease.revoke()

    unanswer = answer_pings(channel, source, lambda: not lease.stolen)
    unhear = channel.subscribe(Router("pyjobq service worker lease", {"lease_ping": page_waits},
                                      quiet=True))

    def stop() -> None:
        unhear()
        unanswer()
        channel.close()
    return stop


async def _hold(lease: ServiceWorkerLease, scheduler: Scheduler, ports: DrainPorts,
                lock_name: str, budget_end: float, report: DrainReport,
                left: AbstractSet[str], tried: AbstractSet[str]) -> None:
    """Hold the lease until a page asks for it, the budget ends, or nothing is due and running
    (but in the lanes ``left`` to the pages, and the retries of the jobs ``tried`` here)."""
    while not lease.revoked:
        await _sleep(ports.clock, LOOK_MS)
        if lease.revoked:
            break
        if lock_name in await ports.locks.waiting():
            log.info("pyjobq service worker: a page asks for the lease; letting it go")
            report.stopped = "page"
            lease.revoke()
        elif ports.clock.now() >= budget_end:
            log.info("pyjobq service worker: the budget is spent; stopping")
            report.stopped = "budget"
            lease.revoke()
        elif not scheduler.in_flight and not await _due_by(ports.store, budget_end, left, tried):
            lease.revoke()  # done for now: nothing it can run falls due before the budget ends


async def _until(clock: Clock, condition: Callable[[], bool], deadline: float) -> None:
    """Wait until ``condition()`` holds, or until ``deadline``."""
    while not condition() and clock.now() < deadline:
        await _sleep(clock, LOOK_MS)



async def _left(store: Store, for_pages: AbstractSet[str],
                kinds: AbstractSet[str] = frozenset()) -> tuple[int, int]:
    """What the drain leaves for the next sync: every pending job, due now or later (a retry
    after a 503, a network error), every paused one, and every running one — a run it
    abandoned whose answer was never stored, or the run of a page that took the lease over
    and may close mid-run (the next holder recovers either). Any of them fails the event, and
    the browser fires it again later, so no job waits for a page to open; a page still
    processing then makes that drain's answer ``lease_held``, with nothing left for it. Apart,
    second: the pending jobs of
    the types ``for_pages`` (lanes only a page can run) while a job of a kind it cannot run
    (``kinds``) is still among them, which no sync could run. A lane whose such job a page has
    since run is the next sync's again: its jobs count as left."""
    pending = await store.by_status(Status.PENDING.value)
    running = await store.by_status(Status.RUNNING.value)
    # A paused job is unfinished too: one whose yield lock nobody holds (or with none, written
    # by other code) is the next look's to unpark, and one still held waits for its lock.
    paused = await store.by_status(Status.PAUSED.value)
    blocked = {r.type for r in pending if r.type in for_pages and r._reconstructor in kinds}
    waiting = sum(r.type in blocked for r in pending)
    return len(pending) - waiting + len(running) + len(paused), waiting


async def _due_by(store: Store, when: float, left: AbstractSet[str],
                  tried: AbstractSet[str]) -> list[JobRecord]:
    """The pending jobs that fall due by ``when``, but for the types ``left`` to the pages and
    the retries of the jobs ``tried`` in this drain (each waits for the next sync)."""
    return [r for r in await store.by_status(Status.PENDING.value)
            if (r.next_retry_at or 0) <= when and r.type not in left and r.id not in tried]
