"""Periodic work: the lease holder enqueues each due slot of the stored schedules, once.

Where it runs: the looks (:meth:`Periodic.look`) only in the job queue's mode, on the lease
holder — the scheduler worker that processes; the requests (``schedule``, ``unschedule``,
``schedules``) on whichever engine answers a page's requests (the worker, or the waiting tab's
request scheduler in the page). Inert where the engine was given no
:class:`~pyjobq.core.ports.ScheduleStore` (volatile jobs, the outbox).

Theory of operation
-------------------
The schedules are stored (pyjobq/core/periodic.py has the record and its rules). A page that
defines one sends ``schedule``; whichever engine answers stores it (one read-modify-write: a new
schedule starts at the next slot, a changed one keeps what was accounted for) and says so on the
channel (``schedule-update``), so the lease holder — in any tab — reads the schedules again and
wakes for the new one's first slot.

The pass calls :meth:`Periodic.look` each time round its loop, as it calls the sweeper. A look
reads the schedules (once a pass, and again after news of a change or an advance that found the
store moved on), and for each one with a slot due takes it in one transaction with the
schedule's advance (``ScheduleStore.advance_schedule``): the decision
(:func:`~pyjobq.core.periodic.occurrence`) is made there on what that transaction read, so a
slot is enqueued once per origin however many tabs decide on it — a tab that took the lease
from a frozen holder, and the frozen holder when it thaws, both decide and one of them finds
the slot accounted for. The occurrence's job is published like any enqueue (the table and
``job-update`` show it) and the same look's claims start it.

Then one timer is armed for the earliest next slot, which wakes the engine: the holder makes
a pass at that moment, with no polling. Liveness: an awake holder enqueues a slot at its
moment (its timer, then one look); a tab that takes the lease looks at once (its first pass
reads the schedules), so a slot due during a takeover is enqueued when the lease moves — at
most the lease watch's bound (about a minute) for a frozen worker host, at once for a page,
which lets go when frozen. With no tab of the origin open nothing runs; the next one to open
enqueues the latest missed slot once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..core.errors import DatabaseUpgradedError, PyjobqError, StorageError
from ..core.periodic import (
    Occurrence,
    Schedule,
    ScheduleDefinition,
    define,
    due_slot,
    earliest_wake,
    occurrence,
    synced,
)
from ..core.ports import Clock, ScheduleStore, Timer
from ..core.records import JobRecord
from ..loop import again_doubling
from .parts import Publish

log = logging.getLogger("pyjobq")

Handler = Callable[[dict[str, Any]], Awaitable[Any]]

#: A schedule whose advance raised is left out of the looks, and of the wake, this long, doubling
#: to :data:`TROUBLE_MAX_MS` while it keeps raising: the store's trouble may pass in a moment, and
#: a stored row's is retried without a spin.
TROUBLE_MS = 1_000.0
TROUBLE_MAX_MS = 30_000.0


@dataclass(frozen=True)
class PeriodicEngine:
    """What the periodic part uses of its engine (pyjobq/engine/scheduler.py makes it)."""

    #: Where the schedules are stored; None: this engine keeps none (volatile jobs, the outbox).
    schedules: ScheduleStore | None
    clock: Clock
    #: Publishes the jobs it enqueued (a ``job-update``, and the pass's view sees them).
    publish: Publish
    #: Says on the channel that schedule ``name`` changed (``schedule-update``).
    announce: Callable[[str], None]
    #: Process soon: a schedule changed, or a slot came due.
    wake: Callable[[], None]


class Periodic:
    """The stored schedules' looks, timer and requests, for one engine."""

    def __init__(self, engine: PeriodicEngine) -> None:
        self._engine = engine
        #: The schedules as last read, by name; None: read them at the next look.
        self._known: dict[str, Schedule] | None = None
        self._timer: Timer | None = None
        self._stopped = False
        #: Schedules whose advance raised, with when they are tried again.
        self._troubled: dict[str, float] = {}
        #: ... and how long the last such wait was.
        self._trouble_ms: dict[str, float] = {}
        #: Occurrences this engine enqueued and slots it skipped (coalesced): for tests and logs.
        self.enqueued = 0
        self.skipped = 0
        self.handlers: dict[str, Handler] = {
            "schedule": self.schedule,
            "unschedule": self.unschedule,
            "schedules": self.list_schedules,
        }

    # ------------------------------------------------------------ what the engine tells it

    def heard(self) -> None:
        """A schedule changed (news, or a request here): read them again at the next look."""
        self._known = None

    def forget(self) -> None:
        """The pass ended: the next pass reads the schedules again (the lease may have moved,
        and another holder advanced them meanwhile)."""
        self._known = None

    def stop(self) -> None:
        self._stopped = True
        self._clear_timer()

    # ------------------------------------------------------------ the look (lease holder only)

    async def look(self) -> None:
        """From inside a pass: enqueue every due slot (each in its own transaction with its
        schedule's advance), then arm the wake for the earliest next slot.

        A schedule's trouble is its own: an advance that raises is logged, and that schedule is
        left out of the looks for :data:`TROUBLE_MS`, doubling while it keeps raising (its wake
        too), while the pass goes on."""
        store = self._engine.schedules
        if store is None or self._stopped:
            return
        if self._known is None:
            self._known = {s.name: s for s in await store.schedules()}
        now = self._engine.clock.now()
        moved = False
        for name, schedule in sorted(self._known.items()):
            if due_slot(schedule, now) is None or self._troubled.get(name, now) > now:
                continue
            try:
                advanced = await self._advance(store, schedule, now)
            except Exception as exc:  # a stored row, or the store, the pass must not die of
                wait = min(self._trouble_ms.get(name, TROUBLE_MS / 2) * 2, TROUBLE_MAX_MS)
                self._troubled[name], self._trouble_ms[name] = now + wait, wait
                log.warning("pyjobq: periodic %r could not advance (%s): the other jobs go on, "
                            "and it is tried again in %g s", name, exc, wait / 1000)
                continue
            self._troubled.pop(name, None)
            self._trouble_ms.pop(name, None)
            if advanced is None:
                moved = True  # another tab took the slot, or the schedule went: read again
                continue
            self._known[name] = advanced.schedule
            if advanced.job is not None:
                self.enqueued += 1
                log.info("pyjobq: periodic %r enqueued its occurrence at slot %d as %s", name,
                         advanced.slot, advanced.job.id)
                self._published(advanced.job)
            else:
                self.skipped += 1
                log.info("pyjobq: periodic %r accounted for slot %d without a new job: its "
                         "occurrence %s is unfinished, or already stored", name,
                         advanced.slot, advanced.schedule.last_job_id)
        if moved:
            self._known = {s.name: s for s in await store.schedules()}
        self._arm(now)

    async def _advance(self, store: ScheduleStore, schedule: Schedule,
                       now: float) -> Occurrence | None:
        """The schedule's due slot taken with its advance; when that slot's occurrence is
        already stored (a schedule restored from an older copy, written by other code, or
        defined again after the clock went back, while the occurrence is still kept), the
        schedule is synced to it instead: the slot is accounted for, by the job stored."""
        try:
            return await store.advance_schedule(
                schedule.name, lambda current, previous: occurrence(current, previous, now))
        except KeyError:
            slot = due_slot(schedule, now)
            log.warning("pyjobq: periodic %r: the occurrence of slot %s is already stored; the "
                        "schedule is synced to it", schedule.name, slot)
            return await store.advance_schedule(
                schedule.name, lambda current, _previous: synced(current, slot, now))

    def _published(self, job: JobRecord) -> None:
        self._engine.publish([job])

    def _arm(self, now: float) -> None:
        self._clear_timer()
        if self._stopped or not self._known:
            return
        wake_at = earliest_wake(self._known, self._troubled)
        if wake_at is not None:
            # A slot the stored schedule still shows due (read again just now) fires at once
            # only once: the next look advances it or reads it as moved on.
            self._timer = self._engine.clock.call_later(max(0.0, wake_at - now), self._due)

    def _due(self) -> None:
        self._timer = None
        self._engine.wake()

    def _clear_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ------------------------------------------------------------ requests (any engine)

    def _store(self, what: str) -> ScheduleStore:
        if self._engine.schedules is None:
            raise PyjobqError(f"{what}: this queue keeps no schedules (periodic work is the "
                              "persistent job queue's, not volatile jobs' or the outbox's)")
        return self._engine.schedules

    async def schedule(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        """Store a schedule's definition (``msg["schedule"]``); returns it as stored."""
        store = self._store("schedule")
        definition = ScheduleDefinition.from_message(msg["schedule"])
        now = self._engine.clock.now()
        changed: list[Schedule] = []

        def apply(current: Schedule | None) -> Schedule | None:
            new = define(current, definition, now)
            if new is not None:
                changed.append(new)
            return new

        stored = await self._put(store, definition.name, apply)
        if stored is None:
            raise PyjobqError(f"schedule {definition.name!r} is stored by a newer pyjobq (or is "
                              "not a schedule): left as it is; unschedule it to replace it")
        if changed:
            self._changed(definition.name)
        return stored.to_dict()

    async def _put(self, store: ScheduleStore, name: str,
                   apply: Callable[[Schedule | None], Schedule | None]) -> Schedule | None:
        """``store.put_schedule``, tried again while the store fails (backing off as a troubled
        schedule's look does, for as long as the engine runs): a page's definition, sent once as
        it loads, is not lost to a store's bad moment."""
        return await again_doubling(
            self._engine.clock, lambda: store.put_schedule(name, apply),
            first_ms=TROUBLE_MS, max_ms=TROUBLE_MAX_MS,
            passes=lambda exc: (isinstance(exc, StorageError) and not self._stopped
                                and not isinstance(exc, DatabaseUpgradedError)),
            said=lambda exc, wait: log.warning(
                "pyjobq: storing periodic %r failed (%s): again in %g s", name, exc, wait / 1000))

    async def unschedule(self, msg: dict[str, Any]) -> bool:
        """Delete schedule ``msg["name"]``; returns whether there was one. Its jobs stay."""
        deleted = await self._store("unschedule").delete_schedule(msg["name"])
        if deleted is not None:
            self._changed(msg["name"])
        return deleted is not None

    async def list_schedules(self, _msg: dict[str, Any]) -> list[dict[str, Any]]:
        return [s.to_dict() for s in await self._store("schedules").schedules()]

    def _changed(self, name: str) -> None:
        self.heard()
        self._engine.announce(name)
        self._engine.wake()
