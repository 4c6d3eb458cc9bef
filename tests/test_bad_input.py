"""Bad input gets a clear error and loses nothing (docs/bad-input.md), on the memory fakes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import pytest

from pyjobq.errors import InvalidJobError
from pyjobq.testing import CHANNEL, World, run, settle
from helpers import serving


def test_enqueue_rejects_a_body_that_cannot_be_stored_before_anything_is_filed() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab()
        for body in ({"f": object()}, float("nan"), b"bytes"):
            with pytest.raises(InvalidJobError, match="body must be JSON-like"):
                tab.side.enqueue_fetch("POST", "/x", body)
        with pytest.raises(InvalidJobError, match="max_attempts must be an int >= 1, got 0"):
            tab.side.enqueue_fetch("POST", "/x", max_attempts=0)
        with pytest.raises(InvalidJobError, match="delay_ms must be a finite number >= 0, got -5"):
            tab.side.enqueue_fetch("POST", "/x", delay_ms=-5)
        with pytest.raises(InvalidJobError, match="method must be one of"):
            tab.side.enqueue_fetch("BREW", "/x")
        await settle()
        assert await world.store.all() == []
    run(main)


def test_a_transport_that_raises_is_an_ordinary_failure_keeping_params() -> None:
    async def main() -> None:
        world = World()

        async def transport(method: str, path: str, body: Any) -> Any:
            raise RuntimeError("socket on fire")

        tab = world.open_tab(transport=transport)
        job = tab.side.enqueue_fetch("POST", "/x", {"keep": 1}, max_attempts=2)
        for _ in range(5):
            await settle()
            world.clock.advance(40_000)
        outcome = await asyncio.wait_for(job.done, 5)
        assert outcome.status == "failed" and "RuntimeError: socket on fire" in outcome.error
        record = await world.store.get(job.id)
        assert record.attempts == 2 and record._params["body"] == {"keep": 1}
    run(main)


def test_a_transport_that_hangs_is_untimed_and_delete_job_ends_it() -> None:
    async def main() -> None:
        world = World()
        hang: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        async def transport(method: str, path: str, body: Any) -> Any:
            return await hang  # never answers

        tab = world.open_tab(transport=transport)
        job = tab.side.enqueue_fetch("POST", "/x")
        await settle()
        world.clock.advance(3600 * 1000.0)  # an hour: only the handshake is timed
        await settle()
        assert (await world.store.get(job.id)).status.value == "running"
        assert await tab.side.delete_job(job.id)
        outcome = await asyncio.wait_for(job.done, 5)
        assert (outcome.status, outcome.code) == ("cancelled", "deleted")
    run(main)


def test_a_reconstructor_factory_that_raises_fails_at_once_naming_it() -> None:
    async def main() -> None:
        world = World()

        def broken(params: Any) -> Callable[[Any], Awaitable[Any]]:
            raise KeyError("needed")

        tab = world.open_tab(reconstructors={"broken": broken})
        job = tab.side.enqueue_persistent("broken", {"p": 1}, max_attempts=5)
        await settle()
        outcome = await asyncio.wait_for(job.done, 5)
        assert (outcome.status, outcome.code) == ("failed", "reconstructor_failed")
        assert "reconstructor 'broken' raised KeyError" in outcome.error
        record = await world.store.get(job.id)
        assert record.attempts == 1 and record._params == {"p": 1}
    run(main)


@pytest.mark.parametrize("data", [
    None, "text", 3, [], {}, {"v": 1}, {"v": 2, "type": "wake"}, {"v": 1, "type": "eval", "code": "1"},
    {"v": 1, "type": "job-update", "source": "x", "job": "<img src=x onerror=alert(1)>"},
    {"v": 1, "type": "run", "job_id": 5},
])
def test_a_malformed_or_foreign_channel_message_is_ignored_and_logged(
    data: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        world, _, tab = serving()
        seen: list[Any] = []
        tab.side.on_update(seen.append)
        caplog.set_level(logging.WARNING, logger="pyjobq")
        world.channels.channel(CHANNEL).post(data)  # any same-origin script can post on it
        job = tab.side.enqueue_fetch("POST", "/x")
        await settle()
        assert (await asyncio.wait_for(job.done, 5)).status == "done"  # the queue runs on
        assert all(u.get("id") == job.id for u in seen)
        assert "ignored a channel message" in caplog.text
    run(main)


def test_a_10_mb_body_is_stored_whole_and_stays_out_of_job_updates() -> None:
    async def main() -> None:
        world, server, tab = serving()
        updates: list[Any] = []
        tab.side.on_update(updates.append)
        big = {"blob": "x" * 10_000_000}
        job = tab.side.enqueue_fetch("PUT", "/big", big)
        await settle()
        assert (await asyncio.wait_for(job.done, 5)).status == "done"
        assert [body for _, _, body in server.calls] == [big]
        assert updates and all("_params" not in u for u in updates)
    run(main)
