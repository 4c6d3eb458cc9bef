"""Execution timeouts (``timeout_s=``, ``@pyjobq.task(timeout=)``, ``configure(timeout_s=)``), on
simulated tabs and their fake clock: past the bound the run's signal aborts, the attempt fails
with the code ``timeout`` and is retried with backoff up to ``max_attempts``, and the lane
moves on. An answer in hand is kept: an executor that heeds the signal and still succeeds
succeeds."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

import pyjobq
from helpers import holding, serving
from pyjobq import Code, ConfigurationError, InvalidJobError, Job, Outcome
from pyjobq.abort import AbortSignal
from pyjobq.config import Settings
from pyjobq.core.messages import ABANDON_GRACE_MS
from pyjobq.hosts import start_memory
from pyjobq.testing import Response, run, settle


async def ended_by_its_timeout(job: Job, within_s: float = 1) -> Outcome:
    """``job``'s outcome, within ``within_s`` seconds: failed, with the code ``timeout``."""
    out = await asyncio.wait_for(job.done, within_s)
    assert (out.status, out.code) == ("failed", "timeout")
    return out


def test_a_transport_that_never_answers_times_out_is_retried_and_its_lane_moves_on() -> None:
    async def main() -> None:
        world, server, tab = serving("hold", Response(200, {}), "hold")
        stuck = tab.side.enqueue_fetch("POST", "/stuck", type="saves", max_attempts=2,
                                       timeout_s=5)
        after = tab.side.enqueue_fetch("POST", "/after", type="saves")
        await settle()
        assert [c[1] for c in server.calls] == ["/stuck"]
        record = await world.store.get(stuck.id)
        assert record is not None and record.timeout_ms == 5_000.0  # stored with the job
        await world.advance(4_999)
        assert not stuck.done.done() and server.cancelled == []
        await world.advance(1)  # the bound: its signal aborts, its task (it heeds none) ends
        assert server.cancelled == ["/stuck"]
        record = await world.store.get(stuck.id)
        assert record is not None and (record.status, record.code, record.attempts) \
            == ("pending", Code.TIMEOUT, 1)  # retried with backoff
        # The lane moved on: the next job of the type runs while this one waits out its backoff.
        assert (await asyncio.wait_for(after.done, 1)).status == "done"
        for _ in range(12):  # its backoff, then the second attempt's bound
            await world.advance(5_000)
        out = await asyncio.wait_for(stuck.done, 1)
        assert (out.status, out.code, server.cancelled) == ("failed", "timeout", ["/stuck"] * 2)
        assert "longer than its timeout of 5 s" in (out.error or "")
        assert [c[1] for c in server.calls] == ["/stuck", "/after", "/stuck"]
    run(main)


def test_without_a_timeout_a_held_run_is_never_cut() -> None:
    async def main() -> None:
        world, server, tab, job = await holding("/slow")
        await world.advance(24 * 3_600_000)
        assert not job.done.done() and server.cancelled == []
        assert (await world.store.get(job.id)).timeout_ms is None  # type: ignore[union-attr]
        server.release("/slow")
        assert (await asyncio.wait_for(job.done, 1)).status == "done"
    run(main)


def test_an_executor_that_heeds_the_signal_is_given_the_grace_and_its_answer_is_kept() -> None:
    async def main() -> None:
        world, _server, tab = serving()
        seen: list[str] = []

        def factory(params: Any) -> Any:
            async def work(signal: AbortSignal) -> str:
                signal.heeded = True  # as the built-in fetch does when its transport takes it
                seen.append(str(await signal.wait()))
                return "finished after all"
            return work

        tab.side.register_reconstructor("slow", factory)
        job = tab.side.enqueue_persistent("slow", None, timeout_s=2)
        await settle()
        await world.advance(2_000)
        out = await asyncio.wait_for(job.done, 5)
        assert (out.status, out.result, seen) == ("done", "finished after all", ["timeout"])
    run(main)


