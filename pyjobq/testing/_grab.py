"""The processor lease's grab on an in-memory lock manager: :func:`grab_on`."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from ..core.errors import LockStolen
from ..core.ports import LockManager
from ..engine.lease import Grab


def grab_on(locks: LockManager, *, thawed: Callable[[], Awaitable[None]] | None = None) -> Grab:
    """A :class:`~pyjobq.engine.lease.Grab` on any :class:`~pyjobq.core.ports.LockManager` (the
    simulation's tabs, CPython tests; a browser page grabs through Web Locks' own steal).
    ``thawed()``: awaited before a steal is reported — a frozen context learns that its lock
    was taken only once it runs again."""

    def grab(name: str, on_granted: Callable[[Callable[[], None]], None], *, steal: bool = False,
             on_stolen: Callable[[], None] | None = None) -> Callable[[], None]:
        loop = asyncio.get_event_loop()
        let_go: asyncio.Future[None] = loop.create_future()
        cancelled = False

        def release() -> None:
            if not let_go.done():
                let_go.set_result(None)

        async def hold(_lock: Any) -> None:
            if cancelled:
                return
            on_granted(release)
            await let_go

        async def request() -> None:
            try:
                await locks.request(name, hold, steal=steal)
            except LockStolen:
                release()  # ends the callback the lock manager left behind
                if thawed is not None:
                    await thawed()
                if on_stolen is not None and not cancelled:
                    on_stolen()

        task = asyncio.ensure_future(request())

        def cancel() -> None:
            nonlocal cancelled
            cancelled = True
            task.cancel()

        return cancel

    return grab
