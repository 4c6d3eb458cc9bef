"""A scheduler worker that never starts, or stops: nothing the page awaits waits for ever.

Driven on an :class:`~pyjobq.executor.ExecutorSide` whose link reaches no scheduler (the
browser's failures arrive as the same ``worker_error`` / ``stopped`` messages, or as
``scheduler_unavailable`` from the browser runtime, tested in tests/e2e/worker_start.spec.js).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyjobq import WorkerUnavailable
from pyjobq.core.messages import make
from pyjobq.errors import WORKER_ADVICE
from pyjobq.executor import ExecutorSide
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


def side_with(clock: ManualClock | None = None, *, start_timeout_ms: float | None = None,
              ) -> tuple[ExecutorSide, SilentLink, list[WorkerUnavailable]]:
    """A page's side on a silent worker link, what its console hook was told, and (with
    ``start_timeout_ms``) its worker's start bounded."""
    link = SilentLink()
    side = ExecutorSide(link=link, channel=ChannelHub().channel("jobs"), source="tab-1", clock=clock)
    told: list[WorkerUnavailable] = []
    side.on_unavailable = told.append
    if start_timeout_ms is not None:
        side.expect_ready(start_timeout_ms)
    return side, link, told


async def thumbnail(signal: Any) -> dict[str, int]:
    return {"width": 64}


def test_worker_error_fails_pending_and_later_calls_and_volatile_jobs_run() -> None:
    async def main() -> None:
        side, link, told = side_with()
        pending_query = asyncio.ensure_future(side.query_all())
        stored_job = side.job("stored-before")           # a record from an earlier visit
        job = side.enqueue_fetch("POST", "/api/x", {"n": 1})
        await asyncio.sleep(0)                            # the enqueue is on the wire
        # In call order: query_all's request went out at its call, before the task ran; the job
        # filed after it travels after it.
        assert [m["type"] for m in link.sent] == ["query_all", "get_job", "enqueue"]

        link.say(make("worker_error", stage="import", message="TypeError: Failed to fetch pyodide.mjs"))

        with pytest.raises(WorkerUnavailable) as raised:
            await pending_query
        error = raised.value
        assert (error.code, error.stage) == ("worker_not_started", "import")
        assert "TypeError: Failed to fetch pyodide.mjs" in str(error)
        assert WORKER_ADVICE["import"] in str(error)
        with pytest.raises(WorkerUnavailable):
            await job.stored
        outcome = await job.done                          # never stored: a failed outcome, saying why
        assert (outcome.status, outcome.code) == ("failed", "worker_not_started")
        assert "Failed to fetch pyodide.mjs" in (outcome.error or "")
        with pytest.raises(WorkerUnavailable):
            await stored_job.done                         # its outcome can no longer be learnt here

        sent = len(link.sent)
        for call in (side.query_all(), side.delete_job("a"), side.delete_group("g"),
                     side.cancel_job("a"), side.retry_job("a"), side.retry_all(), side.cleanup_old()):
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

    run(main)


def test_no_ready_within_the_start_timeout_fails_with_a_timeout() -> None:
    async def main() -> None:
        clock = ManualClock()
        side, link, told = side_with(clock, start_timeout_ms=60_000)
        pending = asyncio.ensure_future(side.query_all())
        await asyncio.sleep(0)
        assert not pending.done()
        clock.fire()
        with pytest.raises(WorkerUnavailable) as raised:
            await pending
        assert raised.value.stage == "timeout"
        assert "no answer within 60 s" in str(raised.value)
        assert len(told) == 1

    run(main)


def test_ready_disarms_the_start_timeout() -> None:
    async def main() -> None:
        clock = ManualClock()
        side, link, told = side_with(clock, start_timeout_ms=60_000)
        link.say(make("ready", source="tab-1"))
        assert side.worker_ready and clock.timers == []
        pending = asyncio.ensure_future(side.query_all())
        await asyncio.sleep(0)
        request_id = link.sent[-1]["request_id"]
        link.say(make("reply", request_id=request_id, ok=True, value=[]))
        assert await pending == []
        assert told == [] and side.unavailable is None

    run(main)


def test_stopped_fails_waiting_calls_and_done_with_the_reason() -> None:
    async def main() -> None:
        side, link, told = side_with()
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