def test_one_that_heeds_the_signal_but_never_ends_is_cancelled_after_the_grace() -> None:
    async def main() -> None:
        world, _server, tab = serving()

        def factory(params: Any) -> Any:
            async def work(signal: AbortSignal) -> None:
                signal.heeded = True
                await asyncio.get_running_loop().create_future()  # never ends
            return work

        tab.side.register_reconstructor("deaf", factory)
        job = tab.side.enqueue_persistent("deaf", None, timeout_s=1, max_attempts=1)
        await settle()
        await world.advance(1_000)
        assert not job.done.done()  # the grace: it said it heeds the signal
        await world.advance(ABANDON_GRACE_MS)
        await ended_by_its_timeout(job)
    run(main)


def test_a_task_declares_its_timeout_and_options_override_it() -> None:
    async def main() -> None:
        calls: list[str] = []

        @pyjobq.task(name="tests.timeouts:upload", timeout=3, max_attempts=1)
        async def upload(signal: AbortSignal, path: str) -> None:
            calls.append(path)
            await asyncio.get_running_loop().create_future()  # never answers

        world, _server, tab = serving(reconstructors={upload.name: upload.factory})

        first = upload.options(queue=tab.queue).enqueue("/a")
        second = upload.options(queue=tab.queue, timeout=10).enqueue("/b")
        await settle()
        await world.advance(3_000)
        assert (await asyncio.wait_for(first.done, 1)).code == "timeout"
        await settle()
        await world.advance(9_999)
        assert not second.done.done()
        await world.advance(1)
        assert (await asyncio.wait_for(second.done, 1)).code == "timeout"
        assert [r.timeout_ms for r in await world.store.all()] == [3_000.0, 10_000.0]
        assert calls == ["/a", "/b"]
    run(main)


def test_a_volatile_job_times_out_too() -> None:
    async def main() -> None:
        world, _server, tab = serving()

        async def forever(signal: AbortSignal) -> None:
            await asyncio.get_running_loop().create_future()

        job = tab.side.enqueue(forever, timeout_s=0.5, max_attempts=1)
        await settle()
        await world.advance(500)
        await ended_by_its_timeout(job)
    run(main)


def test_the_configured_timeout_is_every_job_s_that_names_none() -> None:
    async def main() -> None:
        calls: list[str] = []

        async def send(method: str, path: str, body: Any) -> Any:
            calls.append(path)
            if path == "/hangs":
                await asyncio.get_running_loop().create_future()
            return Response(200, {})

        side = start_memory(Settings(db_name="timeouts-default", transport=send, timeout_s=0.05),
                            "tab")
        hangs = side.enqueue_fetch("POST", "/hangs", max_attempts=1)
        own = side.enqueue_fetch("POST", "/own", timeout_s=30)
        await ended_by_its_timeout(hangs, within_s=5)
        assert (await asyncio.wait_for(own.done, 5)).status == "done"
        records = {r["path"]: r for r in
                   ({"path": x["_params"]["path"], **x} for x in await side.query_all())}
        assert (records["/hangs"]["timeout_ms"], records["/own"]["timeout_ms"]) == (50.0, 30_000.0)
        side.stop()
    asyncio.run(main())


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "5", True])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused_naming_it(bad: Any) -> None:
    async def main() -> None:
        world, server, tab = serving()
        for call, where in ((lambda: tab.side.enqueue_fetch("POST", "/x", timeout_s=bad),
                             "enqueue_fetch(timeout_s)"),
                            (lambda: tab.side.enqueue_persistent("k", None, timeout_s=bad),
                             "enqueue_persistent(timeout_s)")):
            with pytest.raises(InvalidJobError, match=r"finite number of seconds > 0") as err:
                call()
            assert where in str(err.value)
        await settle()
        assert await world.store.all() == [] and server.calls == []  # nothing half-filed
    run(main)
    with pytest.raises(ConfigurationError, match=r"timeout_s must be a finite number"):
        pyjobq.configure(timeout_s=0)
    with pytest.raises(ConfigurationError, match=r"@pyjobq.task\(timeout=...\)"):
        pyjobq.task(name="tests.timeouts:bad", timeout=-1)(_never)


async def _never(signal: AbortSignal) -> None:
    return None
