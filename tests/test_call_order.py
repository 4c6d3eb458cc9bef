"""Effects in call order: a housekeeping call takes effect in the order it was called, awaited
or not, and each of its read-modify-writes is one transaction.

The worlds whose store yields (``MemoryStore(yields=...)``) let other requests run between two
store calls of one request, as IndexedDB does; a plain memory store never yields, so it could
not show a read-then-delete losing a change made in between.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from helpers import Server
from pyjobq.core.status import Status
from pyjobq.memory import MemoryStore
from pyjobq.testing import Tab, World, record, run, settle


def _yielding_world(turns: int = 2) -> World:
    """A world whose store yields as IndexedDB does (set before any tab opens: tabs share it)."""
    world = World()
    world.store = MemoryStore(clock=world.clock, yields=turns)
    return world


def _yielding_tab(*answers: Any, turns: int = 2) -> tuple[World, Server, Tab]:
    """A tab on :func:`_yielding_world`, its transport ``Server(*answers)``."""
    world, server = _yielding_world(turns), Server(*answers)
    return world, server, world.open_tab(transport=server)


async def _failed(world: World, *ids: str, group: str | None = None) -> None:
    await world.store.add([record(i, status="failed", group=group, error="boom", attempts=5)
                           for i in ids])


def test_a_delete_group_not_awaited_takes_effect_before_an_enqueue_made_after_it() -> None:
    """The debounce recipe as a page writes it: ``create_task(delete_group(...))`` and then the
    new save. Before, the task's request went out when the task first ran — after the new
    save's enqueue was flushed — and deleted the new save with the old ones."""
    async def main() -> None:
        world = World()
        server = Server()
        tab = world.open_tab(transport=server)
        old = tab.queue.enqueue_fetch("PUT", "/doc", {"v": 1}, group="doc", delay_ms=5_000)
        await settle()
        deleting = asyncio.create_task(tab.queue.delete_group("doc"))
        new = tab.queue.enqueue_fetch("PUT", "/doc", {"v": 2}, group="doc", delay_ms=5_000)
        assert await deleting == 1
        assert (await old.done).code == "deleted"
        await world.advance(5_000)
        assert (await asyncio.wait_for(new.done, 5)).status is Status.DONE
        assert [body for _, _, body in server.calls] == [{"v": 2}]
    run(main)


class _Spy:
    """A link that notes the type of each message sent through it, then sends it."""

    def __init__(self, link: Any) -> None:
        self.link = link
        self.sent: list[str] = []

    def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message["type"])
        self.link.send(message)

    def subscribe(self, callback: Any) -> Any:
        return self.link.subscribe(callback)


def test_each_housekeeping_call_sends_its_request_at_the_call() -> None:
    """Every housekeeping call's request is on its way when the call returns: the coroutine it
    returns, awaited (or handed to ``create_task``) later, only waits for the reply."""
    async def main() -> None:
        world = World()
        tab = world.open_tab()
        await _failed(world, "f1", "f2", "f3", group="g")
        persistent = tab.queue.persistent
        volatile = tab.queue._volatile()
        persistent.requests_link = spy = _Spy(persistent.requests_link)
        volatile.requests_link = volatile_spy = _Spy(volatile.requests_link)
        calls = [tab.queue.retry_job("f1"), tab.queue.cancel_job("f1"), tab.queue.delete_job("f2"),
                 tab.queue.delete_group("g"), tab.queue.retry_all(), tab.queue.cleanup_old(),
                 tab.queue.query_all(), tab.queue.suspend_type("t"), tab.queue.resume_type("t")]
        assert spy.sent == ["retry_job", "cancel_job", "delete_job", "delete_group", "retry_all",
                            "cleanup_old", "query_all"]
        assert volatile_spy.sent == ["retry_all", "query_all", "suspend_type", "resume_type"]
        assert all(inspect.iscoroutine(c) for c in calls)
        assert await asyncio.gather(*calls) == [True, True, True, 2, 0, 0, [], None, None]
    run(main)


@pytest.mark.parametrize("turns", [1, 3])
def test_a_delete_then_a_retry_of_one_job_apply_in_call_order_on_a_store_that_yields(
        turns: int) -> None:
    """``delete_job(x)`` then ``retry_job(x)``, not awaited in between. Before, the delete read
    the record in one transaction and deleted it in another: the retry landed between them,
    answered True, and was lost with the record (and a run could start on it)."""
    async def main() -> None:
        world, _, tab = _yielding_tab(turns=turns)
        await _failed(world, "x")
        deleted = tab.queue.delete_job("x")
        retried = tab.queue.retry_job("x")
        assert await asyncio.gather(deleted, retried) == [True, False]
        await settle()
        assert await world.store.all() == []
    run(main)


def test_a_delete_group_then_a_retry_apply_in_call_order_on_a_store_that_yields() -> None:
    async def main() -> None:
        world, _, tab = _yielding_tab()
        await _failed(world, "a", "b", group="doc")
        deleted = tab.queue.delete_group("doc")
        retried = tab.queue.retry_job("b")
        assert await asyncio.gather(deleted, retried) == [2, False]
        await settle()
        assert await world.store.all() == []
    run(main)


def test_a_retry_then_a_delete_both_apply_on_a_store_that_yields() -> None:
    """The other order: the retry is first, so it applies, and the delete then ends the job
    whatever the retry started; nothing is sent twice, nothing is left."""
    async def main() -> None:
        world, server, tab = _yielding_tab("hold")
        await _failed(world, "x")
        retried = tab.queue.retry_job("x")
        deleted = tab.queue.delete_job("x")
        assert await asyncio.gather(retried, deleted) == [True, True]
        await settle()
        assert await world.store.all() == [] and len(server.calls) <= 1
    run(main)


def test_a_retry_all_then_a_cancel_apply_in_call_order_on_a_store_that_yields() -> None:
    """``retry_all()`` then ``cancel_job(x)``. Before, retry_all read the failed ids in one
    transaction and revived them in another: the cancel landed between, found x still failed
    and answered False, and x was revived — the later call lost to the earlier one."""
    async def main() -> None:
        world, _, tab = _yielding_tab("hold", "hold")
        await _failed(world, "x", "y")
        retried = tab.queue.retry_all()
        cancelled = tab.queue.cancel_job("x")
        assert await asyncio.gather(retried, cancelled) == [2, True]
        await settle()
        assert (await world.store.get("x")).status is Status.CANCELLED
    run(main)
