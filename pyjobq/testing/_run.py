"""One way to run an async test on CPython: ``run()``, with one set of guarantees."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable

__all__ = ["run", "settle", "UnretrievedError"]


class UnretrievedError(AssertionError):
    """The event loop saw exceptions nobody retrieved (a task that failed unawaited, a callback
    that raised). ``messages`` holds the loop's report of each, in order."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("the event loop saw exceptions nobody retrieved:\n  "
                         + "\n  ".join(messages))
        #: The loop's message for each one (with the exception's repr when it had one).
        self.messages = messages


async def settle(limit: int = 500) -> None:
    """Let every ready callback and task run, until nothing is ready (at most ``limit`` turns).

    pyjobq's fakes (:class:`~pyjobq.testing.FakeClock`, the memory store, locks, channel and
    links) deliver through ``call_soon`` and use no loop timers, so "nothing ready" means the
    simulated world is quiet: every message delivered, every pass that could run has run.
    Time only moves when a test moves the clock (:meth:`World.advance`).
    """
    loop = asyncio.get_running_loop()
    for _ in range(limit):
        await asyncio.sleep(0)
        # CPython's ready queue: the one way to know the loop is idle without a timer.
        if not loop._ready:  # type: ignore[attr-defined]
            return


def run(main: Callable[[], Awaitable[Any]] | Awaitable[Any], *, timeout_s: float = 10.0) -> Any:
    """Run ``main`` in a fresh event loop, as a test should; returns what it returned.

    Guarantees, the same for every test that uses it:

    - **A timeout guard.** ``main`` is cancelled after ``timeout_s`` seconds of wall-clock time
      and the test fails with ``TimeoutError``: a hang fails instead of stalling the suite. It
      is a guard only: simulated time (:class:`~pyjobq.testing.FakeClock`) never waits for it.
    - **Unretrieved exceptions fail the test.** After ``main`` returns, the loop is settled
      (:func:`settle`) and any exception the loop reported but nobody retrieved — a task that
      died unawaited, a callback that raised — raises :class:`UnretrievedError`.
    - **The loop is closed** afterwards, with its remaining tasks cancelled (``asyncio.run``).

    Args:
        main: an ``async def`` function taking no arguments, or a coroutine.
        timeout_s: the wall-clock guard, in seconds.

    Raises:
        TimeoutError: ``main`` took longer than ``timeout_s``.
        UnretrievedError: the loop saw an exception nobody retrieved.
    """
    seen: list[str] = []

    def report(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        seen.append(context["message"] + (f": {exc!r}" if exc is not None else ""))

    async def wrapper() -> Any:
        asyncio.get_running_loop().set_exception_handler(report)
        awaitable = main if inspect.isawaitable(main) else main()
        result = await asyncio.wait_for(awaitable, timeout_s)
        await settle()
        return result

    result = asyncio.run(wrapper())
    if seen:
        raise UnretrievedError(seen)
    return result
