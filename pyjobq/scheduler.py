"""The scheduler: owns the persistent store, the retry schedule, the lanes and the lease.

Theory of operation
-------------------
One scheduler runs per executor side (in the browser: a module Web Worker).
Every tab has one, but only the holder of the processor lease (a Web Lock
named by ``lock_name``) processes; the others wait on the lock, and a closed or
crashed tab releases it by itself (spec: "Preventing duplicate execution").

A *pass* runs inside the lease. Each time round its loop it

1. recovers running records that no page of ours has in flight — inside the
   lease, their page is gone — to pending (or failed at the ceiling);
2. returns paused jobs whose yield lock nobody holds exclusively;
3. starts the oldest due job of every idle type (the lanes), checking the
   attempt ceiling before hand-off and parking types whose yield lock is held;

then waits for a ``run_result``, a wake or the retry timer. It ends only once
nothing is in flight and nothing is due, so recovery never races this page's
own runs. After a pass one timer is armed for the soonest ``next_retry_at``.

Volatile jobs and the outbox (:class:`pyjobq.outbox.Outbox`) are this same loop
in another :class:`~pyjobq.core.mode.Mode` (pyjobq/core/mode.py says what each
preset decides): on the outbox's leases a claim writes ``next_retry_at`` on the
running record, so processors that share a store but no lock reclaim a lease
that ran out as due work, and a done entry is deleted. ``backoff`` takes the
outbox's ladder.

The scheduler never runs user code: it posts ``run`` and the page answers
``run_started`` then ``run_result``. Only the handshake is timed.

Frozen and back/forward-cached tabs
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A frozen page keeps its Web Locks and its dedicated worker freezes with it, so a
lease held by the worker would stop the queue for every tab while that tab sits
frozen or in the back/forward cache. So the lease is a port
(:class:`~pyjobq.core.ports.Lease`): in a worker whose page has a document, the
page holds the lock for it and lets go synchronously in ``freeze``/``pagehide``
(:mod:`pyjobq.lease` has the messages, and why the page rather than the worker).
A revoked pass claims nothing more, returns at once and asks for the lease
again; the page grants it on ``resume``/``pageshow``.

What makes that safe is the *run lock*: before claiming a job the scheduler
takes ``<lock_name>:run:<job id>`` (``ifAvailable``) and holds it until the
run's outcome is stored. Recovery skips running records whose run lock is held,
and a type with such a record is busy in the lanes, so the tab that takes the
lease from a frozen one neither runs the frozen job a second time nor starts a
second job of its type; the frozen tab finishes it on resume and stores the
outcome as its owner. A discarded document releases its run locks, and its
running records are then ordinary orphans, recovered by the next pass. Simpler
schemes fail: a worker-held lease is not released while frozen; a page-held
lease without run locks lets the next holder recover — and so double — the
frozen run; recovering by a time limit would bound runs, which the spec forbids
("Only the handshake is bounded").

All decisions come from :mod:`pyjobq.core`; this module only carries them out
through the ports, so the same code runs in a worker and in the CPython
multi-tab simulation.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import math
import random as _random
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .tasks import TaskSet
from .core import lanes, messages, policy
from .core.backoff import make_backoff
from .core.messages import ABANDON_GRACE_MS, RECHECK_MS, BadMessage, make
from .core.ports import Change, Channel, Clock, Lease, Link, LockManager, Store, Timer, Updated
from .core.mode import JOB_QUEUE, RETENTION_MS, Mode
from .core.view import Entry, QueueView
from .core.records import JobRecord, NewJob, RunResult, check_json
from .errors import InvalidJobError
from .core.status import TERMINAL, Status
from .lease import LEASE_MESSAGES
from .retention import Sweeper, sweep

log = logging.getLogger("pyjobq")

DEFAULT_HANDSHAKE_MS = 10_000.0
#: After a pass raised (a transient store error, say), the next one runs this soon, doubling to
#: PASS_RETRY_CAP_MS while passes keep failing: the queue runs on without an unrelated wake.
PASS_RETRY_MS = 1_000.0
PASS_RETRY_CAP_MS = 30_000.0
#: While lanes chain settle to claim, the pass still looks (recovery, unparking, other news) this often.
LOOK_EVERY_MS = 1_000.0
#: At most this many records in one ``job-update`` (a burst of 10,000 is twenty messages).
NEWS_BATCH = 500


@dataclass
class _InFlight:
    job_id: str
    type: str
    #: This claim's identifier: ``run`` carries it and the page echoes it, so an answer for an
    #: earlier claim of the same job is never taken for this one's.
    claim: str = ""
    started: bool = False
    deadline: Timer | None = None
    settled: asyncio.Future[None] | None = None
    release_run_lock: Callable[[], None] | None = None


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
            lease: the processor lease; default a :class:`~pyjobq.lease.LockLease` on
                ``lock_name`` held by this scheduler. A worker whose page has a document
                gets a :class:`~pyjobq.lease.LinkLease` (the page holds the lock).
        """
        if not isinstance(mode, Mode):
            raise TypeError(f"mode must be a pyjobq.core.mode.Mode (JOB_QUEUE, VOLATILE or OUTBOX), got {mode!r}")
        self.mode = mode
        self.store = store
        self._locks = locks
        self._channel = channel
        self._link = link
        self._clock = clock
        self._lock_name = lock_name
        self.source = source
        self._yields = dict(yields or {})
        self._handshake_ms = handshake_timeout_ms
        self._backoff = backoff if backoff is not None else make_backoff(random)
        self._is_online = is_online
        self._in_flight: dict[str, _InFlight] = {}
        self._kick = asyncio.Event()
        self._wanted = False
        self._pass_task: asyncio.Future[None] | None = None
        self._retry_timer: Timer | None = None
        self._watching: set[str] = set()
        self._tasks = TaskSet(log, "pyjobq scheduler task failed")
        self._unsubscribe: list[Callable[[], None]] = []
        self._stopped = False
        #: True for the in-tab engine of volatile jobs: its updates say so, and types can be suspended.
        self.volatile = mode.volatile
        self._suspended: set[str] = set()
        self._last_created = 0.0
        if lease is None:
            from .lease import LockLease

            lease = LockLease(locks, lock_name)
        self._lease = lease
        self._revoked = False
        #: Types with a running record whose run lock another page holds: busy in the lanes.
        self._busy_elsewhere: set[str] = set()
        #: Abandoned runs whose page has not yet said they ended, by claim: their types stay busy
        #: and their run locks held (a deleted job's request may still be on the wire).
        self._ending: dict[str, _InFlight] = {}
        self._claims = itertools.count(1)
        self._pass_failures = 0
        self._verify_timer: Timer | None = None
        #: The pass's view of the queue (pyjobq/core/view.py); None outside a pass.
        self._view: QueueView | None = None
        #: Per type: (job id, the ask for its run lock) taken ahead of that job's claim.
        self._prefetched: dict[str, tuple[str, asyncio.Future[Callable[[], None] | None]]] = {}
        self._view_read_at = 0.0
        #: When the retry timer fires (set by the view's arming), to keep one that still fits.
        self._retry_at: float | None = None
        #: When the pass last took a look; a chain of settles keeps looking at least this often.
        self._looked_at = 0.0
        #: The lease holder's retention sweep (pyjobq/retention.py); inert unless mode.retention_ms.
        self._sweeper = Sweeper(mode.retention_ms, store=store, clock=clock, wake=self.wake,
                                publish=lambda records: self._publish_many(records, deleted=True))

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._unsubscribe = [
            self._link.subscribe(self._on_link),
            self._channel.subscribe(self._on_channel),
        ]
        self._link.send(make("ready", source=self.source))
        self.wake()

    def stop(self) -> None:
        """Stop processing: cancel timers and listeners. Records are left as they are.

        Runs in flight are abandoned (the page is told ``abandon_run``); under run locks each
        keeps its run lock until its page says the run ended (or :data:`ABANDON_GRACE_MS`), so
        a tab that takes over — one with newer code after a database upgrade — does not
        recover and re-run a job this page is still running.
        """
        self._stopped = True
        self._sweeper.stop()
        self._drop_prefetched()
        if self._retry_timer is not None:
            self._retry_timer.cancel()
        if self._verify_timer is not None:
            self._verify_timer.cancel()
            self._verify_timer = None
        for job_id in list(self._in_flight):
            if self.mode.run_locks:
                self._abandon(job_id)
            else:
                flight = self._in_flight[job_id]
                if flight.deadline is not None:
                    flight.deadline.cancel()
                _release_run_lock(flight)
        keep = self._unsubscribe[:1] if self._ending else []  # the link: the pages' last answers
        for unsubscribe in self._unsubscribe[len(keep):]:
            unsubscribe()
        self._unsubscribe = keep
        self._kick.set()

    def back_online(self) -> None:
        """The ``online`` event: jobs waiting out an offline failure are due now; process."""
        self._spawn(self._back_online())

    async def _back_online(self) -> None:
        now = self._clock.now()
        for record in await self.store.by_status(Status.PENDING):
            if record.code == policy.OFFLINE:
                self._publish(await self.store.update(record.id, lambda cur: policy.back_online(cur, now)))
        self.wake()

    def clear_retry_timer(self) -> None:
        """Drop the pending retry wake; the next enqueue or wake() arms it again."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None

    @property
    def in_flight(self) -> frozenset[str]:
        return frozenset(self._in_flight)

    def wake(self) -> None:
        """Process soon: an enqueue, the ``online`` event or the retry timer."""
        if self._stopped:
            return
        self._wanted = True
        self._kick.set()
        if self._pass_task is None or self._pass_task.done():
            self._pass_task = asyncio.ensure_future(self._pass())

    def _spawn(self, coro: Any) -> None:
        self._tasks.spawn(coro)

    # ------------------------------------------------------------ the pass

    async def _pass(self) -> None:
        try:
            while not self._stopped:
                if self._wanted:
                    self._wanted = False
                    self._revoked = False
                    if not await self._lease.hold(self._drain, self._on_revoked):
                        # Taken away mid-pass (the page froze): ask again; the page grants it on resume.
                        self._wanted = True
                    continue
                await self._arm_retry_timer()
                self._pass_failures = 0
                if not self._wanted:
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            # Re-arm the wake here, not from the store (it may be what failed): a job due in a
            # second must not wait for an unrelated wake.
            self._pass_failures += 1
            delay = min(PASS_RETRY_MS * 2 ** (self._pass_failures - 1), PASS_RETRY_CAP_MS)
            log.exception("pyjobq scheduler pass failed; it runs again in %g s", delay / 1000)
            if not self._stopped:
                if self._retry_timer is not None:
                    self._retry_timer.cancel()
                self._retry_timer, self._retry_at = self._clock.call_later(delay, self.wake), None

    def _on_revoked(self) -> None:
        self._revoked = True
        self._drop_prefetched()
        self._kick.set()

    async def _drain(self) -> None:
        # The view of the queue is this pass's: read whole on taking the lease, kept current by
        # our own writes and re-reads of what news names (pyjobq/core/view.py has why).
        await self._read_view()
        try:
            while not self._stopped and not self._revoked:
                self._kick.clear()
                self._wanted = False
                self._looked_at = self._clock.now()
                await self._catch_up()
                await self._sweeper.look()
                if self.mode.recovers:
                    # On leases nothing is orphaned by a lock: a lease that ran out is due instead.
                    await self._recover()
                await self._unpark_free()
                if self._revoked:
                    return
                progressed = await self._start_ready()
                # An abandoned run still ending holds its type here: the pass (and so the lease)
                # waits for it, or the next holder would start that type beside it.
                if not self._in_flight and not self._ending and not progressed:
                    # The view says nothing is left; the store has the last word before we let go.
                    if await self._read_view():
                        continue
                    return
                if not progressed and not self._revoked:
                    self._arm_retry_timer_from_view()
                    await self._kick.wait()
        finally:
            self._view = None
            self._drop_prefetched()

    async def _read_view(self) -> bool:
        """Read the view whole from the store; True when that changed what it held."""
        before = self._view.snapshot() if self._view is not None else None
        view = QueueView()
        view.replace(await self.store.entries())
        self._view, self._view_read_at = view, self._clock.now()
        return before is not None and before != view.snapshot()

    async def _catch_up(self) -> None:
        """Read again what news named since the last look, and everything once a recheck is due."""
        view = self._require_view()
        if self._clock.now() - self._view_read_at >= RECHECK_MS:
            await self._read_view()
            return
        ids = view.stale()
        if ids:
            found = {e.id: e for e in await self.store.entries(ids)}
            for job_id in ids:
                if job_id in found:
                    view.apply(found[job_id])
                else:
                    view.forget(job_id)

    def _require_view(self) -> QueueView:
        if self._view is None:
            raise RuntimeError("the queue view is read only inside a pass")
        return self._view

    def _ours(self) -> set[str]:
        """Ids of jobs this scheduler has a run of: in flight, or abandoned and still ending."""
        return set(self._in_flight) | {flight.job_id for flight in self._ending.values()}

    async def _recover(self) -> None:
        now = self._clock.now()
        ours = self._ours()
        running = lanes.orphans(self._require_view().with_status(Status.RUNNING), ours)
        elsewhere: set[str] = set()
        if running and self.mode.run_locks:
            held = await self._locks.held()
            # Runners take run locks exclusively; a shared holder is a watcher (ours, perhaps).
            elsewhere = {r.id for r in running if held.get(lanes.run_lock(self._lock_name, r.id)) == "exclusive"}
        self._busy_elsewhere = {r.type for r in running if r.id in elsewhere}
        for job_id in sorted(elsewhere):
            # Wake when its holder lets go: a closed tab releases its lease (pagehide) before its
            # worker dies with the run lock, and a frozen tab may be discarded later.
            self._watch(lanes.run_lock(self._lock_name, job_id))
        orphaned = lanes.orphans(running, ours, elsewhere)
        if not orphaned or self._revoked:
            return  # revoked: the page let the lease go (it froze); recovery is the next holder's

        def change(cur: JobRecord, *, seen: Entry) -> JobRecord | None:
            # Only the run we judged orphaned: a page frozen between that look and this write
            # must not recover the run another tab claimed meanwhile (it changed owner).
            if cur.id in self._ours() or self._revoked \
                    or (cur.owner, cur.updated_at, cur.attempts) != (seen.owner, seen.updated_at, seen.attempts):
                return None
            return policy.recover(cur, now)

        await self._write([Change(e.id, functools.partial(change, seen=e), _RUNNING) for e in orphaned])

    async def _unpark_free(self) -> None:
        paused = [e for e in self._require_view().with_status(Status.PAUSED) if e.yield_lock]
        if not paused:
            return
        held = await self._locks.held()
        now = self._clock.now()
        await self._write([Change(e.id, lambda cur: policy.unpark(cur, now), _PAUSED)
                           for e in lanes.unparkable(paused, held)])
        for entry in paused:
            if held.get(entry.yield_lock or "") == "exclusive":
                self._watch(entry.yield_lock or "")

    def _busy(self) -> set[str]:
        return {flight.type for flight in self._in_flight.values()} | self._busy_elsewhere \
            | {flight.type for flight in self._ending.values()}

    async def _start_ready(self) -> bool:
        """Start the oldest due job of every idle type: every park and claim in one transaction."""
        now = self._clock.now()
        picks = self._require_view().picks(now, self._busy(), self._ours(), leases=self.mode.leases,
                                           lanes=self.mode.lanes)
        if not picks:
            return False
        held = await self._locks.held() if self._yields else {}
        parks: list[Change] = []
        claims: list[Entry] = []
        for entry in picks:
            if entry.type in self._suspended:
                parks.append(Change(entry.id, lambda cur: policy.park(cur, now, None), _PENDING))
                continue
            yield_lock = self._yields.get(entry.type)
            if yield_lock and held.get(yield_lock) == "exclusive":
                parks.append(Change(entry.id, functools.partial(_park, now=now, lock=yield_lock), _PENDING))
                self._watch(yield_lock)
                continue
            claims.append(entry)
        releases = await self._take_run_locks(claims)
        claims = [e for e in claims if e.id in releases]
        if self._revoked:
            for release in releases.values():
                release()  # the page let the lease go while we asked: claim nothing
            return False
        return await self._claim_and_hand_off(parks, claims, releases, now)

    async def _take_run_locks(self, entries: list[Entry]) -> dict[str, Callable[[], None]]:
        """The run lock of each entry's job that is free (all asked at once, or taken ahead by
        :meth:`_prefetch`), by id; a held one is watched (another page still stores its run's
        outcome) and left out. Without run locks, a no-op release for each."""
        if not self.mode.run_locks:
            return {e.id: _no_release for e in entries}
        asks: list[Any] = []
        for entry in entries:
            ahead = self._prefetched.pop(entry.type, None)
            if ahead is not None and ahead[0] == entry.id:
                asks.append(ahead[1])
            else:
                if ahead is not None:
                    _let_go(ahead[1])
                asks.append(self._take_run_lock(entry.id))
        # Asks taken ahead are mostly answered already: read those without an event-loop step.
        got = [ask.result() if isinstance(ask, asyncio.Future) and ask.done() else await ask for ask in asks]
        releases: dict[str, Callable[[], None]] = {}
        for entry, release in zip(entries, got):
            if release is None:
                self._watch(lanes.run_lock(self._lock_name, entry.id))
            else:
                releases[entry.id] = release
        return releases

    def _prefetch(self, job_type: str) -> None:
        """Take the run lock of the lane's next job now, while this one runs: the settle's
        transaction then claims it with no wait for the lock manager."""
        if not self.mode.run_locks or self._view is None or self._stopped or self._revoked \
                or job_type in self._prefetched:
            return
        entry = self._view.oldest_due(job_type, self._clock.now(), self._ours(),
                                      leases=self.mode.leases)
        if entry is not None:
            self._prefetched[job_type] = (entry.id, asyncio.ensure_future(self._take_run_lock(entry.id)))

    def _drop_prefetched(self) -> None:
        """Let go of run locks taken ahead (the pass ends, the lease goes, we stop): the next
        holder must be able to claim those jobs."""
        prefetched, self._prefetched = self._prefetched, {}
        for _job_id, ask in prefetched.values():
            _let_go(ask)

    async def _claim_and_hand_off(self, changes: list[Change], claims: list[Entry],
                                  releases: dict[str, Callable[[], None]], now: float) -> bool:
        """Store ``changes`` and the claims of ``claims`` in one transaction, then hand off what
        was claimed (a claim is committed before its ``run`` is posted). True if anything applied."""
        done = await self._group_commit(changes, claims, releases, now)
        return any(updated.applied for updated in done)

    async def _group_commit(self, changes: list[Change], claims: list[Entry],
                            releases: dict[str, Callable[[], None]], now: float) -> list[Updated]:
        """``changes`` then the claims of ``claims``, one transaction; what was claimed is handed
        off once it committed. Returns what each change did, ``changes`` first, then the claims."""
        all_changes = changes + [Change(e.id, lambda cur: self._claim(cur, now), _CLAIMABLE) for e in claims]
        try:
            done = await self._write(all_changes)
        except BaseException:
            for release in releases.values():
                release()
            raise
        for change, updated in zip(all_changes[len(changes):], done[len(changes):]):
            release = releases.pop(change.job_id)
            if not updated.applied:
                release()  # deleted or changed by another tab meanwhile
                continue
            assert updated.record is not None
            if updated.record.status is Status.RUNNING:
                self._hand_off(updated.record, None if release is _no_release else release)
            else:
                release()  # failed at the ceiling rather than run
        return done

    async def _write(self, changes: list[Change]) -> list[Updated]:
        """One transaction of read-modify-writes; what applied is published (and so seen)."""
        if not changes:
            return []
        done = await self.store.update_many(changes)
        self._publish_many([u.record for u in done if u.applied and u.record is not None])
        for change, updated in zip(changes, done):
            if updated.applied:
                continue
            if updated.record is None and self._view is not None:
                self._view.forget(change.job_id)
            elif updated.record is not None and self._view is not None:
                self._view.apply(updated.record)  # what is stored, whatever the view believed
        return done

    async def _take_run_lock(self, job_id: str) -> Callable[[], None] | None:
        """Take the job's run lock if it is free; returns what releases it, or None if it is held."""
        loop = asyncio.get_event_loop()
        granted: asyncio.Future[bool] = loop.create_future()
        let_go: asyncio.Future[None] = loop.create_future()

        async def hold(lock: Any) -> None:
            if not lock:
                granted.set_result(False)
                return
            granted.set_result(True)
            await let_go

        def release() -> None:
            if not let_go.done():
                let_go.set_result(None)

        self._spawn(self._locks.request(lanes.run_lock(self._lock_name, job_id), hold, if_available=True))
        return release if await granted else None

    def _claim(self, cur: JobRecord, now: float) -> JobRecord | None:
        """The claim's one read-modify-write: a pending record, or (on leases) a lease that ran out."""
        if cur.id in self._ours():
            return None
        if cur.status is Status.PENDING:
            return policy.claim(cur, now, self.source, self.mode.lease_ms)
        lease_ms = self.mode.lease_ms
        if (lease_ms is not None and cur.status is Status.RUNNING
                and cur.next_retry_at is not None and cur.next_retry_at <= now):
            return policy.reclaim(cur, now, self.source, lease_ms)
        return None

    def _hand_off(self, record: JobRecord, release_run_lock: Callable[[], None] | None = None) -> None:
        flight = _InFlight(record.id, record.type, claim=f"{self.source}:{next(self._claims)}",
                           release_run_lock=release_run_lock)
        self._in_flight[record.id] = flight
        flight.deadline = self._clock.call_later(
            self._handshake_ms, lambda: self._spawn(self._handshake_expired(record.id))
        )
        self._link.send(make(
            "run",
            job_id=record.id,
            claim=flight.claim,
            reconstructor=record._reconstructor,
            params=record._params,
            job_type=record.type,
            attempt=record.attempts,
        ))
        self._arm_verify()
        self._prefetch(record.type)

    def _arm_verify(self) -> None:
        if self._verify_timer is None and self._in_flight and not self._stopped and self.mode.run_locks:
            self._verify_timer = self._clock.call_later(RECHECK_MS, self._verify_in_flight)

    def _verify_in_flight(self) -> None:
        """Read the records of the runs in flight: one deleted or cancelled by a tab that died (or
        froze) before broadcasting it is dropped here rather than run to its end."""
        self._verify_timer = None
        for job_id, flight in list(self._in_flight.items()):
            if flight.started:
                self._spawn(self._verify_gone(job_id, flight.claim))
        self._arm_verify()

    def _arm_retry_timer_from_view(self) -> None:
        """While lanes run: the next moment something *becomes* due, from the view (a timer
        already armed for that moment is kept: no new timer per look)."""
        if self._stopped or self._view is None:
            return
        now = self._clock.now()
        due_at = self._view.next_due_at(now if self._in_flight else None)
        if self._retry_timer is not None and due_at == self._retry_at:
            return
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        self._retry_at = due_at
        if due_at is not None:
            self._retry_timer = self._clock.call_later(max(0.0, due_at - now), self._retry_due)

    def _retry_due(self) -> None:
        self._retry_timer = self._retry_at = None
        self.wake()

    async def _arm_retry_timer(self) -> None:
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None
        if self._stopped:
            return
        # While runs are in flight, work already due is waiting for its lane and the
        # run's result wakes the loop; a timer for it would fire at once, again and again.
        after = self._clock.now() if self._in_flight else None
        due_at = await self.store.next_due_at(after)
        if due_at is not None and math.isfinite(due_at):
            self._retry_timer = self._clock.call_later(max(0.0, due_at - self._clock.now()), self.wake)
        self._retry_at = None  # armed from the store: the view's next arming makes its own

    def _watch(self, lock: str) -> None:
        """Keep one shared-mode request on a yield lock: granted the moment its holder lets go."""
        if lock in self._watching:
            return
        self._watching.add(lock)

        async def granted(_lock: Any) -> None:
            self._watching.discard(lock)
            self.wake()

        self._spawn(self._locks.request(lock, granted, mode="shared"))

    # ------------------------------------------------------------ the handshake

    def _flight_for(self, msg: dict[str, Any]) -> _InFlight | None:
        """The run a page's answer is about: its claim's, or (a page that echoes no claim, an
        older pyjobq) the job's current one. None for an answer to an earlier claim."""
        flight = self._in_flight.get(msg["job_id"])
        claim = msg.get("claim")
        if flight is None or (isinstance(claim, str) and claim != flight.claim):
            return None
        return flight

    def _run_started(self, msg: dict[str, Any]) -> None:
        flight = self._flight_for(msg)
        if flight is None:
            return
        flight.started = True
        if flight.deadline is not None:
            flight.deadline.cancel()
            flight.deadline = None

    async def _handshake_expired(self, job_id: str) -> None:
        flight = self._in_flight.get(job_id)
        if flight is None or flight.started:
            return
        del self._in_flight[job_id]
        self._link.send(make("abandon_run", job_id=job_id, claim=flight.claim))
        now = self._clock.now()
        ms = int(self._handshake_ms)

        def change(cur: JobRecord) -> JobRecord | None:
            if cur.status is not Status.RUNNING or cur.owner != self.source:
                return None
            return policy.fail(
                cur, now,
                f"run_started never came: the page did not answer 'run' within {ms} ms. Most "
                f"likely it has no reconstructor {cur._reconstructor!r} registered, or the "
                "module registering it never loaded.",
                code="handshake_timeout",
            )

        self._publish(await self.store.update(job_id, change))
        _release_run_lock(flight)
        self._kick.set()

    def _ended(self, msg: dict[str, Any]) -> bool:
        """A page's word that an abandoned run ended: free its type and its run lock."""
        claim = msg.get("claim")
        flight = self._ending.pop(claim, None) if isinstance(claim, str) else None
        if flight is None:
            return False
        if flight.deadline is not None:
            flight.deadline.cancel()
        _release_run_lock(flight)
        if flight.settled is not None and not flight.settled.done():
            flight.settled.set_result(None)  # a suspend_type waiting on it: its executor settled
        if self._stopped and not self._ending:
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            self._unsubscribe = []
        self._kick.set()
        return True

    async def _run_result(self, msg: dict[str, Any]) -> None:
        job_id = msg["job_id"]
        if self._ended(msg):
            return
        flight = self._flight_for(msg)
        if flight is None:
            log.debug("pyjobq: dropped run_result for %s (claim %s), not in flight here",
                      job_id, msg.get("claim"))
            return
        if flight.deadline is not None:
            flight.deadline.cancel()
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
                                    code="result_not_storable", terminal=True)
        if flight.settled is not None:  # suspend_type aborted this run
            outcome = policy.after_abort(outcome)
        held_lock = None
        yield_lock = self._yields.get(flight.type)
        if outcome.interrupted and yield_lock:
            if (await self._locks.held()).get(yield_lock) == "exclusive":
                held_lock = yield_lock
        now = self._clock.now()
        # The page's reading when the attempt failed; an older page sends none: ours, now.
        online = not outcome.offline if outcome.offline is not None else self._is_online()
        suspended = outcome.interrupted and flight.type in self._suspended

        def settle(cur: JobRecord) -> JobRecord | None:
            if cur.owner != self.source:
                return None
            return policy.settle(cur, outcome, now=now, online=online, backoff=self._backoff,
                                 held_yield_lock=held_lock, suspended=suspended,
                                 http_status_rules=self.mode.http_status_rules)

        change = Change(job_id, settle, _RUNNING)
        # Group commit: the settle and the claim of the lane's next job in one transaction.
        follow = await self._follow_on(flight, now)
        followed = False
        try:
            try:
                done = await self._group_commit([change], [follow[0]] if follow else [],
                                                dict([(follow[0].id, follow[1])]) if follow else {}, now)
                followed = follow is not None and follow[0].id in self._in_flight
            except Exception as exc:
                if not outcome.ok:
                    raise
                # A success whose result the store refused: fail it, clearly, rather than leave it
                # running for recovery to run again.
                log.error("pyjobq: storing the result of %s failed: %s", job_id, exc)
                outcome = RunResult(ok=False, error=f"the result could not be stored: {exc}",
                                    status=outcome.status, code="result_not_storable", terminal=True)
                done = await self._write([change])
            settled = done[0]
            if self.mode.on_success == "delete" and settled.applied and settled.record is not None \
                    and settled.record.status is Status.DONE:
                # Done was published first, so whoever waits on the job sees it succeed.
                await self.store.delete_many([job_id])
                self._publish(settled.record, deleted=True)
        finally:
            self._in_flight.pop(job_id, None)
            _release_run_lock(flight)
            if flight.settled is not None and not flight.settled.done():
                flight.settled.set_result(None)
            # The lane went on with its next job: the pass need not look again for this one,
            # unless it has not looked for LOOK_EVERY_MS (recovery and unparking keep going).
            if not followed or self._stopped or self._clock.now() - self._looked_at >= LOOK_EVERY_MS:
                self._kick.set()
        if held_lock:
            self._watch(held_lock)

    async def _follow_on(self, flight: _InFlight, now: float) -> tuple[Entry, Callable[[], None]] | None:
        """The next job of a settling run's lane, with its run lock, to claim in the settle's
        transaction; None when the lane has none ready, or its start needs the full look
        (a suspended type, a yield lock to check, the lease going)."""
        if self._stopped or self._revoked or self._view is None or flight.type in self._suspended \
                or flight.type in self._yields or flight.type in self._busy_elsewhere:
            return None
        entry = self._view.follow_on(flight.type, now, self._ours(), leases=self.mode.leases,
                                     lanes=self.mode.lanes)
        if entry is None or entry.type in self._suspended or entry.type in self._yields:
            return None
        releases = await self._take_run_locks([entry])
        release = releases.get(entry.id)
        if release is not None and (self._stopped or self._revoked):
            release()
            return None
        return None if release is None else (entry, release)

    # ------------------------------------------------------------ requests from the page

    def _on_link(self, data: Any) -> None:
        try:
            msg = messages.parse(data)
        except BadMessage as exc:
            log.warning("pyjobq scheduler ignored a message: %s", exc)
            return
        kind = msg["type"]
        if self._stopped:
            if kind == "run_result":
                self._ended(msg)  # an abandoned run's last word: its run lock goes
            return
        if kind == "run_started":
            self._run_started(msg)
        elif kind == "run_result":
            self._spawn(self._run_result(msg))
        elif kind == "wake":
            self.wake()
        elif kind == "online":
            self.back_online()
        elif kind == "progress":
            self._progress(msg)
        elif kind in _REQUESTS:
            self._spawn(self._answer(msg))
        elif kind in LEASE_MESSAGES:
            pass  # the LinkLease's (pyjobq/lease.py)
        elif kind == "debug_counts":
            pass  # answered by the worker's host (pyjobq/browser/worker_main.py)
        else:
            log.warning("pyjobq scheduler ignored a %r message from its page", kind)

    def _on_channel(self, data: Any) -> None:
        try:
            msg = messages.parse(data)
        except BadMessage as exc:
            log.warning("pyjobq scheduler ignored a channel message: %s", exc)
            return
        if msg["type"] != "job-update" or msg["source"] == self.source:
            return
        for job in messages.updated_jobs(msg):
            self._news(job)

    def _news(self, job: dict[str, Any]) -> None:
        """One record another tab (or any same-origin script) says it stored."""
        job_id = job.get("id")
        if self._view is not None and isinstance(job_id, str) and not job.get("progress_only") \
                and not job.get("volatile"):
            # News, not truth: the next look reads this record from the store.
            self._view.mark_stale(job_id)
            self._kick.set()
        # Another tab says it deleted or cancelled a job this page is running. The channel is
        # news (any same-origin script can post on it): drop the run only if the store agrees.
        if isinstance(job_id, str) and job_id in self._in_flight and (
            job.get("deleted") or job.get("status") == Status.CANCELLED.value
        ):
            self._spawn(self._verify_gone(job_id, self._in_flight[job_id].claim))
        # Another tab has persistent work under way: queue up on the lease, so that if that
        # tab goes away mid-run this one takes over (its pass recovers the running record)
        # with no enqueue, online event or retry timer of its own to prompt it. If the
        # other tab finishes normally, our pass finds nothing to do and ends.
        elif not self.volatile and not job.get("volatile") and not job.get("progress_only") \
                and job.get("status") in (Status.PENDING.value, Status.RUNNING.value):
            self.wake()

    def _progress(self, msg: dict[str, Any]) -> None:
        """Progress travels in a job-update and is not stored: it is only news."""
        if msg["job_id"] not in self._in_flight:
            return
        job = {"id": msg["job_id"], "status": Status.RUNNING.value, "progress": msg.get("progress"),
               "progress_note": msg.get("note"), "progress_only": True}
        if self.volatile:
            job["volatile"] = True
        self._post(make("job-update", source=self.source, job=job))

    async def _verify_gone(self, job_id: str, claim: str) -> None:
        record = await self.store.get(job_id)
        flight = self._in_flight.get(job_id)
        if flight is None or flight.claim != claim:
            return
        if record is None or record.status is not Status.RUNNING or record.owner != self.source:
            self._abandon(job_id)

    def _abandon(self, job_id: str) -> None:
        """Drop a run (deleted, cancelled, or this scheduler stopped): nothing of it will be stored.

        Its type and run lock stay busy until the page says the run ended — its request may
        still be on the wire — or for :data:`ABANDON_GRACE_MS` plus the handshake at most.
        """
        flight = self._in_flight.pop(job_id, None)
        if flight is None:
            return
        if flight.deadline is not None:
            flight.deadline.cancel()
        # A suspend_type waiting on this run resolves in _ended: when its executor has settled.
        self._ending[flight.claim] = flight
        claim = flight.claim
        flight.deadline = self._clock.call_later(
            ABANDON_GRACE_MS + self._handshake_ms,
            lambda: None if self._ended({"claim": claim}) else None,
        )
        self._link.send(make("abandon_run", job_id=job_id, claim=claim))
        self._kick.set()

    async def _answer(self, msg: dict[str, Any]) -> None:
        request_id = msg.get("request_id")
        try:
            value = await getattr(self, "_do_" + msg["type"])(msg)
        except Exception as exc:
            log.info("pyjobq: %s failed: %s", msg["type"], exc)
            if request_id is not None:
                self._link.send(make("reply", request_id=request_id, ok=False,
                                     error=str(exc), error_type=type(exc).__name__))
            return
        if request_id is not None:
            self._link.send(make("reply", request_id=request_id, ok=True, value=value))

    async def _do_enqueue(self, msg: dict[str, Any]) -> int:
        now = self._clock.now()
        jobs = [NewJob.from_message(job) for job in msg["jobs"]]
        # The stamp only orders the burst; a job is due at now + delay_ms, or one filed in
        # the same millisecond as another would wait for the clock to pass its stamp.
        records = [job.to_record(self._stamp()).evolve(next_retry_at=now + job.delay_ms) for job in jobs]
        await self.store.add(records)
        self._publish_many(records)
        self.wake()
        return len(records)

    def _stamp(self) -> float:
        """A created_at that strictly increases on this scheduler, so jobs filed in one
        millisecond still drain in filing order (lanes order by created_at, then id)."""
        self._last_created = max(self._clock.now(), self._last_created + 0.001)
        return self._last_created

    async def _do_query_all(self, _msg: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {**record.to_dict(), "volatile": True} if self.volatile else record.to_dict()
            for record in await self.store.all()
        ]

    async def _do_suspend_type(self, msg: dict[str, Any]) -> int:
        """Park pending jobs of the type (future ones too), abort its running one, and
        answer once that run has settled (spec: "Suspending volatile work")."""
        job_type = msg["job_type"]
        self._suspended.add(job_type)
        now = self._clock.now()
        parked = 0
        for record in await self.store.by_status(Status.PENDING):
            if record.type == job_type:
                updated = await self.store.update(
                    record.id,
                    lambda cur: policy.park(cur, now, None) if cur.status is Status.PENDING else None,
                )
                if updated is not None and updated.status is Status.PAUSED:
                    parked += 1
                    self._publish(updated)
        running = [f for f in self._in_flight.values() if f.type == job_type]
        for flight in running:
            if flight.settled is None:
                flight.settled = asyncio.get_event_loop().create_future()
            self._link.send(make("abort_run", job_id=flight.job_id, reason=f"type {job_type!r} suspended"))
        for flight in running:
            assert flight.settled is not None
            await flight.settled
        return parked

    async def _do_resume_type(self, msg: dict[str, Any]) -> int:
        job_type = msg["job_type"]
        self._suspended.discard(job_type)
        now = self._clock.now()
        count = 0
        for record in await self.store.by_status(Status.PAUSED):
            if record.type == job_type and record.yield_lock is None:
                updated = await self.store.update(
                    record.id,
                    lambda cur: policy.unpark(cur, now) if cur.status is Status.PAUSED else None,
                )
                if updated is not None and updated.status is Status.PENDING:
                    count += 1
                    self._publish(updated)
        self.wake()
        return count

    async def _do_get_job(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        record = await self.store.get(msg["job_id"])
        return None if record is None else record.to_dict()

    async def _do_delete_job(self, msg: dict[str, Any]) -> bool:
        return await self._delete([msg["job_id"]]) == 1

    async def _do_delete_group(self, msg: dict[str, Any]) -> int:
        return await self._delete([r.id for r in await self.store.by_group(msg["group"])])

    async def _delete(self, job_ids: list[str]) -> int:
        existing = [r for r in [await self.store.get(i) for i in job_ids] if r is not None]
        await self.store.delete_many([r.id for r in existing])
        for record in existing:
            self._abandon(record.id)
            self._publish(record, deleted=True, error="deleted", code="deleted")
        return len(existing)

    async def _do_cancel_job(self, msg: dict[str, Any]) -> bool:
        now = self._clock.now()
        record = await self.store.update(
            msg["job_id"], lambda cur: policy.cancel(cur, now) if cur.status not in TERMINAL else None
        )
        if record is None or record.status is not Status.CANCELLED:
            return False
        self._abandon(record.id)
        self._publish(record)
        return True

    async def _do_retry_job(self, msg: dict[str, Any]) -> bool:
        return await self._revive([msg["job_id"]]) == 1

    async def _do_retry_all(self, _msg: dict[str, Any]) -> int:
        ids = [r.id for r in await self.store.by_status(Status.FAILED)]
        ids += [r.id for r in await self.store.by_status(Status.CANCELLED)]
        return await self._revive(ids)

    async def _revive(self, job_ids: list[str]) -> int:
        now = self._clock.now()
        count = 0
        for job_id in job_ids:
            record = await self.store.update(
                job_id,
                lambda cur: policy.revive(cur, now) if cur.status in (Status.FAILED, Status.CANCELLED) else None,
            )
            if record is not None and record.status is Status.PENDING:
                count += 1
                self._publish(record)
        if count:
            self.wake()
        return count

    async def _do_cleanup_old(self, msg: dict[str, Any]) -> int:
        """Delete ``done`` records older than 7 days — and only those (spec: "Startup and cleanup")."""
        return await sweep(self.store, self._clock.now(), RETENTION_MS,
                           lambda records: self._publish_many(records, deleted=True))

    # ------------------------------------------------------------ updates

    def _publish(self, record: JobRecord | None, **extra: Any) -> None:
        """Tell every page of a record just stored (or, ``deleted=True``, deleted)."""
        if record is not None:
            self._publish_many([record], **extra)

    def _publish_many(self, records: Sequence[JobRecord], **extra: Any) -> None:
        """Tell every page of records one transaction stored: one ``job-update`` per batch
        (``jobs``, its first also as ``job``). The pass's view takes them too: every write of
        ours passes here."""
        if self._view is not None:
            for record in records:
                if extra.get("deleted"):
                    self._view.forget(record.id)
                else:
                    self._view.apply(record)
        for start in range(0, len(records), NEWS_BATCH):
            jobs = [self._summary(r, **extra) for r in records[start:start + NEWS_BATCH]]
            batch = {"jobs": jobs} if len(jobs) > 1 else {}
            self._post(make("job-update", source=self.source, job=jobs[0], **batch))

    def _summary(self, record: JobRecord, **extra: Any) -> dict[str, Any]:
        summary = record.summary()
        if self.volatile:
            summary["volatile"] = True
        summary.update(extra)
        return summary

    def _post(self, update: dict[str, Any]) -> None:
        # To this page directly (it still hears us after it closed its channel),
        # and to every other tab through the channel.
        self._link.send(update)
        try:
            self._channel.post(update)
        except Exception as exc:  # a closed channel: other tabs just miss this update
            log.debug("pyjobq: job-update not broadcast: %s", exc)


_REQUESTS = frozenset({
    "enqueue", "query_all", "get_job", "delete_job", "delete_group",
    "cancel_job", "retry_job", "retry_all", "cleanup_old", "suspend_type", "resume_type",
})


_PENDING = frozenset({Status.PENDING})
_RUNNING = frozenset({Status.RUNNING})
_PAUSED = frozenset({Status.PAUSED})
#: What a claim may read: pending, or (on leases) a running record whose lease ran out.
_CLAIMABLE = frozenset({Status.PENDING, Status.RUNNING})


def _park(cur: JobRecord, *, now: float, lock: str | None) -> JobRecord:
    return policy.park(cur, now, lock)


def _let_go(ask: "asyncio.Future[Callable[[], None] | None]") -> None:
    """Release a run lock asked for ahead, once the ask is answered."""
    def answered(done: "asyncio.Future[Callable[[], None] | None]") -> None:
        if not done.cancelled() and done.exception() is None:
            release = done.result()
            if release is not None:
                release()

    ask.add_done_callback(answered)


def _no_release() -> None:
    """The release of a run lock never taken (no run locks in this mode)."""


def _release_run_lock(flight: _InFlight) -> None:
    release, flight.release_run_lock = flight.release_run_lock, None
    if release is not None:
        release()


def _opt(value: Any, kind: type) -> Any:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None
