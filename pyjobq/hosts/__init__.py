"""The hosts a queue runs in: build its executor side and its scheduler (:func:`start`).

Runs on the page only (its main thread, or a worker host such as a notebook kernel). In
Pyodide the scheduler is a module Web Worker (:mod:`pyjobq.browser`). On plain CPython it is
an in-process :class:`~pyjobq.engine.scheduler.Scheduler` on the memory adapters, so code
that uses the queue can be tested without a browser.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field

from ..config import Settings
from ..core.errors import PyjobqError
from ..core.records import new_id
from ..executor.side import ExecutorSide
from ..executor.wiring import in_process
from ..memory import ChannelHub, LockHub, LoopClock, MemoryStore

IN_PYODIDE = sys.platform == "emscripten"


def start(settings: Settings) -> ExecutorSide:
    """The executor side of a queue on ``settings``: in a browser, or on plain CPython."""
    source = new_id()
    if IN_PYODIDE:
        from ..browser.page_main import start_browser
        from ..service_worker.page import start as start_service_worker

        return start_browser(settings, source, start_service_worker)
    return start_memory(settings, source)


def start_memory(settings: Settings, source: str) -> ExecutorSide:
    """The queue on plain CPython: its scheduler in this process, on the process's store.

    Raises:
        PyjobqError: no event loop is running here (the scheduler's messages and timers are
            the loop's).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise PyjobqError(
            "pyjobq's queue on CPython runs its scheduler on asyncio, in this process: start it "
            "from inside a running event loop (in an async def run by asyncio.run(), say); no "
            "event loop is running here") from None
    hub = _shared_hub()
    store = hub.stores.setdefault(settings.db_name, MemoryStore())
    engine = in_process(
        store=store, schedules=store, source=source,
        clock=LoopClock(), lock_name=settings.lock_name, locks=hub.locks.client(),
        channel=hub.channels.channel(settings.channel_name),
        yields=settings.yields, handshake_timeout_ms=settings.handshake_timeout_ms,
        mode=settings.mode)
    return ExecutorSide(
        link=engine.link, engine=engine.scheduler,
        channel=hub.channels.channel(settings.channel_name),
        source=source, reconstructors=settings.reconstructors, transport=settings.transport,
        locks=hub.locks.client(), yields=settings.yields, timeout_s=settings.timeout_s)


@dataclass
class _Origin:
    """One process is one origin: the stores, locks and channels all queues here share."""

    stores: dict[str, MemoryStore] = field(default_factory=dict)
    locks: LockHub = field(default_factory=LockHub)
    channels: ChannelHub = field(default_factory=ChannelHub)


_ORIGIN: _Origin | None = None


def _shared_hub() -> _Origin:
    global _ORIGIN
    if _ORIGIN is None:
        _ORIGIN = _Origin()
    return _ORIGIN
