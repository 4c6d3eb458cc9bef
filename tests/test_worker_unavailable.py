"""A scheduler worker that never boots, or stops: nothing the page awaits waits for ever, and a
tab that cannot process never holds the lease.

Driven on an :class:`~pyjobq.executor.side.ExecutorSide` whose link reaches no scheduler, its boot
followed by a :class:`~pyjobq.executor.boot.Boot` on a recording :class:`FakeStart` (the browser's
failures arrive as the same ``worker_error`` / ``stopped`` messages, or as ``Boot.failed`` from
the browser runtime, tested in tests/e2e/worker_start.spec.js and tests/e2e/boot.spec.js).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from pyjobq import WorkerUnavailable
from pyjobq.core.backoff import make_backoff
from pyjobq.core.messages import make
from pyjobq.errors import WORKER_ADVICE
from pyjobq.executor.boot import Boot
from pyjobq.executor.side import ExecutorSide
from pyjobq.memory import ChannelHub
from pyjobq.testing import run


class SilentLink:
    """A worker that takes every message and answers none until the test says so."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self._subscribers: list[Any] = []

    def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def subscribe(self, callback: Any) -> Any:
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def say(self, message: dict[str, Any]) -> None:
        for callback in list(self._subscribers):
            callback(message)


class ManualClock:
    def __init__(self) -> None:
        self.timers: list[tuple[float, Any]] = []

    def now(self) -> float:
        return 0.0

    def call_later(self, delay_ms: float, callback: Any) -> Any:
        entry = (delay_ms, callback)
        self.timers.append(entry)

        class Timer:
            def cancel(timer) -> None:
                if entry in self.timers:
                    self.timers.remove(entry)

        return Timer()

    def fire(self) -> None:
        for _delay, callback in self.timers[:]:
            self.timers.remove((_delay, callback))
            callback()


