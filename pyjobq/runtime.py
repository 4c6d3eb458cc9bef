"""Wiring: build the executor side and its scheduler for the host we run in.

In Pyodide the scheduler is a module Web Worker (:mod:`pyjobq.browser`). On
plain CPython it is an in-process :class:`~pyjobq.scheduler.Scheduler` on the
memory adapters, so code that uses the queue can be tested without a browser.
"""

from __future__ import annotations

import sys

from .config import Settings
from .core.records import new_id
from .executor import ExecutorSide

IN_PYODIDE = sys.platform == "emscripten"


def start(settings: Settings) -> ExecutorSide:
    source = new_id()
    if IN_PYODIDE:
        from .browser.runtime import start_browser

        return start_browser(settings, source)
    return start_memory(settings, source)


def start_memory(settings: Settings, source: str) -> ExecutorSide:
    from .memory import ChannelHub, LockHub, LoopClock, MemoryStore, link_pair
    from .scheduler import Scheduler

    hub = _shared_hub()
    page_end, worker_end = link_pair()
    side = ExecutorSide(
        link=page_end,
        channel=hub["channels"].channel(settings.channel_name),
        source=source,
        reconstructors=settings.reconstructors,
        transport=settings.transport,
        locks=hub["locks"].client(),
        yields=settings.yields,
    )
    scheduler = Scheduler(
        store=hub["stores"].setdefault(settings.db_name, MemoryStore()),
        locks=hub["locks"].client(),
        channel=hub["channels"].channel(settings.channel_name),
        link=worker_end,
        clock=LoopClock(),
        lock_name=settings.lock_name,
        source=source,
        yields=settings.yields,
        handshake_timeout_ms=settings.handshake_timeout_ms,
    )
    side.scheduler = scheduler  # type: ignore[attr-defined]
    scheduler.start()
    return side


_HUB: dict[str, object] = {}


def _shared_hub() -> dict:  # type: ignore[type-arg]
    """One process is one origin: the stores, locks and channels all queues here share."""
    if not _HUB:
        from .memory import ChannelHub, LockHub

        _HUB.update(stores={}, locks=LockHub(), channels=ChannelHub())
    return _HUB
