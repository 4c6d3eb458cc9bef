"""The pass: what the lease holder looks at, and the claims and parks it makes.

Runs wherever an engine holds a lease: in the scheduler worker, and in the page — the
volatile engine and the outbox make passes too. The waiting tab's request scheduler never
holds its lease (``NeverLease``), so it makes none.

Theory of operation
-------------------
A pass runs inside the processor lease (pyjobq/engine/scheduler.py holds it). It decides
from a *view* of the queue (:class:`~pyjobq.core.view.QueueView`): read whole from the
store when the pass takes the lease, kept current by the engine's own writes, and —
for what other tabs' news names — read again from the store, never taken from the
news. Each time round its loop it

1. reads again what news named, and the whole view once a recheck is due;
2. sweeps old ``done`` records when a sweep is due (pyjobq/engine/sweeper.py), and enqueues
   the due slots of the stored schedules (pyjobq/engine/periodic.py);
3. recovers running records no page of ours has in flight (not on leases);
4. returns paused jobs whose yield lock nobody holds exclusively;
5. starts the oldest due job of every idle lane (:func:`pyjobq.core.lanes.plan_starts`
   decides park or claim), every park and claim in one transaction.

It ends once nothing is in flight or ending and nothing is due — and the store, read
whole one last time, agrees. A settle chains its lane's next claim into its own
transaction (:meth:`Pass.follow_on`, :meth:`Pass.group_commit`), so a lane that has
work goes on without a look; the pass still looks at least every ``LOOK_EVERY_MS``.

Every claim is a read-modify-write with its status precondition inside the
transaction (:func:`pyjobq.core.policy.claim_due`): a stale view can never claim a
record that changed or went.

A pass is given only what it uses of its engine (:class:`PassEngine`). The engine's state
it reads — flights, run locks, the suspended types, the loop's control (pyjobq/engine/control.py)
— is the engine's parts'; the pass owns the view and what it learnt on its last look. The
engine tells it what it stored (:meth:`Pass.saw`, :meth:`Pass.forget`) and what news named
(:meth:`Pass.heard`), and nothing else changes the view.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

from ..core import keys, lanes, policy
from ..core.codes import REPLACED_ERROR, Code
from ..core.messages import RECHECK_MS
from ..core.mode import Mode
from ..core.ports import REPLACE, Change, KeyChange, Release, Replace, Updated
from ..core.records import JobRecord
from ..core.status import (
    CLAIMABLE,
    ONLY_PAUSED,
    ONLY_PENDING,
    ONLY_RUNNING,
    REPLACEABLE,
    Status,
)
from ..core.view import Entry, QueueView
from .control import PassControl
from .inflight import Flight, FlightTable
from .parts import EngineBasics, Publish, Write
from .periodic import Periodic
from .runlocks import RunLocks, WakeTimer, no_release
from .sweeper import Sweeper


@dataclass(frozen=True)
class PassEngine(EngineBasics):
    """What a pass uses of its engine (pyjobq/engine/scheduler.py makes it)."""

    flights: FlightTable
    run_locks: RunLocks
    #: The engine's one retry timer: armed while lanes run (:meth:`Pass.wake_after` says when).
    retry_timer: WakeTimer
    sweeper: Sweeper
    #: The stored schedules: each look enqueues their due slots (lease holder only).
    periodic: Periodic
    control: PassControl
    write: Write
    #: Posts ``run`` for a claim that committed (pyjobq/engine/handoff.py).
    hand_off: Callable[[JobRecord, Release | None], None]
    #: Publishes records the pass stored outside :attr:`write` (the view takes them too).
    publish: Publish
    #: The types whose jobs this context cannot run: their lanes are busy here for good.
    left_for_pages: "LeftForPages"

    def replaced(self, records: Sequence[JobRecord]) -> None:
        """Tell every page of records deleted because a newer job of their key replaced them:
        each handle's ``done`` resolves cancelled with the code ``replaced``."""
        if records:
            self.publish(records, deleted=True, error=REPLACED_ERROR, code=Code.REPLACED)


