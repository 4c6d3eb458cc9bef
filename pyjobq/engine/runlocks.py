"""Run locks and lock watches: the scheduler's requests to the Web Locks manager.

Runs wherever an engine runs. Run locks are taken only in the job queue's mode, by the
holder of the lease: in the scheduler worker, whose run locks live on the worker (why:
:mod:`pyjobq.engine.lease`). In the page the volatile engine and the outbox take none, and
the waiting tab's request scheduler holds no lease; the one retry timer (:class:`WakeTimer`)
is every engine's, the page's included.

Theory of operation
-------------------
Under the job queue's mode each run holds ``<lock>:run:["<type>","<job id>"]`` from before its claim
until its outcome is stored (why: :mod:`pyjobq.engine.lease`, on frozen tabs). :class:`RunLocks`
asks for them ``ifAvailable``: a free one is taken and its release returned; a held one means
another page still stores that run's outcome, so the job is left out and its lock *watched*.

A lane's next run locks are asked for while its predecessor runs
(:meth:`RunLocks.prefetch`), so the settle's transaction can claim the next job
with no wait for the lock manager. Two are asked ahead (:data:`PREFETCH_DEPTH`): the
lock manager answers in about as long as a whole job's round takes (``bench.mjs --trace``
measured 2.3 ms against a 4 ms round on a loaded machine), so a lock asked for only at the
previous job's hand-off was still unanswered at its settle four times in five. Whatever
was taken ahead is let go when the pass ends, the lease goes or the scheduler stops
(:meth:`RunLocks.drop_prefetched`), so the next holder can claim those jobs.

A *watch* is one shared-mode request on a lock someone holds exclusively (a yield
lock, another page's run lock): it is granted the moment its holder lets go, and
then wakes the scheduler. One watch per lock, however often it is asked for. A run
lock held only in shared mode is not watched (:meth:`RunLocks.take` says why).

In modes without run locks (volatile jobs, the outbox's leases) :meth:`RunLocks.take`
returns a no-op release for each job and nothing is asked of the lock manager.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Callable, Sequence

from ..core import lanes
from ..core.ports import Clock, LockManager, Release, TakesIfAvailable, Timer
from ..core.records import JobRecord
from ..core.view import Entry
from ..loop import take_by_request
from .parts import Spawn

log = logging.getLogger("pyjobq")

#: How many of a lane's next run locks are asked for ahead of their claims.
PREFETCH_DEPTH = 2


def no_release() -> None:
    """The release of a run lock never taken (no run locks in this mode)."""


class RunLocks:
    def __init__(self, locks: LockManager, lock_name: str, *, enabled: bool,
                 spawn: Spawn,
                 wake: Callable[[], None]) -> None:
        self._locks = locks
        self._lock_name = lock_name
        self._enabled = enabled
        self._spawn = spawn
        self._wake = wake
        # A LockManager of the application's own from before take_if_available (docs/api.md,
        # "Ports"): its run locks are asked through ``request``, as they were.
        self._take: Callable[[str], asyncio.Future[Release | None]] = (
            locks.take_if_available if isinstance(locks, TakesIfAvailable)
            else functools.partial(take_by_request, locks, spawn=spawn))
        #: Per type, in the order asked: each job id and the ask for its run lock, taken ahead
        #: of that job's claim.
        self._prefetched: dict[str, dict[str, asyncio.Future[Release | None]]] = {}
        self._watching: set[str] = set()

    @property
    def lock_name(self) -> str:
        """The processor lease's name, which every run lock's begins with."""
        return self._lock_name

    def name(self, entry: Entry | JobRecord) -> str:
        """The run lock of ``entry``'s job (:func:`pyjobq.core.lanes.run_lock`)."""
        return lanes.run_lock(self._lock_name, entry.type, entry.id)

    async def take(self, entries: Sequence[Entry]) -> dict[str, Release]:
        """The run lock of each entry's job that is free (all asked at once, or taken ahead),
        by id; a held one is watched and left out. Without run locks, a no-op release each."""
        if not self._enabled:
            return {e.id: no_release for e in entries}
        asks: list[asyncio.Future[Release | None]] = []
        for entry in entries:
            ask = self._take_prefetched(entry)
            asks.append(ask if ask is not None else self._ask(entry))
        # Asks taken ahead are mostly answered already: read those without an event-loop step.
        got: list[Release | None] = []
        refused: set[str] = set()
        try:
            for entry, ask in zip(entries, asks):
                try:
                    got.append(ask.result() if ask.done() else await ask)
                except Exception as exc:
                    # The lock manager refused the request: nothing is held, and the job is left
                    # out like a held one, for the pass's bounded re-look (no wake: a refusal
                    # that lasts would spin).
                    log.error("pyjobq: the run lock of %s could not be asked for: %s",
                              entry.id, exc)
                    got.append(None)
                    refused.add(entry.id)
        except BaseException:
            # Cut short (the pass cancelled): what was taken goes, and so does what is granted
            # later (the ask being awaited was cancelled with the pass: its grant lets go at once).
            for release in got:
                if release is not None:
                    release()
            for ask in asks[len(got):]:
                _let_go(ask)
            raise
        releases = {entry.id: release for entry, release in zip(entries, got)
                    if release is not None}
        if len(releases) < len(entries):
            held = await self._locks.held()
            for entry in entries:
                if entry.id in releases or entry.id in refused:
                    continue
                mode = held.get(self.name(entry))
                if mode == "exclusive":
                    self.watch(self.name(entry))  # its runner (or taker) lets go: a wake then
                elif mode is None:
                    self._wake()  # let go since it was asked for: look again
                # Held only shared, by watches: one granted just as its page froze holds it for
                # the whole freeze, and nothing says when that ends. A shared watch beside it
                # would be granted at once and wake a pass that still cannot take the lock, round
                # and round. The pass's bounded re-look (Mode.recheck_ms) comes back.
        return releases

    def _take_prefetched(self, entry: Entry) -> asyncio.Future[Release | None] | None:
        """The ask taken ahead for ``entry``'s job, if any. Those of its type asked before it
        were passed over (deleted, or an older job came due): they are let go. Asked for none
        of its type, the view has moved on: all of that type are let go."""
        asked = self._prefetched.get(entry.type)
        if not asked:
            return None
        if entry.id not in asked:
            del self._prefetched[entry.type]
            for ask in asked.values():
                _let_go(ask)
            return None
        for job_id in list(asked):
            ask = asked.pop(job_id)
            if job_id == entry.id:
                break
            _let_go(ask)
        if not asked:
            del self._prefetched[entry.type]
        return ask

    def prefetch(self, entry: Entry) -> None:
        """Ask now for the run lock of ``entry``, one of its lane's next jobs
        (at most :data:`PREFETCH_DEPTH` per type)."""
        if not self._enabled:
            return
        asked = self._prefetched.setdefault(entry.type, {})
        if entry.id not in asked and len(asked) < PREFETCH_DEPTH:
            asked[entry.id] = self._ask(entry)

    def prefetched_ids(self) -> set[str]:
        """The jobs whose run locks were asked for ahead of their claims, less those found held
        elsewhere: an ask still unanswered may already hold its lock (the lock manager granted
        it, the answer is on its way), and counting that lock as another page's would keep its
        lane waiting for our own prefetch until the next re-look."""
        return {job_id for asked in self._prefetched.values() for job_id, ask in asked.items()
                if not ask.done() or (not ask.cancelled() and ask.exception() is None
                                      and ask.result() is not None)}

    def prefetched(self, job_type: str) -> set[str]:
        """The jobs of ``job_type`` whose run locks were asked for ahead."""
        return set(self._prefetched.get(job_type, ()))

    def wants_prefetch(self, job_type: str) -> bool:
        """Whether ``job_type`` has fewer than :data:`PREFETCH_DEPTH` run locks asked ahead."""
        return self._enabled and len(self._prefetched.get(job_type, ())) < PREFETCH_DEPTH

    def drop_prefetched(self) -> None:
        """Let go of run locks taken ahead: the next holder must be able to claim those jobs."""
        prefetched, self._prefetched = self._prefetched, {}
        for asked in prefetched.values():
            for ask in asked.values():
                _let_go(ask)

    def watch(self, lock: str) -> None:
        """Keep one shared-mode request on ``lock``: granted, and a wake,
        the moment its holder lets go."""
        if lock in self._watching:
            return
        self._watching.add(lock)

        async def granted(_lock: Any) -> None:
            pass

        async def watch() -> None:
            # Wake once the request has *ended* — the watch's own shared hold let go — not from
            # inside its callback: a pass woken there asks for the run lock (ifAvailable) while
            # this watch still holds it shared, finds it held, watches again, and the engine
            # spins with no time moving.
            try:
                await self._locks.request(lock, granted, mode="shared")
            finally:
                self._watching.discard(lock)
            self._wake()

        self._spawn(watch())

    def _ask(self, entry: Entry) -> asyncio.Future[Release | None]:
        """Ask for the job's run lock if it is free: the answer is what releases it, or None if
        it is held. An ask cancelled before its grant (the pass was cut short) lets go of the
        lock the moment it is granted
        (:meth:`~pyjobq.core.ports.TakesIfAvailable.take_if_available`)."""
        return self._take(self.name(entry))


