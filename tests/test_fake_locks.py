"""LockHub / MemoryLocks keep Web Locks' semantics: a kinder fake would let races through."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyjobq.errors import LockStolen
from pyjobq.memory import LockHub
from pyjobq.testing import run, settle


class Holder:
    """A callback that records when it runs and holds the lock until released."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name
        self.release = asyncio.Event()
        self.lock: Any = "unset"

    async def __call__(self, lock: Any) -> str:
        self.lock = lock
        self.log.append(f"{self.name} got {None if lock is None else lock.mode}")
        await self.release.wait()
        self.log.append(f"{self.name} done")
        return self.name


class Tabs:
    """A lock hub and the one log its holders write, in order."""

    def __init__(self) -> None:
        self.hub, self.log = LockHub(), []

    def request(self, name: str, lock: str = "L", *, client: Any = None,
                **options: Any) -> tuple[Holder, asyncio.Future[str]]:
        """A holder called ``name`` asking for ``lock`` (from a new client unless given one)."""
        holder = Holder(self.log, name)
        return holder, asyncio.ensure_future(
            (client or self.hub.client()).request(lock, holder, **options))

    @staticmethod
    async def finish(holder: Holder, request: asyncio.Future[str]) -> str:
        """Let ``holder`` end its callback; its request's result."""
        holder.release.set()
        return await request


@pytest.fixture
def tabs() -> Tabs:
    """The test's own lock hub and log."""
    return Tabs()


def test_exclusive_excludes_and_queues_fifo(tabs: Tabs) -> None:
    async def main() -> None:
        hub, log = tabs.hub, tabs.log
        (a, ta), (b, tb), (c, tc) = (tabs.request(n) for n in "abc")
        tasks = [ta, tb, tc]
        await settle()
        assert log == ["a got exclusive"]
        assert hub.held() == {"L": "exclusive"}
        c.release.set()  # c finishing its work early must not let it jump the queue
        b.release.set()
        await settle()
        assert log == ["a got exclusive"]
        a.release.set()
        assert await asyncio.gather(*tasks) == ["a", "b", "c"]
        assert log == ["a got exclusive", "a done", "b got exclusive", "b done", "c got exclusive",
                       "c done"]
        assert hub.held() == {}
    run(main())


def test_shared_coexists_and_excludes_exclusive(tabs: Tabs) -> None:
    async def main() -> None:
        hub, log = tabs.hub, tabs.log
        (s1, t1), (s2, t2) = (tabs.request(n, mode="shared") for n in ("s1", "s2"))
        await settle()
        x, tx = tabs.request("x")
        await settle()
        # s3 comes after the waiting exclusive request: FIFO, so it waits too.
        s3, t3 = tabs.request("s3", mode="shared")
        await settle()
        assert log == ["s1 got shared", "s2 got shared"]
        assert hub.held() == {"L": "shared"}
        s1.release.set()
        await settle()
        assert log == ["s1 got shared", "s2 got shared", "s1 done"]
        s2.release.set()
        await settle()
        assert log[-2:] == ["s2 done", "x got exclusive"]
        x.release.set()
        s3.release.set()
        await asyncio.gather(t1, t2, tx, t3)
        assert log[-3:] == ["x done", "s3 got shared", "s3 done"]
    run(main())


def test_different_names_do_not_interact(tabs: Tabs) -> None:
    async def main() -> None:
        hub, log = tabs.hub, tabs.log
        a, ta = tabs.request("a", "L1")
        b, tb = tabs.request("b", "L2")
        await settle()
        assert log == ["a got exclusive", "b got exclusive"]
        assert hub.held() == {"L1": "exclusive", "L2": "exclusive"}
        a.release.set(), b.release.set()
        await asyncio.gather(ta, tb)
    run(main())


@pytest.mark.parametrize("mode, beside", [("exclusive", None), ("shared", "shared")],
                         ids=["exclusive_gets_none_when_taken", "shared_is_granted_beside_shared"])
