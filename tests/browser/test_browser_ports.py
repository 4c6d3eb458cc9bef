"""Web Locks and BroadcastChannel behind pyjobq's ports, in real Chromium."""

from pytest_pyodide import run_in_pyodide


@run_in_pyodide(packages=["pyjobq"])
async def test_web_locks_exclusive_shared_steal_and_held(selenium):
    """Both ways a request is made: through locks.js (one call, one long-lived proxy), and from
    Python where a Content-Security-Policy forbids evaluating it."""
    import asyncio

    from pyjobq.browser import ports
    from pyjobq.browser.ports import WebLocks
    from pyjobq.core.ports import LockStolen

    async def reach(what, want):
        """Wait until ``await what()`` is ``want`` (the lock manager's state), at most ~10 s."""
        for _ in range(500):
            if await what() == want:
                return
            await asyncio.sleep(0.02)
        assert await what() == want

    async def contract(locks, prefix):
        order = []
        release = asyncio.get_event_loop().create_future()

        async def hold(lock):
            order.append("held")
            await release
            order.append("victim kept running")
            return "result"

        victim = asyncio.ensure_future(locks.request(prefix + "L", hold))
        await asyncio.sleep(0.05)
        assert await locks.held() == {prefix + "L": "exclusive"}

        # ifAvailable on a held lock hands the callback None.
        async def probe(lock):
            return lock

        assert await locks.request(prefix + "L", probe, if_available=True) is None

        # steal: the victim's request raises LockStolen while its callback keeps running.
        async def thief(lock):
            return "stolen"

        assert await locks.request(prefix + "L", thief, steal=True) == "stolen"
        try:
            await victim
        except LockStolen:
            order.append("victim told")
        release.set_result(None)
        await asyncio.sleep(0.05)
        assert order == ["held", "victim told", "victim kept running"]

        # shared requests coexist.
        gate = asyncio.get_event_loop().create_future()

        async def shared(lock):
            await gate
            return lock is not None

        a = asyncio.ensure_future(locks.request(prefix + "S", shared, mode="shared"))
        b = asyncio.ensure_future(locks.request(prefix + "S", shared, mode="shared"))
        await asyncio.sleep(0.05)
        assert await locks.held() == {prefix + "S": "shared"}
        gate.set_result(None)
        assert await a is True and await b is True
        assert await locks.held() == {}

        # A holder that raises: its error is the request's, and the lock is let go.
        async def broken(lock):
            raise ValueError("the holder failed")

        try:
            await locks.request(prefix + "E", broken)
        except ValueError as exc:
            assert str(exc) == "the holder failed"
        else:
            raise AssertionError("the holder's error was lost")
        assert await locks.held() == {}

        # A request given up while it waits in line: granted later, it is let go at once.
        gate_c = asyncio.get_event_loop().create_future()

        async def blocker(lock):
            await gate_c

        async def never(lock):
            raise AssertionError("the holder of a request given up ran")

        first = asyncio.ensure_future(locks.request(prefix + "C", blocker))
        await reach(locks.held, {prefix + "C": "exclusive"})
        queued = asyncio.ensure_future(locks.request(prefix + "C", never))
        await reach(locks.waiting, {prefix + "C"})  # in line behind the holder
        queued.cancel()
        await asyncio.sleep(0)
        gate_c.set_result(None)
        await first
        await reach(locks.held, {})

        # take_if_available (the run locks): a free lock is held until its release is called
        # (again: nothing more); a held one answers None; an answer given up before it came
        # lets the lock go the moment it is granted.
        release = await locks.take_if_available(prefix + "T")
        assert callable(release)
        assert await locks.held() == {prefix + "T": "exclusive"}
        assert await locks.take_if_available(prefix + "T") is None
        release()
        release()
        await reach(locks.held, {})
        given_up = locks.take_if_available(prefix + "T")
        given_up.cancel()
        await asyncio.sleep(0.05)
        await reach(locks.held, {})
        again = await locks.take_if_available(prefix + "T")
        assert again is not None
        again()
        await reach(locks.held, {})

    with_helper = WebLocks()
    assert with_helper._helper is not None
    await contract(with_helper, "js-")

    # Two WebLocks of one context (a page has several): each request's lock is its own — a
    # token repeated between them let one's release end the other's hold, and left its own
    # lock held for ever (the Service Worker's run lock, seen in tests/e2e/service_worker).
    first_gate, second_gate = (asyncio.get_event_loop().create_future() for _ in range(2))

    async def until(gate):
        await gate

    one, two = WebLocks(), WebLocks()
    held_one = asyncio.ensure_future(one.request("two-A", lambda lock: until(first_gate)))
    held_two = asyncio.ensure_future(two.request("two-B", lambda lock: until(second_gate)))
    await reach(one.held, {"two-A": "exclusive", "two-B": "exclusive"})
    first_gate.set_result(None)
    await held_one
    await reach(one.held, {"two-B": "exclusive"})
    second_gate.set_result(None)
    await held_two
    await reach(one.held, {})
    with ports.LOCKS_JS.refused():
        from_python = WebLocks()
        assert from_python._helper is None
        await contract(from_python, "py-")


@run_in_pyodide(packages=["pyjobq"])
async def test_broadcast_channel_reaches_other_objects_and_rejects_foreign_data(selenium):
    import asyncio

    import js

    from pyjobq.browser.ports import BroadcastChannelPort

    a, b = BroadcastChannelPort("ports-test"), BroadcastChannelPort("ports-test")
    got = []
    unsubscribe = b.subscribe(got.append)
    a.post({"v": 1, "type": "wake"})
    # Foreign senders: an object and text that is not JSON both arrive as None.
    raw = js.BroadcastChannel.new("ports-test")
    raw.postMessage("not json {")
    raw.postMessage(js.Object.new())
    for _ in range(50):
        if len(got) >= 3:
            break
        await asyncio.sleep(0.01)
    assert got == [{"v": 1, "type": "wake"}, None, None]
    unsubscribe()
    a.post({"v": 1, "type": "wake"})
    await asyncio.sleep(0.05)
    assert len(got) == 3
    a.close(), b.close(), raw.close()
    try:
        a.post({"v": 1, "type": "wake"})
    except Exception as exc:
        assert "InvalidStateError" in str(exc)
    else:
        raise AssertionError("posting on a closed channel must throw")
