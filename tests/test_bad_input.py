"""Bad input gets a clear error and loses nothing (docs/bad-input.md), on the memory fakes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

import pytest

from helpers import holding, serving
from pyjobq.core.messages import make
from pyjobq.errors import InvalidJobError, PyjobqError
from pyjobq.executor.side import ExecutorSide
from pyjobq.testing import CHANNEL, World, run, settle


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


@pytest.mark.parametrize("call, value, argument, read_as", [
    ("fetch", {1: "one", "1": "uno"}, "body", "{'1': 'uno'}"),
    ("fetch", {"at": (1, 2)}, "body", "{'at': [1, 2]}"),
    ("persistent", {"page": {2: "b", "2": "B"}}, "the job's params", "{'page': {'2': 'B'}}"),
    ("persistent", (1, "x"), "the job's params", "[1, 'x']"),
], ids=["fetch-keys", "fetch-tuple", "persistent-keys", "persistent-tuple"])
def test_a_body_or_params_that_would_not_come_back_as_they_were_are_refused_at_the_call(
        call: str, value: Any, argument: str, read_as: str) -> None:
    """JSON has only str keys: ``{1: …, "1": …}`` would be stored as one key, and a replay
    would run with the other value lost. The same check as a task's arguments: what would not
    read back equal is refused, saying what it would become and what to pass instead."""
    async def main() -> None:
        world = World()
        tab = world.open_tab()
        with pytest.raises(InvalidJobError) as raised:
            if call == "fetch":
                tab.side.enqueue_fetch("POST", "/x", value)
            else:
                tab.side.enqueue_persistent("kind", value)
        message = str(raised.value)
        assert message.startswith(f"{argument} would not come back as it was after the job is "
                                  f"stored: {value!r} would be read as {read_as}"), message
        assert "Pass JSON's own types (dict with str keys, list rather than tuple" in message
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
    None, "text", 3, [], {}, {"v": 1}, {"v": 2, "type": "wake"},
    {"v": 1, "type": "eval", "code": "1"},
    {"v": 1, "type": "job-update", "source": "x", "jobs": "<img src=x onerror=alert(1)>"},
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


#: Every public call taking a job's id, a group or a type, given a value of the wrong type:
#: (the call, the argument it names, the value it got as the message shows it, what to pass).
WRONG_TYPED: list[tuple[Callable[[ExecutorSide], Any], str, str, str]] = [
    (lambda q: q.delete_job(123), "delete_job(job_id)", "123 (int)", "job.id"),
    (lambda q: q.cancel_job(None), "cancel_job(job_id)", "None (NoneType)", "job.id"),
    (lambda q: q.retry_job(["x"]), "retry_job(job_id)", "['x'] (list)", "job.id"),
    (lambda q: q.job(42), "job(job_id)", "42 (int)", "job.id"),
    (lambda q: q.delete_group(7), "delete_group(group)", "7 (int)", "group="),
    (lambda q: q.suspend_type(5), "suspend_type(type)", "5 (int)", "type="),
    (lambda q: q.resume_type(5), "resume_type(type)", "5 (int)", "type="),
    (lambda q: q.enqueue(_never, id=["x"]), "enqueue(id)", "['x'] (list)", "None"),
]


async def _never(signal: Any) -> None:
    raise AssertionError("never run")


@pytest.mark.parametrize("call,argument,got,instead", WRONG_TYPED, ids=[w[1] for w in WRONG_TYPED])
def test_a_wrong_typed_id_group_or_type_raises_invalid_job_error_at_the_call(
    call: Callable[[ExecutorSide], Any], argument: str, got: str, instead: str,
) -> None:
    """Before, each of these sent a message the scheduler dropped with a log line, and the
    caller's future never resolved. Now the call itself raises (nothing to await), naming the
    argument, what it got and what to pass; nothing stored changes and the queue runs on."""
    async def main() -> None:
        world, server, tab = serving()
        kept = tab.side.enqueue_fetch("POST", "/kept", group="g", type="t")
        await settle()
        with pytest.raises(InvalidJobError) as raised:
            call(tab.side)
        message = str(raised.value)
        assert message.startswith(argument + ":"), message
        assert f"got {got}" in message and instead in message, message
        await settle()
        assert (await asyncio.wait_for(kept.done, 5)).status == "done" and server.paths == ["/kept"]
        assert [r.id for r in await world.store.all()] == [kept.id]
    run(main)


@pytest.mark.parametrize("engine,msg,error", [
    ("persistent", make("delete_job", job_id=123), "delete_job.job_id must be str, got int"),
    ("persistent", make("get_job", job_id=None), "get_job.job_id must be str, got NoneType"),
    ("persistent", make("delete_group", group=["doc"]), "delete_group.group must be str, got list"),
    ("volatile", make("suspend_type", job_type=5), "suspend_type.job_type must be str, got int"),
], ids=["delete_job", "get_job", "delete_group", "suspend_type"])
def test_a_request_the_scheduler_refuses_as_malformed_is_answered_with_an_error(
    engine: str, msg: dict[str, Any], error: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A request that reaches a scheduler malformed (from an older page, a foreign script, or a
    call past its check) is refused with an error reply: the caller's future fails at once
    instead of waiting for ever. The refusal is still logged."""
    async def main() -> None:
        world, _, tab = serving()
        client = tab.side.persistent if engine == "persistent" else tab.side._volatile()
        caplog.set_level(logging.WARNING, logger="pyjobq")
        reply = client.request(msg)
        await settle()
        assert reply.done(), "the caller of a malformed request still waits"
        with pytest.raises(InvalidJobError, match=error):
            reply.result()
        assert "ignored a message" in caplog.text
    run(main)