def test_if_available(mode: str, beside: str | None, tabs: Tabs) -> None:
    async def main() -> None:
        hub, log = tabs.hub, tabs.log
        a, ta = tabs.request("a", mode=mode)
        await settle()
        b = Holder(log, "b")
        b.release.set()
        assert await hub.client().request("L", b, mode=mode, if_available=True) == "b"
        assert (b.lock and b.lock.mode) == beside
        assert log == [f"a got {mode}", f"b got {beside}", "b done"]
        await tabs.finish(a, ta)
        c = Holder(log, "c")
        c.release.set()
        assert await hub.client().request("L", c, mode=mode, if_available=True) == "c"
        assert c.lock.mode == mode and c.lock.name == "L"
        assert hub.held() == {}
    run(main())


def test_steal_rejects_the_victim_while_its_callback_keeps_running(tabs: Tabs) -> None:
    async def main() -> None:
        hub, log = tabs.hub, tabs.log
        victim, tv = tabs.request("victim", mode="shared")
        await settle()
        thief, tt = tabs.request("thief", steal=True)
        await settle()
        with pytest.raises(LockStolen, match="'L' was stolen"):
            await tv
        assert log == ["victim got shared", "thief got exclusive"]
        assert hub.held() == {"L": "exclusive"}
        victim.release.set()  # the victim's callback was not cancelled: it runs on to its end
        await settle()
        assert log[-1] == "victim done"
        assert hub.held() == {"L": "exclusive"}  # and its end releases nothing of the thief's
        assert await tabs.finish(thief, tt) == "thief"
        assert hub.held() == {}
    run(main())


def test_crash_releases_held_and_drops_queued(tabs: Tabs) -> None:
    async def main() -> None:
        hub, log = tabs.hub, tabs.log
        dying, waiting_dying = hub.client(), hub.client()
        a, ta = tabs.request("a", client=dying)
        await settle()
        q, tq = tabs.request("q", client=waiting_dying)
        b, tb = tabs.request("b")
        await settle()
        waiting_dying.crash()
        dying.crash()
        await settle()
        assert log == ["a got exclusive", "b got exclusive"]
        assert ta.cancelled() or isinstance(ta.exception(), asyncio.CancelledError)
        assert tq.done()
        assert await tabs.finish(b, tb) == "b"
        assert hub.held() == {}
    run(main())


def test_held_through_a_client(tabs: Tabs) -> None:
    async def main() -> None:
        hub = tabs.hub
        client = hub.client()
        assert await client.held() == {}
        a, ta = tabs.request("a", client=client, mode="shared")
        await settle()
        assert await hub.client().held() == {"L": "shared"}
        await tabs.finish(a, ta)
        assert await client.held() == {}
    run(main())


def test_callback_error_propagates_and_releases() -> None:
    async def main() -> None:
        hub = LockHub()

        async def boom(lock: Any) -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError, match="boom"):
            await hub.client().request("L", boom)
        assert hub.held() == {}
    run(main())


def test_bad_mode() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="'exclusive' or 'shared'"):
            await LockHub().client().request("L", lambda lock: None, mode="write")
    run(main())


def test_take_if_available_holds_until_released_and_answers_none_when_held() -> None:
    """The run locks' request: as ``locks.js``'s (tests/browser/test_browser_ports.py)."""
    async def main() -> None:
        hub = LockHub()
        ours, theirs = hub.client(), hub.client()
        release = await ours.take_if_available("R")
        assert release is not None
        assert hub.held() == {"R": "exclusive"}
        assert await theirs.take_if_available("R") is None
        release()
        release()
        await settle()
        assert hub.held() == {}
        given_up = theirs.take_if_available("R")
        given_up.cancel()
        await settle()
        assert hub.held() == {}
        held = await theirs.take_if_available("R")
        assert held is not None
        theirs.crash()  # a dead context's run lock goes with it
        await settle()
        assert hub.held() == {}
    run(main())


def test_a_crashed_context_is_granted_nothing_it_asked_for_in_its_last_step() -> None:
    """A request made in the crash's own step (its task had not started) is never granted: a
    dead context holds no lock, as in the browser, where its code never runs again."""
    async def main() -> None:
        hub = LockHub()
        dead = hub.client()
        answer = dead.take_if_available("R")
        asked = asyncio.ensure_future(dead.request("Q", Holder([], "q")))
        dead.crash()
        await settle()
        assert hub.held() == {}
        assert not answer.done() or answer.cancelled() or answer.result() is None
        assert asked.cancelled()
        assert await hub.client().take_if_available("R") is not None
    run(main())
