"""``engine.tasks.start_now``: a task whose first step runs in the caller's event."""

from __future__ import annotations

import asyncio
from typing import Any

from pyjobq.engine.tasks import start_now


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