def test_a_request_to_a_scheduler_that_stopped_is_answered_with_an_error() -> None:
    """A scheduler that stopped (the database was upgraded) keeps listening while its pages'
    runs end; a request arriving then is answered with an error, never dropped unanswered."""
    async def main() -> None:
        world, server, tab, job = await holding("/slow")
        assert tab.scheduler is not None
        tab.scheduler.stop()
        reply = asyncio.ensure_future(tab.side.delete_job(job.id))
        await settle()
        assert reply.done(), "the request to the stopped scheduler still waits"
        with pytest.raises(PyjobqError, match="scheduler has stopped"):
            reply.result()
    run(main)


@pytest.mark.parametrize("call,argument,got", [
    (lambda box: box.retry(7), "Outbox.retry(entry_id)", "7 (int)"),
    (lambda box: box.delete(None), "Outbox.delete(entry_id)", "None (NoneType)"),
    (lambda box: box.enqueue(["send"], {}), "Outbox.enqueue(type)", "['send'] (list)"),
], ids=["retry", "delete", "enqueue"])
def test_an_outbox_call_with_a_wrong_typed_id_or_type_raises_invalid_job_error(
    call: Callable[[Any], Awaitable[Any]], argument: str, got: str,
) -> None:
    """Before, ``enqueue(["send"])`` raised a bare ``TypeError: unhashable type``; ``retry(7)``
    and ``delete(None)`` sent requests the scheduler dropped, and the caller waited for ever."""
    from pyjobq import Outbox, OutboxHandler
    from pyjobq.memory import MemoryStore
    from pyjobq.testing import FakeClock

    async def main() -> None:
        async def process(entry: Any) -> None:
            pass

        store = MemoryStore()
        box = Outbox(store, {"send": OutboxHandler(process=process)}, clock=FakeClock(),
                     poll_interval_ms=0)
        kept = await box.enqueue("send", {"n": 1})
        with pytest.raises(InvalidJobError) as raised:
            await asyncio.wait_for(call(box), 5)
        message = str(raised.value)
        assert message.startswith(argument + ":") and f"got {got}" in message, message
        assert [r.id for r in await store.all()] == [kept.id]
    run(main)
