"""The hand-off: a claimed job goes to the page as ``run``, and the handshake that follows.

Runs wherever an engine runs: in the scheduler worker, and in the page — the volatile
engine and the outbox hand their runs to their own page the same way (the waiting tab's
request scheduler holds no lease, so it hands nothing off).

Theory of operation
-------------------
A claim that committed is handed off (:meth:`Handoff.hand_off`): it enters the in-flight
table (pyjobq/engine/inflight.py) with its handshake deadline, and ``run`` goes out. Only
the handshake is timed (spec: "What bounds a run"): when the deadline passes with no
``run_started`` the page is asked (``run_check``), never blamed, and only a page that
handled ``run`` and has no run of this claim in hand fails the job (``handshake_timeout``).

A run whose job another tab deleted or cancelled is dropped (:meth:`Handoff.abandon`) — but
the channel is news, so only once the store agrees (:meth:`Handoff.told_gone`). Word of a
job not in flight here is kept for ``RECHECK_MS``: a claim stored before that word and
handed off after it (a tab frozen in between) is checked at its hand-off. Under run locks
the records of the runs in flight are read again every ``RECHECK_MS``, for a tab that died
(or froze) before broadcasting its delete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..core import policy
from ..core.codes import Code
from ..core.messages import RECHECK_MS, make
from ..core.ports import Change, Clock, Release, Timer
from ..core.records import JobRecord
from ..core.status import ONLY_RUNNING, Status
from .control import PassControl
from .inflight import Flight, FlightTable
from .parts import Send, Spawn, Write


@dataclass(frozen=True)
class HandoffEngine:
    """What the hand-off uses of its engine (pyjobq/engine/scheduler.py makes it)."""

    flights: FlightTable
    #: Posts a message to the page.
    send: Send
    clock: Clock
    #: The engine's ``source``: the owner its claims wrote.
    source: str
    #: How long the page has to answer ``run`` with ``run_started``.
    handshake_ms: float
    #: Read the runs' records again every ``RECHECK_MS`` (under run locks).
    recheck: bool
    control: PassControl
    #: Reads one record from the store.
    get: Callable[[str], Awaitable[JobRecord | None]]
    write: Write
    spawn: Spawn


class Handoff:
    """The engine's runs on their way to the page: hand-off, handshake, abandon, gone checks."""

    def __init__(self, engine: HandoffEngine) -> None:
        self._engine = engine
        self._verify_timer: Timer | None = None
        #: Jobs other tabs said they deleted or cancelled while no run of them was in flight here,
        #: with when: a claim stored before that news and handed off after it (a tab frozen in
        #: between) is checked at its hand-off rather than at the 30 s recheck.
        self._told_gone: dict[str, float] = {}

    def hand_off(self, record: JobRecord, release_run_lock: Release | None = None) -> None:
        """Post ``run`` for a claim that committed; its handshake deadline starts now."""
        flight = self._engine.flights.add(
            record.id, record.type, release_run_lock=release_run_lock,
            deadline_ms=self._engine.handshake_ms, on_deadline=self._on_deadline)
        self._engine.send(make(
            "run",
            job_id=record.id,
            claim=flight.claim,
            reconstructor=record._reconstructor,
            params=record._params,
            job_type=record.type,
            attempt=record.attempts,
            timeout_ms=record.timeout_ms,
        ))
        self._arm_verify()
        if self._told_gone.pop(record.id, None) is not None:
            self._engine.spawn(self._verify_gone(record.id, flight.claim))

    def stop(self) -> None:
        """The engine stops: no more rechecks."""
        if self._verify_timer is not None:
            self._verify_timer.cancel()
            self._verify_timer = None

    # ------------------------------------------------------------ the handshake

    def run_started(self, msg: dict[str, Any]) -> None:
        flight = self._engine.flights.for_answer(msg)
        if flight is not None:
            self._engine.flights.started(flight)

    def _on_deadline(self, flight: Flight) -> None:
        """The handshake deadline passed with no ``run_started``: ask the page, rather than fail.

        The deadline is the scheduler's clock, and that clock runs while the page cannot answer:
        a page busy with long synchronous Python (a notebook cell), or a tab frozen between
        ``run`` and its handling (the worker thaws with it, its timer overdue). ``run_check``
        travels behind ``run`` on the FIFO link, so the page's answer comes after it handled
        ``run``: a late page answers late — ``run_started`` first — and never wrongly. Only a
        page that handled ``run`` and has no run of this claim in hand fails the job.
        """
        if self._engine.flights.get(flight.job_id) is flight and not flight.started:
            self._engine.send(make("run_check", job_id=flight.job_id, claim=flight.claim))

    def run_checked(self, msg: dict[str, Any]) -> None:
        flight = self._engine.flights.for_answer(msg)
        if flight is not None and not flight.started and msg["started"] is False:
            self._engine.spawn(self._handshake_expired(flight))

    async def _handshake_expired(self, flight: Flight) -> None:
        if self._engine.flights.get(flight.job_id) is not flight or flight.started:
            return
        self._engine.flights.take(flight)
        self._engine.send(make("abandon_run", job_id=flight.job_id, claim=flight.claim))
        now = self._engine.clock.now()

        def change(cur: JobRecord) -> JobRecord | None:
            if cur.owner != self._engine.source:
                return None
            return policy.fail(
                cur, now,
                "run_started never came: the page handled 'run' but has no run of this claim in "
                f"hand (asked after {int(self._engine.handshake_ms)} ms). Its executor side did "
                f"not take the run: the handler for reconstructor {cur._reconstructor!r} is "
                "missing there.",
                code=Code.HANDSHAKE_TIMEOUT,
            )

        try:
            await self._engine.write([Change(flight.job_id, change, ONLY_RUNNING)])
        finally:
            self._engine.flights.finish(flight)
            self._engine.control.kick()

    # ------------------------------------------------------------ runs whose job went

    def told_gone(self, job_id: str) -> bool:
        """Another tab says it deleted or cancelled ``job_id``. A run of it in flight here is
        dropped if the store agrees (True: there was one); otherwise the word is kept for a
        claim of it handed off soon (False)."""
        flight = self._engine.flights.get(job_id)
        if flight is None:
            now = self._engine.clock.now()
            self._told_gone = {i: t for i, t in self._told_gone.items() if now - t < RECHECK_MS}
            self._told_gone[job_id] = now
            return False
        self._engine.spawn(self._verify_gone(flight.job_id, flight.claim))
        return True

    def _arm_verify(self) -> None:
        engine = self._engine
        if self._verify_timer is None and engine.flights and not engine.control.stopped \
                and engine.recheck:
            self._verify_timer = self._engine.clock.call_later(RECHECK_MS, self._verify_in_flight)

    def _verify_in_flight(self) -> None:
        """Read the records of the runs in flight: one deleted or cancelled by a tab that died (or
        froze) before broadcasting it is dropped here rather than run to its end."""
        self._verify_timer = None
        for flight in self._engine.flights:
            if flight.started:
                self._engine.spawn(self._verify_gone(flight.job_id, flight.claim))
        self._arm_verify()

    async def _verify_gone(self, job_id: str, claim: str) -> None:
        record = await self._engine.get(job_id)
        flight = self._engine.flights.get(job_id)
        if flight is None or flight.claim != claim:
            return
        if record is None or record.status is not Status.RUNNING \
                or record.owner != self._engine.source:
            self.abandon(job_id)

    def abandon(self, job_id: str) -> None:
        """Drop a run (deleted, cancelled, or the engine stopped): nothing of it will be stored.

        Its type and run lock stay busy until the page says the run ended — its request may
        still be on the wire. The page bounds that: it ends the run within
        :data:`~pyjobq.core.messages.ABANDON_GRACE_MS` of *handling* ``abandon_run``, and the
        engine keeps no clock of its own (one started here would run out early on a busy or
        frozen page).
        """
        flight = self._engine.flights.abandon(job_id)
        if flight is None:
            return
        self._engine.send(make("abandon_run", job_id=job_id, claim=flight.claim))
        self._engine.control.kick()
