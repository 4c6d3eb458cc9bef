"""A Pythonic abort signal handed to every executor."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Generator

from .core.errors import Interrupted


class AbortSignal:
    """Tells an executor to stop: a suspended type, a stolen yield lock, a dropped run.

    Check :attr:`aborted`, call :meth:`raise_if_aborted` between steps, or
    ``await signal`` (or :meth:`wait`) in a race with the work. An executor that
    stops on request raises :class:`~pyjobq.Interrupted`, which gives the
    attempt back.
    """

    def __init__(self) -> None:
        #: Set by an executor that stops by itself when aborted (the built-in ``fetch`` when its
        #: transport takes the signal): a dropped run is then waited for, up to a grace
        #: (``pyjobq.core.messages.ABANDON_GRACE_MS``), instead of having its task cancelled at
        #: once — so a request still on the wire is known to have ended before the job's type
        #: runs its next job.
        self.heeded = False
        self.aborted = False
        self.reason: Any = None
        self._callbacks: list[Callable[[Any], None]] = []
        self._waiters: list[asyncio.Future[Any]] = []

    def abort(self, reason: Any = "aborted") -> None:
        if self.aborted:
            return
        self.aborted = True
        self.reason = reason
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(reason)
        self._waiters.clear()
        for callback in self._callbacks:
            callback(reason)
        self._callbacks.clear()

    def add_callback(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback(reason)`` on abort (at once if already aborted)."""
        if self.aborted:
            callback(self.reason)
        else:
            self._callbacks.append(callback)

    def raise_if_aborted(self) -> None:
        """Raise :class:`~pyjobq.Interrupted` carrying the reason if the signal fired."""
        if self.aborted:
            raise Interrupted(f"aborted: {self.reason}")

    async def wait(self) -> Any:
        """Return the reason once aborted."""
        if self.aborted:
            return self.reason
        waiter = asyncio.get_event_loop().create_future()
        self._waiters.append(waiter)
        return await waiter

    def __await__(self) -> Generator[Any, None, Any]:
        return self.wait().__await__()
