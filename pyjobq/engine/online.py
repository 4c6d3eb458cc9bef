"""The network coming back: jobs waiting out a failure they had with no network are due now.

Runs wherever an engine runs (the scheduler worker, the page's engines, the Service Worker).

Theory of operation
-------------------
A failure with no network costs no attempt and climbs a ladder capped near 30 s, so an offline
job re-checks by itself, "and sooner when" the network is back (spec). Sooner is the
``online`` event: one transaction makes every job waiting out an offline failure due, and each
run in flight then is marked (:attr:`~pyjobq.engine.inflight.Flight.online_again`), since its
failure, read offline by the page a moment before, may be stored after the sweep.

An engine does not always hear the event. A frozen tab and its worker miss it (and Chromium does
not always fire it inside a dedicated worker); a worker still booting, or a tab opened once the
network was back, was not there. So an engine also finds out for itself:

* while a job may wait out an offline failure (this engine stored one since its last sweep, or
  has not swept since it began) and the network reads down here, it reads ``navigator.onLine``
  again every :data:`WATCH_MS` (one property, no store operation) and acts as the event does
  when it reads up: armed when a settle stores such a failure, or a pass begins, with the
  network down; a frozen context's watch fires as it thaws; a stopped engine reads nothing;
* its first pass under the lease, and the first after the lease was taken away, acts as the
  event does when the network is up then (:meth:`BackOnline.begin_pass`);
* another tab's news of a failure stored with no network, heard with the network down here,
  makes this engine's next pass watch (begun with it down) or sweep (begun with it up:
  :meth:`BackOnline.heard_of`; that tab may close at once, and this engine's last sweep did
  not see the job). A tab frozen through the event, which hears that news only as it thaws
  with the network up, leaves the job to its ladder (at most its 30 s cap);
* a run handed off while the network was down counts as one it came back during
  (:meth:`~pyjobq.engine.inflight.FlightTable.add`): its offline failure, stored once the network
  is up, is due at once.

None can spin. Each needs this engine's own reading to go from down to up: a page and a worker
that disagree for good about the network (the page reading it down) get the ladder, and the
watch is never armed while the engine reads it up. A pass begins after a gap at most once per
grant. The bound this gives: a job waiting out an offline failure is due within
:data:`WATCH_MS` of the network being back here, event or no event, but for the frozen tab
above.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Coroutine, Sequence

from ..core import policy
from ..core.errors import DatabaseUpgradedError
from ..core.policy import OFFLINE
from ..core.ports import Clock, Store, Timer, Updated
from ..core.records import JobRecord
from ..core.status import ONLY_PENDING, Status
from ..loop import again_doubling
from .inflight import FlightTable

log = logging.getLogger("pyjobq")

#: How often an engine reads the network while a job may wait out an offline failure and the
#: network reads down here (see the module docstring).
WATCH_MS = 1_000.0

#: The sweep of the network's return, refused by the store, is tried again after this wait,
#: doubling up to :data:`SWEEP_AGAIN_MAX_MS`, while the engine runs.
SWEEP_AGAIN_MS = 1_000.0
SWEEP_AGAIN_MAX_MS = 30_000.0


class BackOnline:
    """The ``online`` event's work, and when an engine does it unasked."""

    def __init__(self, *, store: Store, clock: Clock, flights: FlightTable,
                 is_online: Callable[[], bool],
                 publish: Callable[[Sequence[JobRecord]], None], wake: Callable[[], None],
                 spawn: Callable[[Coroutine[Any, Any, Any]], None]) -> None:
        self._store = store
        self._clock = clock
        self._flights = flights
        self._is_online = is_online
        self._publish = publish
        self._wake = wake
        self._spawn = spawn
        #: No pass has begun here since this engine began or the lease was taken away: an
        #: ``online`` event may have come meanwhile, unheard.
        self._unheard = True
        #: A job may wait out an offline failure: this engine stored one since its last sweep,
        #: or has not swept since it began (what is stored from before is not known here).
        self._may_wait = True
        #: The next reading of the network while it reads down here; None when not watching.
        self._watch: Timer | None = None
        #: The engine stopped: nothing more is read, swept or woken.
        self._closed = False

    def heard(self) -> None:
        """The ``online`` event: each run in flight is marked, the waiting jobs made due, and
        the engine processes."""
        self._cancel_watch()
        self._back(wake=True)

    def stored_offline(self) -> None:
        """A settle stored a failure with no network: while the network reads down here too,
        watch for it to come back."""
        self._may_wait = True
        if not self._is_online():
            self._watch_again()

    def heard_of(self, status: object, code: object) -> None:
        """Another tab's news of a record it stored. A failure with no network (pending, code
        offline; that tab may close at once) is one this engine's last sweep did not see: its
        next pass begun with the network down here watches for it; and, when the network reads
        down here now, its next pass begun with it up sweeps, as the event would have (the
        event may come before that pass, unheard). Reading it up now, nothing more: news is
        any same-origin script's word, and two tabs whose workers read the network up while
        their pages read it down would otherwise make each other's failures due, round and
        round."""
        if status == Status.PENDING.value and code == OFFLINE:
            self._may_wait = True
            if not self._is_online():
                self._unheard = True

    def begin_pass(self) -> None:
        """A pass begins under the lease: after a gap, with the network up, as the event does
        (waking the engine again only when a job was made due: the pass is under way); with
        the network down, watch for it while a job may wait out an offline failure."""
        if not self._is_online():
            self._watch_again()
        elif self._unheard:
            self._back(wake=False)
        self._unheard = False

    def lease_lost(self) -> None:
        """The lease was taken away (the page froze): what comes until the next pass is unheard."""
        self._unheard = True

    def close(self) -> None:
        """The engine stopped: read the network no more, and sweep nothing (a settle under way
        as it stopped may still store an offline failure)."""
        self._closed = True
        self._cancel_watch()

    def _back(self, *, wake: bool) -> None:
        """The network is back: mark each run in flight, and make the waiting jobs due."""
        self._flights.back_online()
        self._spawn(self._sweep(wake=wake))

    def _cancel_watch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _watch_again(self) -> None:
        if self._watch is None and self._may_wait and not self._closed:
            self._watch = self._clock.call_later(WATCH_MS, self._read)

    def _read(self) -> None:
        self._watch = None
        if self._closed:
            return
        if self._is_online():
            self.heard()  # the network is back by this engine's own reading: as the event does
        else:
            self._watch_again()

    async def _sweep(self, *, wake: bool) -> None:
        if self._closed:
            return
        # What waits from now on is what a settle stores after this read (stored_offline).
        self._may_wait = False

        async def make_due() -> list[Updated] | None:
            if self._closed:
                return None
            now = self._clock.now()
            # One transaction reads and changes them: a delete or cancel between a read and a
            # write is never undone. Only what is due later is read: a backlog already due is
            # not the sweep's (a worker taking the lease with 10,000 due jobs would read them
            # all before its first claim).
            return await self._store.update_by_status(
                ONLY_PENDING, lambda cur: policy.back_online(cur, now), due_after=now)

        # The store's trouble may pass: the network's return is not to be lost for it (what
        # waits would wait out its ladder).
        done = await again_doubling(
            self._clock, make_due, first_ms=SWEEP_AGAIN_MS, max_ms=SWEEP_AGAIN_MAX_MS,
            passes=lambda exc: not self._closed and not isinstance(exc, DatabaseUpgradedError),
            said=lambda exc, wait: log.warning(
                "pyjobq: making the jobs that waited offline due failed (%s): again in %g s",
                exc, wait / 1000))
        if done is None:
            return
        due = [u.record for u in done if u.applied and u.record is not None]
        self._publish(due)
        if wake or due:
            self._wake()
