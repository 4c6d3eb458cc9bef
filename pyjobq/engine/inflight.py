"""The in-flight table: the runs a scheduler handed off, from ``run`` until the page's last word.

Runs wherever an engine hands runs off: in the scheduler worker, and in the page — the
volatile engine and the outbox. The waiting tab's request scheduler has one too, always
empty (it holds no lease, so it claims nothing).

Theory of operation
-------------------
A claim that committed becomes a :class:`Flight` when its ``run`` is posted. A flight
is *running* until its outcome is stored (:meth:`FlightTable.finish`), or until the
scheduler drops it (:meth:`FlightTable.abandon`: the job was deleted or cancelled, or
the scheduler stopped). An abandoned flight is *ending*: its request may still be on
the wire, so its type stays busy in the lanes and its run lock stays held until the
page says the run ended (:meth:`FlightTable.ended`). No clock of the scheduler's bounds
that: the page ends an abandoned run within its grace *from handling* ``abandon_run``
(:data:`~pyjobq.core.messages.ABANDON_GRACE_MS`), so one grace is measured from one event,
whatever the page's load — a clock here, started when ``abandon_run`` was sent, ran out
early on a busy page and put the type's next job on the wire beside the old one.

Each flight has at most one deadline: the handshake's, until ``run_started`` arrives (on
which the scheduler asks the page, ``run_check``). The table keeps one timer for them all,
armed for the earliest (a timer per run cost a JavaScript callback and a ``setTimeout`` a
job, for a deadline that is almost never reached); it is let go when the table empties.
Every way out of the table ends the flight's deadline, lets go of the run lock and settles
the flight's ``settled`` future (what ``suspend_type`` waits on) in one place, so no path can
leave a deadline standing, a lock held or a waiter hanging. An abandoned run settles its
waiters when it has *ended* (the page's last word, or the grace period), not when it is
dropped: ``suspend_type`` "resolves when that executor settles", and a deleted job's
executor may still be saving its checkpoint.

Answers are matched by *claim*: ``run`` carries the claim's identifier and the page
echoes it, so an answer for an earlier claim of the same job is never taken for
this one's (:meth:`FlightTable.for_answer`).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from ..core.ports import Clock, Timer
from ..loop import new_future


@dataclass(eq=False)
class Flight:
    """One run handed off to the page."""

    job_id: str
    type: str
    #: This claim's identifier: ``run`` carries it and the page echoes it.
    claim: str
    started: bool = False
    #: The handshake deadline (the clock's ms) while not started; None once it no longer applies.
    deadline: float | None = None
    #: Called when the deadline passes (:class:`FlightTable` keeps the one timer).
    on_deadline: Callable[["Flight"], None] | None = None
    #: Set when the run leaves the table; created by whoever waits (``suspend_type``).
    settled: asyncio.Future[None] | None = None
    #: Lets go of ``<lock>:run:["<type>","<job id>"]``; None without run locks, or once let go.
    release_run_lock: Callable[[], None] | None = None
    #: The network was down when it was handed off, or came back while it ran (the ``online``
    #: event's sweep could not make it due): a failure the page read offline, stored while the
    #: network is up, is due at once, not after the offline ladder's wait.
    online_again: bool = False

    def wait_settled(self) -> asyncio.Future[None]:
        """A future set once this run leaves the table (its outcome stored, or dropped)."""
        if self.settled is None:
            self.settled = new_future()
        return self.settled

    def _stop_timer(self) -> None:
        self.deadline = None

    def _let_go(self) -> None:
        release, self.release_run_lock = self.release_run_lock, None
        if release is not None:
            release()

    def _settle(self) -> None:
        if self.settled is not None and not self.settled.done():
            self.settled.set_result(None)


class FlightTable:
    """The scheduler's runs in flight (by job id) and abandoned runs still ending (by claim)."""

    def __init__(self, clock: Clock, source: str, *,
                 on_ended: Callable[[], None] = lambda: None,
                 is_online: Callable[[], bool] = lambda: True) -> None:
        """``on_ended`` is called each time an abandoned run's ending is over (its type is free);
        ``is_online`` reads the network here as each run is handed off."""
        self._clock = clock
        self._source = source
        self._on_ended = on_ended
        self._is_online = is_online
        self._running: dict[str, Flight] = {}
        self._ending: dict[str, Flight] = {}
        self._claims = itertools.count(1)
        #: The one timer for the runs' handshake deadlines, and the moment it is armed for.
        self._timer: Timer | None = None
        self._timer_at = 0.0

    # ------------------------------------------------------------ reading

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._running

    def __len__(self) -> int:
        return len(self._running)

    def __iter__(self) -> Iterator[Flight]:
        return iter(list(self._running.values()))

    def get(self, job_id: str) -> Flight | None:
        """The running flight of ``job_id``, if any."""
        return self._running.get(job_id)

    @property
    def ids(self) -> frozenset[str]:
        """Ids of the runs in flight (not those ending)."""
        return frozenset(self._running)

    @property
    def ending(self) -> bool:
        """True while an abandoned run has not yet said it ended."""
        return bool(self._ending)

    def ours(self) -> set[str]:
        """Ids of jobs this scheduler has a run of: in flight, or abandoned and still ending."""
        return set(self._running) | {flight.job_id for flight in self._ending.values()}

    def busy_types(self) -> set[str]:
        """Types with a run of ours, in flight or ending: their lanes are busy."""
        return {f.type for f in self._running.values()} | {f.type for f in self._ending.values()}

    def back_online(self) -> None:
        """The ``online`` event: each run in flight now fails offline, if it does, due at once."""
        for flight in self._running.values():
            flight.online_again = True

    def of_type(self, job_type: str) -> list[Flight]:
        return [f for f in self._running.values() if f.type == job_type]

    def for_answer(self, msg: Mapping[str, Any]) -> Flight | None:
        """The run a page's answer is about: its claim's. None for an answer to an earlier
        claim."""
        flight = self._running.get(msg["job_id"])
        if flight is None or msg["claim"] != flight.claim:
            return None
        return flight

    # ------------------------------------------------------------ moving

    def add(self, job_id: str, job_type: str, *, release_run_lock: Callable[[], None] | None,
            deadline_ms: float, on_deadline: Callable[[Flight], None]) -> Flight:
        """A run handed off now: in flight, with its handshake deadline armed."""
        # Handed off with the network down: if it is up when the run's offline failure is
        # stored, an online event came and went unheard here (a frozen tab's, a booting
        # worker's), or came while the run was on the wire — either way, the job is due.
        flight = Flight(job_id, job_type, claim=f"{self._source}:{next(self._claims)}",
                        release_run_lock=release_run_lock, online_again=not self._is_online())
        self._running[job_id] = flight
        flight.deadline, flight.on_deadline = self._clock.now() + deadline_ms, on_deadline
        if self._timer is None or self._timer_at > flight.deadline:
            self._arm()
        return flight

    def _arm(self) -> None:
        """(Re)arm the one timer for the earliest deadline of the runs in flight, or none."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadlines = [f.deadline for f in self._running.values() if f.deadline is not None]
        if deadlines:
            self._timer_at = min(deadlines)
            self._timer = self._clock.call_later(
                max(0.0, self._timer_at - self._clock.now()), self._deadlines_passed)

    def _deadlines_passed(self) -> None:
        self._timer = None
        now = self._clock.now()
        for flight in list(self._running.values()):
            if flight.deadline is not None and flight.deadline <= now \
                    and self._running.get(flight.job_id) is flight:
                on_deadline, flight.deadline = flight.on_deadline, None
                if on_deadline is not None:
                    on_deadline(flight)
        if self._timer is None:
            self._arm()

    def _left(self) -> None:
        """A flight left the table: an empty table keeps no timer."""
        if not self._running and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def started(self, flight: Flight) -> None:
        """``run_started`` came: the handshake deadline no longer applies (runs are unbounded)."""
        flight.started = True
        flight._stop_timer()

    def take(self, flight: Flight) -> None:
        """Take a running flight out of the table, keeping its run lock (its outcome is being
        stored); :meth:`finish` lets go of the rest."""
        if self._running.get(flight.job_id) is flight:
            del self._running[flight.job_id]
            flight._stop_timer()
            self._left()

    def finish(self, flight: Flight) -> None:
        """The run's outcome is stored (or will never be): out of the table, timer stopped,
        run lock let go, waiters settled. A flight abandoned while its outcome was being
        stored has ended too — its page already answered — so it stops ending now."""
        if self._ending.get(flight.claim) is flight:
            self.ended(flight.claim)
        else:
            self.take(flight)
            flight._let_go()
        flight._settle()

    def abandon(self, job_id: str) -> Flight | None:
        """Drop a run of which nothing will be stored: it is *ending* until the page says the
        run ended; its run lock is held, and its waiters wait, till then."""
        flight = self._running.pop(job_id, None)
        if flight is None:
            return None
        flight._stop_timer()
        self._left()
        self._ending[flight.claim] = flight
        return flight

    def ending_of_type(self, job_type: str) -> list[Flight]:
        """Abandoned runs of ``job_type`` that have not yet said they ended."""
        return [f for f in self._ending.values() if f.type == job_type]

    def ended(self, claim: object) -> bool:
        """A page's word that an abandoned run ended: its run lock goes. False when ``claim``
        names no run that is ending."""
        flight = self._ending.pop(claim, None) if isinstance(claim, str) else None
        if flight is None:
            return False
        flight._stop_timer()
        flight._let_go()
        flight._settle()
        self._on_ended()
        return True