class LeftForPages:
    """The types whose jobs this context cannot run (the Service Worker meeting a kind only
    pages have, pyjobq/service_worker/drain.py): their lanes are busy here for good — never picked
    nor chained, so each keeps its order (its next job waits behind it) for a page — while the
    other lanes go on. Only where each type is a lane."""

    def __init__(self, mode: Mode) -> None:
        self._mode = mode
        #: The types left, read by the pass at each look and each chain.
        self.types: set[str] = set()

    def add(self, job_type: str) -> None:
        """Claim no job of ``job_type`` from now on: its lane waits for a page.

        Raises:
            ValueError: the mode runs one lane for every type (the outbox's ``fifo``), where
                leaving one type would stop them all.
        """
        if self._mode.lanes != "type":
            raise ValueError(f"leave {job_type!r} to the pages: the {self._mode.name} mode runs "
                             "one lane for every type, so no type can be left to the pages alone")
        self.types.add(job_type)


class Pass:
    """The lease holder's looks, claims and parks, over the view of the queue."""

    def __init__(self, engine: PassEngine) -> None:
        self._engine = engine
        #: The view of the queue (pyjobq/core/view.py); None outside a pass.
        self._view: QueueView | None = None
        self._read_at = 0.0
        #: When the pass last took a look; a chain of settles keeps looking at least this often.
        self._looked_at = 0.0
        #: Types with a running record whose run lock another page holds: busy in the lanes.
        self._busy_elsewhere: set[str] = set()
        #: Passes run, and looks taken (times round a pass's loop): what a "no spin" check counts.
        self.runs = 0
        self.looks = 0
        #: The moment the last look chose what to start; None before this pass's first look.
        #: The wake is armed only for what becomes due after it (:meth:`wake_after` says why).
        self._picked_at: float | None = None

    @property
    def looked_at(self) -> float:
        """When the pass last took a look (a chain of settles keeps looking at least this often)."""
        return self._looked_at

    # ------------------------------------------------------------ what the engine stored and heard

    def saw(self, record: JobRecord) -> None:
        """The engine stored ``record`` (or found it so): the view takes it, during a pass."""
        if self._view is not None:
            self._view.apply(record)

    def forget(self, job_id: str) -> None:
        """The engine deleted ``job_id`` (or found it gone): it leaves the view."""
        if self._view is not None:
            self._view.forget(job_id)

    def heard(self, job_id: str) -> None:
        """Another tab says it stored ``job_id``: news, not truth — the next look, which this
        kicks, reads the record from the store."""
        if self._view is not None:
            self._view.mark_stale(job_id)
            self._engine.control.kick()

    # ------------------------------------------------------------ the pass

    async def run(self) -> None:
        # The view of the queue is this pass's: read whole on taking the lease, kept current by
        # our own writes and re-reads of what news names (pyjobq/core/view.py has why).
        control = self._engine.control
        self.runs += 1
        self._picked_at = None
        await self._read_view()
        try:
            while not control.stopped and not control.revoked:
                self.looks += 1
                control.begin_look()
                self._looked_at = self._engine.clock.now()
                await self._catch_up()
                await self._engine.sweeper.look()
                await self._engine.periodic.look()
                if self._engine.mode.recovers:
                    # On leases nothing is orphaned by a lock: a lease that ran out is due instead.
                    await self._recover()
                await self._unpark_free()
                await self._replace_superseded()
                if control.revoked:
                    return
                progressed = await self._start_ready()
                # An abandoned run still ending holds its type here: the pass (and so the lease)
                # waits for it, or the next holder would start that type beside it.
                if not self._engine.flights and not self._engine.flights.ending and not progressed:
                    # The view says nothing is left; the store has the last word before we let go.
                    if await self._read_view():
                        continue
                    return
                if not progressed and not control.revoked:
                    self._arm_retry_timer()
                    await control.wait()
        finally:
            self._view = None
            self._engine.periodic.forget()
            self._engine.run_locks.drop_prefetched()

    async def _read_view(self) -> bool:
        """Read the view whole from the store; True when that changed what it held."""
        before = self._view.snapshot() if self._view is not None else None
        view = QueueView()
        view.replace(await self._engine.store.entries())
        self._view, self._read_at = view, self._engine.clock.now()
        return before is not None and before != view.snapshot()

    async def _catch_up(self) -> None:
        """Read again what news named since the last look, and everything once a recheck is due."""
        view = self._require_view()
        if self._engine.clock.now() - self._read_at >= RECHECK_MS:
            await self._read_view()
            return
        ids = view.stale()
        if ids:
            found = {e.id: e for e in await self._engine.store.entries(ids)}
            for job_id in ids:
                if job_id in found:
                    view.apply(found[job_id])
                else:
                    view.forget(job_id)

    def _require_view(self) -> QueueView:
        if self._view is None:
            raise RuntimeError("the queue view is read only inside a pass")
        return self._view

    async def _recover(self) -> None:
        now = self._engine.clock.now()
        ours = self._engine.flights.ours()
        running = lanes.orphans(self._require_view().with_status(Status.RUNNING), ours)
        elsewhere: set[str] = set()
        watched: dict[str, str] = {}  # job id -> the name of its run lock another page holds
        lanes_held: dict[str, str] = {}
        name = self._engine.run_locks.name
        if self._engine.mode.run_locks:
            held = await self._engine.locks.held()
            # Runners take run locks exclusively; a shared holder is a watcher (ours, perhaps).
            watched = {r.id: name(r) for r in running if held.get(name(r)) == "exclusive"}
            elsewhere = set(watched)
            # Another page's run lock keeps an idle lane waiting (lanes.types_held).
            lanes_held = lanes.types_held(
                held, self._engine.run_locks.lock_name,
                ours | self._engine.run_locks.prefetched_ids(),
                skip=self._engine.flights.busy_types())
        self._busy_elsewhere = {r.type for r in running if r.id in elsewhere} | set(lanes_held)
        # Wake when each holder lets go: a closed tab releases its lease (pagehide) before its
        # worker dies with the run lock, and a frozen tab may be discarded later.
        for job_id in sorted(watched):
            self._engine.run_locks.watch(watched[job_id])
        for lock in sorted(lanes_held.values()):
            self._engine.run_locks.watch(lock)
        orphaned = lanes.orphans(running, ours, elsewhere)
        if not orphaned or self._engine.control.revoked:
            return  # revoked: the page let the lease go (it froze); recovery is the next holder's

        def change(cur: JobRecord, *, seen: Entry) -> JobRecord | None:
            # Only the run we judged orphaned: a page frozen between that look and this write
            # must not recover the run another tab claimed meanwhile (it changed owner).
            if cur.id in self._engine.flights.ours() or self._engine.control.revoked \
                    or (cur.owner, cur.updated_at, cur.attempts) \
                    != (seen.owner, seen.updated_at, seen.attempts):
                return None
            return policy.recover(cur, now)

        await self._engine.write([Change(e.id, functools.partial(change, seen=e), ONLY_RUNNING)
                             for e in orphaned])

    async def _unpark_free(self) -> None:
        await unpark_free(self._engine, self._require_view())

    async def _replace_superseded(self) -> None:
        await replace_superseded(self._engine, self._require_view())

    def _busy(self) -> set[str]:
        return (self._engine.flights.busy_types() | self._busy_elsewhere
                | self._engine.left_for_pages.types)

    async def _start_ready(self) -> bool:
        """Start the oldest due job of every idle type: every park and claim in one transaction."""
        now = self._picked_at = self._engine.clock.now()
        mode = self._engine.mode
        picks = self._require_view().picks(now, self._busy(), self._engine.flights.ours(),
                                           leases=mode.leases, lanes=mode.lanes)
        if not picks:
            return False
        held = await self._engine.locks.held() if self._engine.yields else {}
        starts = lanes.plan_starts(picks, suspended=self._engine.suspended,
                                   yields=self._engine.yields, held=held)
        for lock in starts.watch:
            self._engine.run_locks.watch(lock)
        parks = [Change(e.id, functools.partial(_park, now=now, lock=lock), ONLY_PENDING)
                 for e, lock in starts.parks]
        claims = list(starts.claims)
        releases = await self._engine.run_locks.take(claims)
        claims = [e for e in claims if e.id in releases]
        if claims and self._engine.mode.run_locks:
            claims = await self._claims_alone(claims, releases)
        if self._engine.control.revoked:
            for release in releases.values():
                release()  # the page let the lease go while we asked: claim nothing
            return False
        done = await self.group_commit(parks, claims, releases, now)
        return any(updated.applied for updated in done)

    async def _claims_alone(self, claims: list[Entry],
                            releases: dict[str, Release]) -> list[Entry]:
        """The claims whose type no other page holds a run lock of, looked at *after* ours were
        taken (:func:`pyjobq.core.lanes.types_held` says why); the others' locks are let go and
        the holders' watched. A settle's follow-on needs no such look: its lane's run lock was
        held all along, from the run that settles to the next."""
        held = await self._engine.locks.held()
        mine = self._engine.flights.ours() | set(releases) | self._engine.run_locks.prefetched_ids()
        busy = lanes.types_held(held, self._engine.run_locks.lock_name, mine)
        kept = []
        view = self._require_view()
        for entry in claims:
            if entry.type in busy:
                releases.pop(entry.id)()
                self._engine.run_locks.watch(busy[entry.type])
                # Our view and the other page's disagree on the lane's next job (each took the
                # one it believed oldest): both records are read again before the next look picks,
                # or two pages with stale views give way to each other for ever.
                view.mark_stale(entry.id)
                other = lanes.run_lock_job(self._engine.run_locks.lock_name, busy[entry.type])
                if other is not None:
                    view.mark_stale(other[1])
            else:
                kept.append(entry)
        return kept

    def _prefetch(self, job_type: str) -> None:
        """Take the run locks of the lane's next jobs now, while this one runs: the settle's
        transaction then claims the next with no wait for the lock manager."""
        run_locks = self._engine.run_locks
        if not self._engine.mode.run_locks or self._view is None or not self._going():
            return
        now, ours = self._engine.clock.now(), self._engine.flights.ours()
        while run_locks.wants_prefetch(job_type):
            entry = self._view.oldest_due(job_type, now, ours | run_locks.prefetched(job_type),
                                          leases=self._engine.mode.leases)
            if entry is None:
                return
            run_locks.prefetch(entry)

    def _going(self) -> bool:
        return not self._engine.control.stopped and not self._engine.control.revoked

    async def group_commit(self, changes: list[Change], claims: list[Entry],
                           releases: dict[str, Release], now: float) -> list[Updated]:
        """``changes`` then the claims of ``claims``, one transaction; what was claimed is handed
        off once it committed. Returns what each change did, ``changes`` first, then the claims."""
        all_changes = changes + [Change(e.id, lambda cur: self._claim(cur, now), CLAIMABLE)
                                 for e in claims]
        try:
            done = await self._engine.write(all_changes)
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
            if updated.record.status is Status.RUNNING and not self._engine.control.stopped:
                self._engine.hand_off(updated.record, None if release is no_release else release)
                self._prefetch(updated.record.type)
            else:  # failed at the ceiling rather than run, or stopped while it committed: an
                release()  # orphan, never sent, that the next holder recovers (its lock let go)
        return done

    def _claim(self, cur: JobRecord, now: float) -> JobRecord | None:
        """The claim's one read-modify-write (never a job of ours, nor once the lease went or the
        scheduler stopped: either may land between the pass's decision and its transaction, and
        a page in line, or the Service Worker's next holder, claims from that moment)."""
        if cur.id in self._engine.flights.ours() or not self._going():
            return None
        return policy.claim_due(cur, now, self._engine.source, self._engine.mode.lease_ms)

    async def follow_on(self, flight: Flight, now: float) -> tuple[Entry, Release] | None:
        """The next job of a settling run's lane, with its run lock, to claim in the settle's
        transaction; None when the lane has none ready, or its start needs the full look
        (a suspended type, a yield lock to check, the lease going)."""
        if not self._going() or self._view is None or not self._chains(flight.type):
            return None
        entry = self._view.follow_on(flight.type, now, self._engine.flights.ours(),
                                     leases=self._engine.mode.leases, lanes=self._engine.mode.lanes)
        if entry is None or not self._chains(entry.type):
            return None
        releases = await self._engine.run_locks.take([entry])
        release = releases.get(entry.id)
        if release is not None and not self._going():
            release()
            return None
        return None if release is None else (entry, release)

    def _chains(self, job_type: str) -> bool:
        return lanes.chains(job_type, suspended=self._engine.suspended, yields=self._engine.yields,
                            busy_elsewhere=self._busy_elsewhere | self._engine.left_for_pages.types)

    def wake_after(self) -> float | None:
        """The moment the wake is armed after: the last look's (None before this pass's first
        look: the soonest of all).

        Every record due by then was seen by that look, and one it did not start waits on
        something that announces itself, so a timer for it would fire at once, again and again,
        while nothing changed (no spin):

        - a run of ours in its lane, or the outbox's one run at a time: its settle kicks;
        - an abandoned run of its type still ending: the page's last word kicks (the page bounds
          it by ``ABANDON_GRACE_MS``, and the word always comes: pyjobq/core/messages.py);
        - a run lock another page holds exclusively — its lane's predecessor's, perhaps in a
          frozen tab, or its own, taken ahead: it is watched, and the lock manager grants the
          watch the moment the holder lets go, a discarded page included (the spec's reason a
          yield lock needs no timer: "resumption needs no timer");
        - a yield lock or a suspended type: it was parked, which is progress, not a wait.

        Two waits may never announce themselves: a run lock held only in shared mode, by a watch
        granted just as its page froze (:meth:`pyjobq.engine.runlocks.RunLocks.take`), and news that
        never came (a tab that crashed before broadcasting). For those the engine looks again
        within ``Mode.recheck_ms`` (30 s), idle or while lanes run: a bounded re-look, not a poll.

        A record that became due after the look (time moves while a pass runs; a tab frozen
        mid-pass resumes later) is looked at again at once, never by a timer armed in the past;
        the next look's moment is later, so that cannot repeat.
        """
        return self._picked_at

    def _arm_retry_timer(self) -> None:
        """While lanes run: the next moment something *becomes* due, from the view; a look at
        once, with no timer, when that moment passed since the last look; and a look within
        ``Mode.recheck_ms`` whatever happens."""
        if self._engine.control.stopped or self._view is None:
            return
        now = self._engine.clock.now()
        due_at = self._view.next_due_at(self.wake_after())
        if due_at is not None and due_at <= now:
            self._engine.retry_timer.clear()
            self._engine.control.kick()
            return
        if self._engine.mode.recheck_ms is not None:
            # The bounded re-look, for the waits nothing announces (a run lock held shared by a
            # frozen page's watch: RunLocks.take) and news that never came. The spec's reason:
            # "Every look is taken again while the lanes run. A lane that runs for an hour would
            # otherwise hold all of that up for the hour." Never sooner: it is not a poll.
            due_at = min(due_at if due_at is not None else now + self._engine.mode.recheck_ms,
                         now + self._engine.mode.recheck_ms)
        self._engine.retry_timer.arm_at(due_at)


