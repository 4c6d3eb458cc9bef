"""RunLocks (pyjobq/engine/runlocks.py) cut short: a pass cancelled while it takes run locks
(a crash mid-pass, the lease revoked) leaves no run lock held and no error in the loop, whether
its ask was granted a moment before the cancellation, not yet answered, or taken ahead."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import pytest

from pyjobq.core.status import Status
from pyjobq.core.view import Entry
from pyjobq.engine.runlocks import RunLocks
from pyjobq.memory import LockHub


class CancelAtGrant:
    """A lock context that cancels ``victim`` just after a grant's callback ran its first step
    (the ask is answered; the task awaiting it has not resumed yet)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.victim: asyncio.Task[Any] | None = None

    async def held(self) -> dict[str, str]:
        return dict(await self.inner.held())

    async def request(self, name: str, callback: Callable[[Any], Awaitable[None]],
                      **options: Any) -> Any:
        async def first_step_then_cancel(lock: Any) -> None:
            task = asyncio.ensure_future(callback(lock))
            await asyncio.sleep(0)
            if self.victim is not None and lock:
                self.victim.cancel()
                self.victim = None
            await task
        return await self.inner.request(name, first_step_then_cancel, **options)


def entries() -> list[Entry]:
    return [Entry("a", "x", Status.PENDING, 0.0), Entry("b", "y", Status.PENDING, 0.0)]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.mark.parametrize("ahead", [False, True], ids=["asked-now", "taken-ahead"])
def test_a_take_cancelled_at_a_grant_lets_every_lock_go(ahead: bool) -> None:
    async def main() -> None:
        hub = LockHub()
        locks = CancelAtGrant(hub.client())
        run_locks = RunLocks(locks, "q", enabled=True, spawn=asyncio.ensure_future,
                             wake=lambda: None)
        if ahead:
            run_locks.prefetch(entries()[0])
        take = asyncio.ensure_future(run_locks.take(entries()))
        locks.victim = take
        with pytest.raises(asyncio.CancelledError):
            await take
        await settle()
        assert hub.held() == {}
    asyncio.run(main())


def test_a_take_cancelled_before_its_ask_is_answered_lets_the_lock_go_once_granted() -> None:
    async def main() -> None:
        errors: list[str] = []
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: errors.append(str(context["message"])))
        hub = LockHub()
        run_locks = RunLocks(hub.client(), "q", enabled=True, spawn=asyncio.ensure_future,
                             wake=lambda: None)
        take = asyncio.ensure_future(run_locks.take(entries()[:1]))
        await asyncio.sleep(0)  # the request is spawned, not granted yet
        take.cancel()
        await settle()
        assert hub.held() == {} and errors == []
    asyncio.run(main())


class LockManagerOfItsOwn:
    """An application's lock manager written before ``take_if_available`` (docs/api.md, "Ports"):
    ``request``, ``held`` and ``waiting`` only."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def request(self, name: str, callback: Callable[[Any], Awaitable[Any]],
                      **options: Any) -> Any:
        return await self.inner.request(name, callback, **options)

    async def held(self) -> dict[str, str]:
        return dict(await self.inner.held())

    async def waiting(self) -> set[str]:
        return set(await self.inner.waiting())


def test_a_lock_manager_without_take_if_available_still_takes_run_locks() -> None:
    async def main() -> None:
        hub = LockHub()
        ours = RunLocks(LockManagerOfItsOwn(hub.client()), "q", enabled=True,
                        spawn=asyncio.ensure_future, wake=lambda: None)
        theirs = RunLocks(LockManagerOfItsOwn(hub.client()), "q", enabled=True,
                          spawn=asyncio.ensure_future, wake=lambda: None)
        taken = await ours.take(entries())
        assert sorted(taken) == ["a", "b"]
        assert hub.held() == {ours.name(e): "exclusive" for e in entries()}
        assert await theirs.take(entries()) == {}
        for release in taken.values():
            release()
        await settle()
        assert hub.held() == {}
        assert sorted(await theirs.take(entries())) == ["a", "b"]
    asyncio.run(main())
