"""HTTP as servers mean it, through the built-in ``fetch`` on a simulated tab and its fake clock:
a 429's or 503's ``Retry-After`` is waited out (up to an hour), 400 and 413 fail at once, and a
header is read from any kind of response the transport returns."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helpers import serving
from pyjobq.executor.fetch import header
from pyjobq.testing import Response, run, settle


@pytest.mark.parametrize("status", [429, 503])
def test_the_server_s_retry_after_is_waited_out_before_the_next_try(status: int) -> None:
    async def main() -> None:
        world, server, tab = serving(Response(status, "busy", {"retry-after": "120"}),
                                     Response(200, {}))
        job = tab.side.enqueue_fetch("POST", "/busy")
        await settle()
        record = await world.store.get(job.id)
        assert record is not None and (record.status, record.http_status) == ("pending",
                                                                                status)
        assert record.next_retry_at == record.updated_at + 120_000
        await world.advance(119_000)  # well past the ladder's own 1 s step
        assert [c[1] for c in server.calls] == ["/busy"]
        await world.advance(1_000)
        assert (await asyncio.wait_for(job.done, 1)).status == "done"
        assert [c[1] for c in server.calls] == ["/busy", "/busy"]
    run(main)


@pytest.mark.parametrize("status", [400, 413])
def test_a_request_the_server_cannot_take_as_sent_fails_at_once(status: int) -> None:
    async def main() -> None:
        world, server, tab = serving(Response(status, {"code": "bad"}))
        job = tab.side.enqueue_fetch("POST", "/bad", max_attempts=5)
        out = await asyncio.wait_for(job.done, 1)
        assert (out.status, out.http_status, out.code) == ("failed", status, "bad")
        assert len(server.calls) == 1
    run(main)


class _Headers:
    """A JS ``Headers``: ``get`` is case-insensitive and answers null (None) for no header."""

    def __init__(self, **values: str) -> None:
        self._values = {k.lower().replace("_", "-"): v for k, v in values.items()}

    def get(self, name: str) -> str | None:
        return self._values.get(name.lower())


class _Answer:
    def __init__(self, headers: Any) -> None:
        self.headers = headers


def test_a_header_is_read_from_a_mapping_or_a_headers_object_whatever_its_case() -> None:
    assert header(_Answer({"Retry-After": "5"}), "retry-after") == "5"
    assert header(_Answer({"retry-after": "5"}), "Retry-After") == "5"
    assert header(_Answer(_Headers(retry_after="7")), "Retry-After") == "7"
    assert header(_Answer(_Headers()), "Retry-After") is None
    assert header(_Answer(None), "Retry-After") is None
    assert header(object(), "Retry-After") is None
    assert header(_Answer({"Retry-After": 5}), "Retry-After") is None  # not a str: not said


def test_a_header_no_number_or_date_says_leaves_the_answer_as_it_was() -> None:
    async def main() -> None:
        world, server, tab = serving(Response(400, {"code": "bad"}, {"Retry-After": "²"}))
        job = tab.side.enqueue_fetch("POST", "/bad")
        out = await asyncio.wait_for(job.done, 1)
        assert (out.status, out.http_status, out.code) == ("failed", 400, "bad")
    run(main)


def test_an_http_date_is_counted_from_the_page_s_clock() -> None:
    import email.utils

    async def main() -> None:
        world, server, tab = serving(Response(503, "busy"), Response(200, {}))
        at = email.utils.formatdate((world.clock.now() + 600_000) / 1000, usegmt=True)
        server.answers[0] = Response(503, "busy", {"Retry-After": at})
        job = tab.side.enqueue_fetch("POST", "/busy")
        await settle()
        record = await world.store.get(job.id)
        assert record is not None and record.status == "pending"
        assert abs(record.next_retry_at - (world.clock.now() + 600_000)) < 1_000
    run(main)


def test_a_factory_that_raises_interrupted_fails_its_job_once_rather_than_run_again() -> None:
    from pyjobq import Interrupted

    async def main() -> None:
        calls = 0

        def factory(params: Any) -> Any:
            nonlocal calls
            calls += 1
            raise Interrupted("not now")

        world, server, tab = serving(reconstructors={"kind": factory})
        job = tab.side.enqueue_persistent("kind", max_attempts=3)
        out = await asyncio.wait_for(job.done, 1)
        assert (out.status, out.code, calls) == ("failed", "reconstructor_failed", 1)
    run(main)
