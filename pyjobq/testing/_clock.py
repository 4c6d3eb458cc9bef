"""The simulation's clock: :class:`FakeClock`, which moves only when told to."""

from __future__ import annotations

import heapq
import itertools
from typing import (
    Callable,
)


class _Timer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when told to; timers fire in order as it passes them."""

    def __init__(self, start: float = 1_700_000_000_000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _Timer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer()
        heapq.heappush(self._timers,
                       (self._now + max(0.0, delay_ms), next(self._seq), timer, callback))
        return timer

    def next_timer_at(self) -> float | None:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def advance(self, ms: float) -> None:
        """Move time forward by ``ms``, firing every timer it passes, in order."""
        target = self._now + ms
        while True:
            due = self.next_timer_at()
            if due is None or due > target:
                break
            when, _, timer, callback = heapq.heappop(self._timers)
            self._now = max(self._now, when)
            if not timer.cancelled:
                timer.cancelled = True
                callback()
        self._now = target