class FakeStart:
    """The platform's part of a boot, recorded: what :class:`Boot` asked for, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.online = True
        self.warnings: list[str] = []

    def end(self) -> None:
        self.calls.append("end")

    def start(self) -> None:
        self.calls.append("start")

    def get_in_line(self) -> None:
        self.calls.append("get_in_line")

    def let_lease_go(self) -> None:
        self.calls.append("let_lease_go")

    def is_online(self) -> bool:
        return self.online

    def warn(self, text: str) -> None:
        self.warnings.append(text)


STALL_MS = 60_000.0


#: What a worker says as it boots, up to Pyodide's boot itself.
BOOTING = ("worker_alive", "worker_fetched", "worker_booting")


def side_with(clock: ManualClock | None = None, *, requests: SilentLink | None = None,
              said: tuple[str, ...] = (),
              ) -> tuple[ExecutorSide, SilentLink, list[WorkerUnavailable], FakeStart, Boot]:
    """A page's side on a silent worker link (and, with ``requests``, its own request
    scheduler's link), what its console hook was told, and its boot on a :class:`FakeStart`
    with ``clock`` (the side's handles have a clock of their own); its worker has said the
    messages ``said`` (their types)."""
    link = SilentLink()
    side = ExecutorSide(link=link, channel=ChannelHub().channel("jobs"), source="tab-1",
                        clock=ManualClock(), requests=requests,
                        requests_source="tab-1:page" if requests is not None else None)
    told: list[WorkerUnavailable] = []
    side.on_unavailable = told.append
    start = FakeStart()
    boot = Boot(side.persistent, start, clock or ManualClock(), stall_ms=STALL_MS,
                backoff=make_backoff(lambda: 0.0))
    for step in said:
        link.say(make(step))
    return side, link, told, start, boot


async def thumbnail(signal: Any) -> dict[str, int]:
    return {"width": 64}


def test_worker_error_fails_pending_and_later_calls_and_volatile_jobs_run() -> None:
    async def main() -> None:
        side, link, told, start, _boot = side_with()
        pending_query = asyncio.ensure_future(side.query_all())
        stored_job = side.job("stored-before")           # a record from an earlier visit
        job = side.enqueue_fetch("POST", "/api/x", {"n": 1})
        await asyncio.sleep(0)                            # the enqueue is on the wire
        # In call order: query_all's request went out at its call, before the task ran; the job
        # filed after it travels after it.
        assert [m["type"] for m in link.sent] == ["query_all", "get_job", "enqueue"]

        link.say(make("worker_error", stage="import",
                      message="TypeError: Failed to fetch pyodide.mjs"))

        with pytest.raises(WorkerUnavailable) as raised:
            await pending_query
        error = raised.value
        assert (error.code, error.stage) == ("worker_not_started", "import")
        assert "TypeError: Failed to fetch pyodide.mjs" in str(error)
        assert WORKER_ADVICE["import"] in str(error)
        with pytest.raises(WorkerUnavailable):
            await job.stored
        # never stored: a failed outcome, saying why
        outcome = await job.done
        assert (outcome.status, outcome.code) == ("failed", "worker_not_started")
        assert "Failed to fetch pyodide.mjs" in (outcome.error or "")
        with pytest.raises(WorkerUnavailable):
            await stored_job.done                         # its outcome can no longer be learnt here

        sent = len(link.sent)
        for call in (side.query_all(), side.delete_job("a"), side.delete_group("g"),
                     side.cancel_job("a"), side.retry_job("a"), side.retry_all(),
                     side.cleanup_old()):
            with pytest.raises(WorkerUnavailable):
                await call
        with pytest.raises(WorkerUnavailable):
            await side.job("another").done
        later = side.enqueue_fetch("POST", "/api/x", {"n": 2})
        with pytest.raises(WorkerUnavailable):
            await later.stored
        assert len(link.sent) == sent                     # nothing more went to a dead worker

        volatile = await asyncio.wait_for(side.enqueue(thumbnail).done, 5)
        assert (volatile.status, volatile.result) == ("done", {"width": 64})
        assert told == [error]                            # the console hook heard it once
        assert start.calls == ["let_lease_go"]            # never in line again, never restarted

    run(main)


def test_ready_disarms_the_deadline() -> None:
    async def main() -> None:
        clock = ManualClock()
        side, link, told, start, boot = side_with(clock)
        assert [delay for delay, _ in clock.timers] == [STALL_MS]  # its script must say something
        link.say(make("worker_alive"))
        link.say(make("worker_fetched"))
        # waiting in line is not bounded
        assert clock.timers == [] and start.calls == ["get_in_line"]
        link.say(make("worker_booting"))
        assert [delay for delay, _ in clock.timers] == [STALL_MS]
        link.say(make("ready", source="tab-1"))
        assert side.worker_ready and boot.booted and clock.timers == []
        pending = asyncio.ensure_future(side.query_all())
        await asyncio.sleep(0)
        request_id = link.sent[-1]["request_id"]
        link.say(make("reply", request_id=request_id, ok=True, value=[]))
        assert await pending == []
        assert told == [] and side.unavailable is None and start.calls == ["get_in_line"]

    run(main)


def test_stopped_fails_waiting_calls_and_done_with_the_reason() -> None:
    async def main() -> None:
        side, link, told, start, _boot = side_with()
        link.say(make("worker_alive"))
        link.say(make("worker_fetched"))
        link.say(make("worker_booting"))
        link.say(make("ready", source="tab-1"))
        job = side.enqueue_fetch("POST", "/api/x", None)
        await asyncio.sleep(0)
        link.say(make("reply", request_id=link.sent[-1]["request_id"], ok=True, value=None))
        await job.stored
        pending = asyncio.ensure_future(side.query_all())
        await asyncio.sleep(0)
        link.say(make("stopped", reason="another tab upgraded the database: reload this page"))
        for awaitable in (pending, job.done):
            with pytest.raises(WorkerUnavailable) as raised:
                await awaitable
            assert raised.value.code == "worker_stopped"
            assert "reload this page" in str(raised.value)
        # Only the first failure counts.
        link.say(make("worker_error", stage="start", message="late"))
        assert side.unavailable is told[0] and len(told) == 1

    run(main)


@pytest.mark.parametrize("stage", sorted(WORKER_ADVICE))
def test_each_stage_says_what_to_do(stage: str) -> None:
    error = WorkerUnavailable.not_started(stage, "the worker's words")
    assert f"did not start ({stage})" in str(error)
    assert "the worker's words" in str(error)
    assert WORKER_ADVICE[stage] in str(error)


def _reply_to_all(link: SilentLink, values: dict[str, Any]) -> None:
    """Answer every request on ``link`` with ``values[its type]``."""
    for message in list(link.sent):
        if "request_id" in message:
            link.say(make("reply", request_id=message["request_id"], ok=True,
                          value=values.get(message["type"])))


def test_a_boot_that_fails_offline_lets_the_lease_go_keeps_its_jobs_pending_and_retries(
        caplog: pytest.LogCaptureFixture) -> None:
    # A tab that took the lease over while offline, whose worker cannot
    # load Pyodide, must not report WorkerUnavailable for good nor keep the lease.
    async def main() -> None:
        caplog.set_level(logging.INFO, logger="pyjobq")
        clock = ManualClock()
        requests = SilentLink()
        side, link, told, start, boot = side_with(clock, requests=requests)
        job = side.enqueue_fetch("POST", "/api/x", {"n": 1})
        listed = asyncio.ensure_future(side.query_all())
        await asyncio.sleep(0)
        assert requests.sent == []  # held until the worker's script runs (or is to be retried)

        start.online = False
        link.say(make("worker_error", stage="fetch",
                      message="Failed to fetch .../pyodide.asm.wasm"))
        assert start.calls == ["end"]                      # ended, and the lease with it
        # the page's own scheduler
        assert [m["type"] for m in requests.sent] == ["enqueue", "query_all"]
        _reply_to_all(requests, {"query_all": []})
        await job.stored
        assert await listed == []
        assert not job.done.done() and side.unavailable is None and told == []
        assert [delay for delay, _ in clock.timers] == [1000.0]  # the ladder's first step
        assert len(start.warnings) == 1 and "could not boot (fetch)" in start.warnings[0]
        assert "stay stored and pending" in start.warnings[0]

        boot.online()                                      # the browser is back online: at once
        assert start.calls == ["end", "start"]
        assert [delay for delay, _ in clock.timers] == [STALL_MS]

        link.say(make("worker_error", stage="import", message="Failed to fetch .../pyodide.mjs"))
        assert start.calls == ["end", "start", "end"]
        assert [delay for delay, _ in clock.timers] == [2000.0]  # the next step
        assert len(start.warnings) == 1                    # warned once for the whole outage
        clock.fire()                                       # no online event: the ladder gets there
        assert start.calls == ["end", "start", "end", "start"]

        start.online = True
        for step in BOOTING:
            link.say(make(step))
        link.say(make("ready", source="tab-1"))
        assert start.calls == ["end", "start", "end", "start", "get_in_line"]
        assert boot.failures == 0 and clock.timers == [] and side.unavailable is None
        link.say(make("job-update", source="tab-1",
                      jobs=[{"id": job.id, "status": "done", "result": 1}]))
        assert (await job.done).status == "done"
        assert "booted after 2 failed tries" in caplog.text

    run(main)


def test_a_stalled_download_ends_the_worker_and_retries_on_the_ladder() -> None:
    # A worker whose download neither answers nor fails must not hold the lease for ever.
    async def main() -> None:
        clock = ManualClock()
        side, link, told, start, boot = side_with(clock, requests=SilentLink())
        link.say(make("worker_alive"))
        link.say(make("worker_progress", bytes=65_536))   # bytes arrive: not stalled
        assert [delay for delay, _ in clock.timers] == [STALL_MS]
        clock.fire()                                       # then nothing for STALL_MS
        assert start.calls == ["end"] and side.unavailable is None and told == []
        assert "could not boot (timeout): no progress within 60 s" in start.warnings[0]
        assert [delay for delay, _ in clock.timers] == [1000.0]
        # a late word from the ended worker counts for nothing
        link.say(make("worker_fetched"))
        assert start.calls == ["end"]
        clock.fire()
        assert start.calls == ["end", "start"]
        assert [delay for delay, _ in clock.timers] == [STALL_MS]

    run(main)


def test_a_boot_that_stalls_holding_the_lease_lets_it_go() -> None:
    # The refused pyodide.asm.wasm of DESIGN.md: Pyodide neither boots nor fails.
    async def main() -> None:
        clock = ManualClock()
        side, link, told, start, boot = side_with(clock, requests=SilentLink(), said=BOOTING)
        assert start.calls == ["get_in_line"]
        clock.fire()
        assert start.calls == ["get_in_line", "end"] and side.unavailable is None
        assert boot.retrying is not None and boot.retrying.stage == "timeout"

    run(main)


def test_a_permanent_failure_lets_the_lease_go_and_starts_nothing_more() -> None:
    async def main() -> None:
        clock = ManualClock()
        side, link, told, start, boot = side_with(clock, requests=SilentLink())
        start.online = False  # a CSP refusal is permanent whatever the network says
        link.say(make("worker_alive"))
        link.say(make("worker_error", stage="fetch", message="Refused to connect", refused=True))
        assert start.calls == ["let_lease_go"] and clock.timers == []
        assert told and (told[0].stage, told[0].code) == ("fetch", "worker_not_started")
        boot.online()
        assert start.calls == ["let_lease_go"]  # nothing restarts a permanent failure
        with pytest.raises(WorkerUnavailable):
            await side.query_all()

    run(main)


class MovableClock(ManualClock):
    """A :class:`ManualClock` whose time the test sets: a timer fired after ``at`` moved past
    its moment fired late, as a frozen page's timers do on resume."""

    def __init__(self) -> None:
        super().__init__()
        self.at = 0.0

    def now(self) -> float:
        return self.at


def test_a_deadline_that_fires_late_because_the_page_was_frozen_is_judged_again_from_then() -> None:
    # Found by the simulation's boot faults: a page frozen (its worker with it) for longer than
    # the deadline while its worker fetched its files ended that worker on resume, as a stall.
    async def main() -> None:
        clock = MovableClock()
        side, link, told, start, boot = side_with(clock, requests=SilentLink())
        link.say(make("worker_alive"))
        clock.at = 10 * STALL_MS                           # frozen for ten minutes, then resumed
        clock.fire()
        assert start.calls == [] and boot.retrying is None  # not a stall: nobody could run
        assert [delay for delay, _ in clock.timers] == [STALL_MS]
        link.say(make("worker_fetched"))                   # the worker goes on where it was
        assert start.calls == ["get_in_line"] and boot.failures == 0

    run(main)


def test_a_deadline_that_fires_late_twice_still_ends_a_stalled_boot() -> None:
    # A hidden tab's timers may run late every time: its stalled boot must still end.
    async def main() -> None:
        clock = MovableClock()
        side, link, told, start, boot = side_with(clock, requests=SilentLink(), said=BOOTING)
        clock.at = 3 * STALL_MS
        clock.fire()
        assert start.calls == ["get_in_line"]
        clock.at = 6 * STALL_MS
        clock.fire()
        assert start.calls == ["get_in_line", "end"] and boot.retrying is not None
        assert boot.retrying.stage == "timeout"

    run(main)
