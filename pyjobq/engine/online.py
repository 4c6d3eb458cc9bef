"""The network coming back: jobs waiting out a failure they had with no network are due now.

Runs wherever an engine runs (the scheduler worker, the page's engines, the Service Worker).

Theory of operation
-------------------
A failure with no network costs no attempt and climbs a ladder capped near 30 s, so an offline
job re-checks by itself, "and sooner when" the network is back (spec). Sooner is the
``online`` event: one transaction makes every job waiting out an offline failure due, and each
run in flight then is marked (:attr:`~pyjobq.engine.inflight.Flight.online_again`), since its
failure, read offline by the page a moment before, may be stored after the sweep.

An engine does not always hear the event. A frozen tab and its worker miss it; a worker still
booting, or a tab opened once the network was back, was not there. So an engine also acts as
the event does wherever it cannot know what it missed: at its first pass under the lease and
the first after the lease was taken away (:meth:`BackOnline.begin_pass`), when the network is
up then; and a run handed off while the network was down counts as one the network came back
during (:meth:`~pyjobq.engine.inflight.FlightTable.add`). Neither can spin: a pass begins after
a gap at most once per grant, and a run handed off offline gets at most one early retry — the
engine's own reading must have changed between its hand-off and its settle.
"""

from __future__ import annotations

from typing import Any, Callable, Coroutine, Sequence

from ..core import policy
from ..core.ports import Clock, Store
from ..core.records import JobRecord
from ..core.status import ONLY_PENDING
from .inflight import FlightTable


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

    def heard(self) -> None:
        """The ``online`` event: each run in flight is marked, the waiting jobs made due, and
        the engine processes."""
        self._flights.back_online()
        self._spawn(self._sweep(wake=True))

    def begin_pass(self) -> None:
        """A pass begins under the lease: after a gap, with the network up, as the event does
        (waking the engine again only when a job was made due: the pass is under way)."""
        if self._unheard and self._is_online():
            self._flights.back_online()
            self._spawn(self._sweep(wake=False))
        self._unheard = False

    def lease_lost(self) -> None:
        """The lease was taken away (the page froze): what comes until the next pass is unheard."""
        self._unheard = True

    async def _sweep(self, *, wake: bool) -> None:
        now = self._clock.now()
        # One transaction reads and changes them: a delete or cancel between a read and a write
        # is never undone (issue 22, finding 10).
        done = await self._store.update_by_status(ONLY_PENDING,
                                                  lambda cur: policy.back_online(cur, now))
        due = [u.record for u in done if u.applied and u.record is not None]
        self._publish(due)
        if wake or due:
            self._wake()