def _let_go(ask: "asyncio.Future[Release | None]") -> None:
    """Release a run lock asked for ahead, once the ask is answered."""
    def answered(done: "asyncio.Future[Release | None]") -> None:
        if not done.cancelled() and done.exception() is None:
            release = done.result()
            if release is not None:
                release()

    ask.add_done_callback(answered)


class WakeTimer:
    """The scheduler's one retry timer: it wakes the scheduler at the soonest ``next_retry_at``.

    Armed for a moment, it is kept while that moment stays the soonest (no new timer per
    look); armed again for another moment, the old one is cancelled. One timer, whatever
    the backlog.
    """

    def __init__(self, clock: Clock, wake: Callable[[], None]) -> None:
        self._clock = clock
        self._wake = wake
        self._timer: Timer | None = None
        #: The moment it fires, when armed by :meth:`arm_at` (kept if asked for again).
        self._at: float | None = None

    def arm_at(self, due_at: float | None) -> None:
        """Fire at ``due_at`` (None: not at all); a timer already armed for that moment is kept."""
        if self._timer is not None and due_at == self._at:
            return
        self.clear()
        self._at = due_at
        if due_at is not None:
            self._timer = self._clock.call_later(max(0.0, due_at - self._clock.now()), self._fire)

    def arm_in(self, delay_ms: float) -> None:
        """Fire after ``delay_ms`` (a pass that failed runs again then)."""
        self.clear()
        self._timer = self._clock.call_later(max(0.0, delay_ms), self._fire)

    def clear(self) -> None:
        timer, self._timer, self._at = self._timer, None, None
        if timer is not None:
            timer.cancel()

    def _fire(self) -> None:
        self._timer = self._at = None
        self._wake()
