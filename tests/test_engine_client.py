"""The executor side's parts: one client per engine, a failed reply's error class, the router."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from pyjobq.abort import AbortSignal
from pyjobq.core.messages import make
from pyjobq.core.router import Router
from pyjobq.errors import InvalidJobError, PyjobqError, WorkerUnavailable
from pyjobq.executor.client import EngineClient, reply_error
from pyjobq.executor.wiring import in_process
from pyjobq.memory import MemoryStore
from pyjobq.testing import Response, World, run, settle


async def _ok(*_args: Any) -> Response:
    return Response(200, {"ok": True})


def test_the_persistent_and_the_volatile_engines_are_two_clients_of_one_kind() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(transport=_ok)
        assert tab.side.volatile is None  # made on the first volatile job
        persistent = tab.side.enqueue_fetch("POST", "/a")

        async def work(_signal: AbortSignal) -> str:
            return "v"

        volatile = tab.side.enqueue(work)
        side = tab.side
        assert side.volatile is not None
        assert type(side.persistent) is type(side.volatile) is EngineClient
        assert side.persistent.engine is None  # a tab's worker is across a link, as in a browser
        assert side.volatile.engine is not None and side.volatile.engine.mode.volatile
        assert persistent.id in side.persistent.handles and volatile.id in side.volatile.handles
        assert volatile.id not in side.persistent.handles
        assert persistent.id not in side.volatile.handles
        assert ((await persistent).status, (await volatile).result) == ("done", "v")
    run(main)


def test_a_failed_reply_raises_the_class_the_engine_raised() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(transport=_ok)
        # An enqueue the engine refuses (a job without its fields): InvalidJobError on the
        # engine, InvalidJobError here — the reply's error_type is kept.
        with pytest.raises(InvalidJobError, match="malformed job"):
            await tab.side.persistent.request(make("enqueue", jobs=[{"id": "x"}]))
        assert await world.store.all() == []  # nothing half-written
    run(main)


def test_reply_error_falls_back_to_pyjobq_error_for_a_class_it_does_not_know() -> None:
    known = reply_error({"error": "bad", "error_type": "InvalidJobError"})
    assert type(known) is InvalidJobError and str(known) == "bad"
    for error_type in ("KeyError", "NoSuchError", None, "WorkerUnavailable"):
        error = reply_error({"error": "bad", "error_type": error_type})
        assert isinstance(error, PyjobqError) and str(error) == "bad"
    # WorkerUnavailable takes other arguments than a message; it still comes back as one of ours.
    assert not isinstance(reply_error({"error": "x", "error_type": "KeyError"}), WorkerUnavailable)


def test_in_process_wires_a_started_scheduler_to_the_page_end() -> None:
    async def main() -> None:
        from pyjobq.memory import LoopClock

        store = MemoryStore()
        engine = in_process(store=store, source="s", clock=LoopClock(), lock_name="l")
        heard: list[str] = []
        engine.link.subscribe(lambda msg: heard.append(msg["type"]))
        await settle()
        assert heard == ["ready"]  # started, and the first message reached the page's end
        engine.link.send(make("query_all", request_id="r1"))
        await settle()
        assert heard == ["ready", "reply"]
        engine.scheduler.stop()
    run(main)


def test_the_router_logs_a_bad_message_once_and_hands_the_rest_to_their_handlers(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pyjobq")
    woken: list[dict[str, Any]] = []
    owner = Router("pyjobq scheduler", {"wake": woken.append}, ignore={"lease_request"},
                   kind="channel")
    beside = Router("pyjobq worker", {"debug_counts": woken.append}, quiet=True)
    for data in ({"v": 1, "type": "wake"}, {"v": 9, "type": "wake"}, "text",
                 {"v": 1, "type": "lease_request", "epoch": 1}, {"v": 1, "type": "online"}):
        owner(data)
        beside(data)
    assert woken == [{"v": 1, "type": "wake"}]
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "pyjobq scheduler ignored a channel message: protocol version 9, this page speaks 1",
        "pyjobq scheduler ignored a channel message: expected an object, got str",
        "pyjobq scheduler ignored a 'online' channel message",
    ]  # the ignored lease message says nothing; the quiet listener never speaks


def test_a_tab_whose_worker_stops_fails_persistent_requests_and_volatile_jobs_run_on() -> None:
    async def main() -> None:
        world = World()
        tab = world.open_tab(transport=_ok)
        await settle()
        tab.side.scheduler_unavailable(WorkerUnavailable("gone", code="worker_stopped"))
        with pytest.raises(WorkerUnavailable):
            await tab.side.query_all()

        async def work(_signal: AbortSignal) -> int:
            return 7

        assert (await asyncio.wait_for(tab.side.enqueue(work).done, 5)).result == 7
    run(main)
