"""A transport that is not ``async def``: the built-in ``fetch`` fails its job at once, with the
code ``transport_not_async`` and an error naming the transport, after one call (calling it again
would return the same non-awaitable)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers import one_tab
from pyjobq.testing import Response, run, settle


def test_a_synchronous_transport_fails_its_job_at_once_naming_it() -> None:
    async def main() -> None:
        calls: list[tuple[str, str, Any]] = []

        def send(method: str, path: str, body: Any) -> Response:  # no async: a plain def
            calls.append((method, path, body))
            return Response(201, {"id": 1})

        world, tab = one_tab(transport=send)
        job = tab.side.enqueue_fetch("POST", "/notes", {"text": "hi"}, max_attempts=5)
        await settle()
        outcome = await asyncio.wait_for(job.done, 1)
        assert (outcome.status, outcome.code) == ("failed", "transport_not_async")
        assert "'test_a_synchronous_transport_fails_its_job_at_once_naming_it.<locals>." \
               "main.<locals>.send'" in outcome.error
        assert "returned Response, not an awaitable" in outcome.error
        assert "async def" in outcome.error
        assert calls == [("POST", "/notes", {"text": "hi"})]  # one call, no retry
        stored = await world.store.get(job.id)
        assert stored is not None and (stored.status, stored.attempts) == ("failed", 1)
    run(main)


@pytest.mark.parametrize("shape", ["async def", "returns an awaitable"])
def test_a_transport_that_returns_an_awaitable_is_sent_as_always(shape: str) -> None:
    async def main() -> None:
        async def answer() -> Response:
            return Response(201, {"id": 1})

        async def send_async(method: str, path: str, body: Any) -> Response:
            return await answer()

        def send_awaitable(method: str, path: str, body: Any) -> Any:
            return asyncio.ensure_future(answer())

        send = send_async if shape == "async def" else send_awaitable
        _, tab = one_tab(transport=send)
        job = tab.side.enqueue_fetch("POST", "/notes", {"text": "hi"})
        await settle()
        outcome = await asyncio.wait_for(job.done, 1)
        assert (outcome.status, outcome.http_status) == ("done", 201)
    run(main)
