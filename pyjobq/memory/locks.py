"""In-memory Web Locks: :class:`LockHub`, the origin's lock manager, and its
:class:`MemoryLocks` contexts (exclusive, shared, ``ifAvailable``, ``steal``, in request
order)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import (
    Any,
    Awaitable,
    Callable,
)

from ..core.errors import LockStolen
from ..core.ports import (
    LockManagerBase,
    Release,
)
from ..loop import TaskSet, take_by_request

log = logging.getLogger("pyjobq")
"""The library's logger (``"pyjobq"``), silent unless the application configures logging."""


@dataclass(eq=False)
class _Request:
    name: str
    mode: str
    client: "MemoryLocks"
    granted: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    stolen: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    task: asyncio.Task[Any] | None = None


class MemoryLock:
    """What a granted :class:`MemoryLocks` request's callback receives: the lock's name and mode
    (the Web Locks API's ``Lock``)."""

    def __init__(self, name: str, mode: str) -> None:
        self.name = name
        self.mode = mode


class LockHub:
    """The origin's lock manager: grants in request order, exclusive vs shared, with steal."""

    def __init__(self) -> None:
        self._queue: dict[str, list[_Request]] = {}
        self._held: dict[str, list[_Request]] = {}

    def client(self, *, thawed: Callable[[], Awaitable[None]] | None = None) -> "MemoryLocks":
        """One more lock context; ``thawed``: see :class:`MemoryLocks`."""
        return MemoryLocks(self, thawed=thawed)

    def held(self) -> dict[str, str]:
        return {name: holders[0].mode for name, holders in self._held.items() if holders}

    def _grantable(self, req: _Request, *, ignore_queue: bool = False) -> bool:
        holders = self._held.get(req.name, [])
        if req.mode == "exclusive":
            if holders:
                return False
        elif any(h.mode == "exclusive" for h in holders):
            return False
        if ignore_queue:
            return not self._queue.get(req.name)
        return True

    def _grant(self, req: _Request) -> None:
        self._held.setdefault(req.name, []).append(req)
        if not req.granted.done():
            req.granted.set_result(None)

    def _process(self, name: str) -> None:
        queue = self._queue.get(name, [])
        while queue:
            head = queue[0]
            if not self._grantable(head):
                break
            queue.pop(0)
            self._grant(head)
            if head.mode == "exclusive":
                break

    def _release(self, req: _Request) -> None:
        holders = self._held.get(req.name, [])
        if req in holders:
            holders.remove(req)
        queue = self._queue.get(req.name, [])
        if req in queue:
            queue.remove(req)
        self._process(req.name)

    def _steal(self, req: _Request) -> None:
        for victim in self._held.get(req.name, []):
            if not victim.stolen.done():
                victim.stolen.set_result(None)
        self._held[req.name] = []
        self._grant(req)


class MemoryLocks(LockManagerBase):
    """One context's ``navigator.locks`` (a tab or its worker), on a shared :class:`LockHub`.

    ``thawed()``, if given, is awaited between a grant and its callback: a frozen page is granted
    a lock it waited for (it holds it from then on), but its callback runs only once the page
    runs again, as in Chromium."""

    def __init__(self, hub: LockHub, *,
                 thawed: Callable[[], Awaitable[None]] | None = None) -> None:
        self._hub = hub
        # Insertion-ordered (not a set, whose order follows object addresses): a crash releases
        # in request order, so a simulated seed replays exactly.
        self._mine: dict[_Request, None] = {}
        self._thawed = thawed
        self._takes = TaskSet(log, "pyjobq: an in-memory lock request failed")
        #: Set by :meth:`crash`: a dead context asks for nothing more.
        self._crashed = False

    async def held(self) -> dict[str, str]:
        return self._hub.held()

    async def waiting(self) -> set[str]:
        return {name for name, queue in self._hub._queue.items() if queue}

    async def _request(self, name: str, callback: Callable[[Any], Awaitable[Any]], mode: str,
                       if_available: bool, steal: bool) -> Any:
        if mode not in ("exclusive", "shared"):
            raise ValueError(f"lock mode must be 'exclusive' or 'shared', not {mode!r}")
        if self._crashed:  # a task of the dead context that had not started yet: it never asks
            raise asyncio.CancelledError(f"lock {name!r}: its context crashed")
        hub = self._hub
        req = _Request(name, mode, self)
        if steal:
            hub._steal(req)
        elif if_available:
            if not hub._grantable(req, ignore_queue=True):
                return await callback(None)
            hub._grant(req)
        else:
            hub._queue.setdefault(name, []).append(req)
            hub._process(name)
        self._mine[req] = None
        try:
            await req.granted
            if self._thawed is not None:
                await self._thawed()
            req.task = asyncio.ensure_future(callback(MemoryLock(name, mode)))
            await asyncio.wait({req.task, req.stolen}, return_when=asyncio.FIRST_COMPLETED)
            # crash() cancels ``stolen`` too; a dead context's request ends cancelled, not stolen.
            if req.stolen.done() and not req.stolen.cancelled():
                raise LockStolen(f"lock {name!r} was stolen")
            if not req.task.done():
                # The context crashed while holding it: its callback dies with it.
                raise asyncio.CancelledError(f"lock {name!r}: its context crashed")
            return req.task.result()
        finally:
            self._mine.pop(req, None)
            hub._release(req)

    def take_if_available(self, name: str) -> asyncio.Future[Release | None]:
        """An ``ifAvailable`` request held until its release is called: a frozen context's
        answer waits for its thaw, and a crash lets the lock go, as :meth:`request`'s do."""
        return take_by_request(self, name, spawn=self._takes.spawn)

    def held_names(self) -> set[str]:
        """The locks this context holds now (in either mode)."""
        return {req.name for req in self._mine if req in self._hub._held.get(req.name, ())}

    def holds(self, name: str) -> bool:
        """Whether this context holds the lock ``name`` now (in either mode)."""
        return any(req in self._hub._held.get(name, ()) for req in self._mine)

    def crash(self) -> None:
        """The context died: its held locks are released and its queued requests dropped; a
        request it makes after (a task of it that had not started yet) is never granted."""
        self._crashed = True
        for req in list(self._mine):
            self._mine.pop(req, None)
            if req.task is not None:
                req.task.cancel()
            for fut in (req.granted, req.stolen):
                if not fut.done():
                    fut.cancel()
            self._hub._release(req)