async def unpark_free(e: PassEngine, view: QueueView) -> None:
    """Return to the queue the paused jobs nothing holds any more (:func:`lanes.unparkable`), and
    watch the yield locks that still hold theirs."""
    paused = view.with_status(Status.PAUSED)
    if not paused:
        return
    held = await e.locks.held() if any(entry.yield_lock for entry in paused) else {}
    now = e.clock.now()
    free = lanes.unparkable(paused, held, e.suspended)
    plain = [entry for entry in free if entry.key is None]
    if plain:
        await e.write([Change(entry.id, lambda cur: policy.unpark(cur, now), ONLY_PAUSED)
                       for entry in plain])
    keyed = [entry for entry in free if entry.key is not None]
    if keyed:
        # Returning a keyed job to the queue revives it, as retry_job does: not over a newer job
        # of its key stored since (the newest lands last), decided on the key's records as stored.
        def unpark(cur: JobRecord, others: Sequence[JobRecord]) -> JobRecord | Replace:
            return REPLACE if keys.landed_over(cur, others) else policy.unpark(cur, now)

        done = await e.store.update_keyed([KeyChange(entry.id, unpark, ONLY_PAUSED)
                                           for entry in keyed])
        e.publish([u.record for u in done.updated if u.applied and u.record is not None])
        e.replaced(done.replaced)
    for entry in paused:
        if held.get(entry.yield_lock or "") == "exclusive":
            e.run_locks.watch(entry.yield_lock or "")


