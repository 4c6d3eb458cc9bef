"""The clock of pages and scheduler workers: :class:`LoopClock` (wall-clock time, asyncio
timers)."""

from __future__ import annotations

import asyncio
import time
from typing import (
    Callable,
)


class _LoopTimer:
    def __init__(self, handle: asyncio.TimerHandle) -> None:
        self._handle = handle

    def cancel(self) -> None:
        self._handle.cancel()


class LoopClock:
    """Wall-clock time and asyncio timers: the clock of pyjobq's pages and scheduler workers in
    a browser (Pyodide's event loop), and of the queue on plain CPython."""

    def now(self) -> float:
        return time.time() * 1000.0

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> _LoopTimer:
        loop = asyncio.get_running_loop()
        return _LoopTimer(loop.call_later(max(0.0, delay_ms) / 1000.0, callback))
