"""LockHub / FakeLocks keep Web Locks' semantics: a kinder fake would let races through."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyjobq.core.ports import LockStolen
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


def test_exclusive_excludes_and_queues_fifo() -> None:
    async def main() -> None:
        hub, log = LockHub(), []
        a, b, c = (Holder(log, n) for n in "abc")
        tasks = [asyncio.ensure_future(hub.client().request("L", h)) for h in (a, b, c)]
        await settle()
        assert log == ["a got exclusive"]
        assert hub.held() == {"L": "exclusive"}
        c.release.set()  # c finishing its work early must not let it jump the queue
        b.release.set()
        await settle()
        assert log == ["a got exclusive"]
        a.release.set()
        assert await asyncio.gather(*tasks) == ["a", "b", "c"]
        assert log == ["a got exclusive", "a done", "b got exclusive", "b done", "c got exclusive", "c done"]
        assert hub.held() == {}
    run(main())


def test_shared_coexists_and_excludes_exclusive() -> None:
    async def main() -> None:
        hub, log = LockHub(), []
        s1, s2, x, s3 = Holder(log, "s1"), Holder(log, "s2"), Holder(log, "x"), Holder(log, "s3")
        t1 = asyncio.ensure_future(hub.client().request("L", s1, mode="shared"))
        t2 = asyncio.ensure_future(hub.client().request("L", s2, mode="shared"))
        await settle()
        tx = asyncio.ensure_future(hub.client().request("L", x))
        await settle()
        # s3 comes after the waiting exclusive request: FIFO, so it waits too.
        t3 = asyncio.ensure_future(hub.client().request("L", s3, mode="shared"))
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


def test_different_names_do_not_interact() -> None:
    async def main() -> None:
        hub, log = LockHub(), []
        a, b = Holder(log, "a"), Holder(log, "b")
        ta = asyncio.ensure_future(hub.client().request("L1", a))
        tb = asyncio.ensure_future(hub.client().request("L2", b))
        await settle()
        assert log == ["a got exclusive", "b got exclusive"]
        assert hub.held() == {"L1": "exclusive", "L2": "exclusive"}
        a.release.set(), b.release.set()
        await asyncio.gather(ta, tb)
    run(main())


def test_if_available_gets_none_when_taken() -> None:
    async def main() -> None:
        hub, log = LockHub(), []
        a, b = Holder(log, "a"), Holder(log, "b")
        ta = asyncio.ensure_future(hub.client().request("L", a))
        await settle()
        b.release.set()
        assert await hub.client().request("L", b, if_available=True) == "b"
        assert b.lock is None
        assert log == ["a got exclusive", "b got None", "b done"]
        a.release.set()
        await ta
        c = Holder(log, "c")
        c.release.set()
        assert await hub.client().request("L", c, if_available=True) == "c"
        assert c.lock.mode == "exclusive" and c.lock.name == "L"
    run(main())


def test_shared_if_available_is_granted_beside_shared() -> None:
    async def main() -> None:
        hub, log = LockHub(), []
        a, b = Holder(log, "a"), Holder(log, "b")
        ta = asyncio.ensure_future(hub.client().request("L", a, mode="shared"))
        await settle()
        b.release.set()
        await hub.client().request("L", b, mode="shared", if_available=True)
        assert log == ["a got shared", "b got shared", "b done"]
        a.release.set()
        await ta
    run(main())


def test_steal_rejects_the_victim_while_its_callback_keeps_running() -> None:
    async def main() -> None:
        hub, log = LockHub(), []
        victim, thief = Holder(log, "victim"), Holder(log, "thief")
        tv = asyncio.ensure_future(hub.client().request("L", victim, mode="shared"))
        await settle()
        tt = asyncio.ensure_future(hub.client().request("L", thief, steal=True))
        await settle()
        with pytest.raises(LockStolen, match="'L' was stolen"):
            await tv
        assert log == ["victim got shared", "thief got exclusive"]
        assert hub.held() == {"L": "exclusive"}
        victim.release.set()  # the victim's callback was not cancelled: it runs on to its end
        await settle()
        assert log[-1] == "victim done"
        assert hub.held() == {"L": "exclusive"}  # and its end releases nothing of the thief's
        thief.release.set()
        assert await tt == "thief"
        assert hub.held() == {}
    run(main())


def test_crash_releases_held_and_drops_queued() -> None:
    async def main() -> None:
        hub, log = LockHub(), []
        dying, waiting_dying, other = hub.client(), hub.client(), hub.client()
        a, q, b = Holder(log, "a"), Holder(log, "q"), Holder(log, "b")
        ta = asyncio.ensure_future(dying.request("L", a))
        await settle()
        tq = asyncio.ensure_future(waiting_dying.request("L", q))
        tb = asyncio.ensure_future(other.request("L", b))
        await settle()
        waiting_dying.crash()
        dying.crash()
        await settle()
        assert log == ["a got exclusive", "b got exclusive"]
        assert ta.cancelled() or isinstance(ta.exception(), asyncio.CancelledError)
        assert tq.done()
        b.release.set()
        assert await tb == "b"
        assert hub.held() == {}
    run(main())


def test_held_through_a_client() -> None:
    async def main() -> None:
        hub, log = LockHub(), []
        client = hub.client()
        assert await client.held() == {}
        a = Holder(log, "a")
        ta = asyncio.ensure_future(client.request("L", a, mode="shared"))
        await settle()
        assert await hub.client().held() == {"L": "shared"}
        a.release.set()
        await ta
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