async def replace_superseded(e: PassEngine, view: QueueView) -> None:
    """Keys that replace: delete the waiting records a newer job of their key outdated
    (:meth:`pyjobq.core.view.QueueView.superseded`), and publish them deleted with the code
    ``replaced`` — before the look starts anything, so an outdated job is never sent after the
    newer one is stored. The view only proposes: each is decided in the transaction that deletes
    it, on its key's records as stored (:func:`pyjobq.core.keys.outdated`), since a newer job
    another tab cancelled or deleted, its news lost, replaces nothing. Where the store disagreed,
    the key's records are read again before the next look decides."""
    outdated = view.superseded()
    if not outdated or e.control.revoked:
        return
    done = await e.store.update_keyed(
        [KeyChange(entry.id, _replace_outdated, REPLACEABLE) for entry in outdated])
    for entry, updated in zip(outdated, done.updated):
        if not updated.applied and entry.key is not None:
            view.mark_key_stale(entry.key)
    e.replaced(done.replaced)


def _replace_outdated(cur: JobRecord, others: Sequence[JobRecord]) -> JobRecord | Replace | None:
    return REPLACE if keys.outdated(cur, others) else None


def _park(cur: JobRecord, *, now: float, lock: str | None) -> JobRecord:
    return policy.park(cur, now, lock)
