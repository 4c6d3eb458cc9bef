"""``pyjobq.loop``: ``start_now`` (a task whose first step runs in the caller's event) and
``again_doubling`` (a try repeated while its failures pass)."""

from __future__ import annotations

import asyncio
from typing import Any

from pyjobq.loop import start_now


async def _steps(log: list[str]) -> str:
    log.append("first step")
    await asyncio.sleep(0)
    log.append("second step")
    return "done"


def test_the_first_step_runs_before_start_now_returns_and_the_rest_later() -> None:
    async def main() -> None:
        log: list[str] = []
        task = start_now(_steps(log))
        log.append("caller")
        assert await task == "done"
        assert log == ["first step", "caller", "second step"]
    asyncio.run(main())


def test_a_hosts_task_factory_still_sees_the_task_and_it_starts_now() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        seen: list[asyncio.Future[Any]] = []

        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
            task = asyncio.Task(coro, loop=loop, **kw)
            seen.append(task)
            return task

        loop.set_task_factory(factory)  # type: ignore[arg-type]
        log: list[str] = []
        task = start_now(_steps(log))
        assert seen == [task] and log == ["first step"]
        assert await task == "done"
    asyncio.run(main())


def test_a_factory_that_takes_no_eager_start_gets_an_ordinary_task() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()

        def factory(loop: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Task[Any]:
            return asyncio.Task(coro, loop=loop)

        loop.set_task_factory(factory)  # type: ignore[arg-type]
        log: list[str] = []
        task = start_now(_steps(log))
        assert log == []  # its first step waits for the next turn
        assert await task == "done" and log == ["first step", "second step"]
    asyncio.run(main())


def test_soon_runs_what_it_was_given_together_in_order_in_one_step() -> None:
    from pyjobq import loop as tasks

    async def main() -> None:
        loop = asyncio.get_running_loop()
        reported: list[BaseException] = []
        loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx["exception"]))
        seen: list[str] = []

        def broken() -> None:
            raise ValueError("a broken follow-up")

        def later() -> None:
            seen.append("second")
            tasks.soon(lambda: seen.append("given while the first ran: next time"))

        tasks.soon(lambda: seen.append("first"))
        tasks.soon(broken)
        tasks.soon(later)
        assert seen == []  # soon, not now
        await asyncio.sleep(0)
        assert seen == ["first", "second"] and [str(e) for e in reported] == ["a broken follow-up"]
        await asyncio.sleep(0)
        assert seen[-1] == "given while the first ran: next time"
    asyncio.run(main())


def test_soon_wakes_through_the_waker_a_page_sets_once_per_run() -> None:
    """On a page the waker is a microtask (pyjobq/browser/page_main.py): it is asked once for
    everything given before it runs, and runs it all."""
    from pyjobq import loop as tasks

    woken: list[int] = []

    async def main() -> None:
        tasks.use_waker(lambda: woken.append(1))
        try:
            seen: list[int] = []
            for i in range(3):
                tasks.soon(lambda i=i: seen.append(i))
            assert woken == [1] and seen == []
            tasks.run_soon()  # what the microtask calls
            assert seen == [0, 1, 2]
            tasks.soon(lambda: seen.append(3))
            assert woken == [1, 1]
            tasks.run_soon()
            assert seen == [0, 1, 2, 3]
        finally:
            tasks.use_waker(None)
    asyncio.run(main())


def test_a_spawned_task_that_ends_in_its_first_step_is_reaped_there() -> None:
    import logging

    from pyjobq.loop import TaskSet

    async def main() -> None:
        spawned = TaskSet(logging.getLogger("pyjobq"), "failed")

        async def quick() -> str:
            return "done at once"

        task = spawned.spawn(quick(), now=True)
        assert task.done() and task.result() == "done at once" and len(spawned) == 0
        waits = spawned.spawn(asyncio.sleep(0), now=True)
        assert not waits.done() and len(spawned) == 1
        await waits
        await asyncio.sleep(0)
        assert len(spawned) == 0
    asyncio.run(main())


def test_soon_runs_each_call_in_the_context_it_was_given_in() -> None:
    """Found by review: a batch ran every call in the first poster's context — in the test kit
    a tab's in-tab messages ran as another tab's code, and died with it."""
    import contextvars

    from pyjobq import loop as tasks

    who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")
    seen: list[str] = []

    async def main() -> None:
        for name in ("a", "b"):
            contextvars.copy_context().run(
                lambda n=name: (who.set(n), tasks.soon(lambda: seen.append(who.get()))))
        await asyncio.sleep(0)
        assert seen == ["a", "b"]
    asyncio.run(main())


def test_again_doubling_waits_out_passing_failures_doubling_to_the_cap_and_raises_others() -> None:
    from pyjobq.loop import again_doubling
    from pyjobq.testing import FakeClock

    async def main() -> None:
        clock = FakeClock()
        start = clock.now()
        tries: list[float] = []
        said: list[tuple[str, float]] = []

        async def attempt() -> str:
            tries.append(clock.now() - start)
            if len(tries) < 5:
                raise OSError(f"bad moment {len(tries)}")
            return "stored"

        task = asyncio.ensure_future(again_doubling(
            clock, attempt, first_ms=100, max_ms=300, passes=lambda exc: isinstance(exc, OSError),
            said=lambda exc, wait: said.append((str(exc), wait)), failed=OSError("first")))
        while not task.done():
            await asyncio.sleep(0)
            at = clock.next_timer_at()
            if at is not None:
                clock.advance(at - clock.now())
        assert task.result() == "stored"
        # The failure already had is waited out first; each wait doubles up to the cap.
        assert tries == [100, 300, 600, 900, 1200]
        assert [wait for _, wait in said] == [100, 200, 300, 300, 300]
        assert said[0][0] == "first"

        async def refused() -> str:
            raise ValueError("not the store's")

        try:
            await again_doubling(clock, refused, first_ms=100, max_ms=300,
                                 passes=lambda exc: isinstance(exc, OSError),
                                 said=lambda exc, wait: None)
        except ValueError as exc:
            assert str(exc) == "not the store's"
        else:
            raise AssertionError("a failure that does not pass is raised")
    asyncio.run(main())
