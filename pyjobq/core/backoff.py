"""Retry timing shared by persistent and volatile jobs (spec: "job-backoff").

Both paths call :func:`make_backoff` so their timing is identical, not merely
similar. Randomness is passed in, so tests pin the jitter.
"""

from __future__ import annotations

import datetime
import email.utils
import random as _random
from dataclasses import dataclass
from typing import Callable

BASE_MS = 1000.0
CAP_MS = 30_000.0
#: Jitter as a fraction of the step: the job queue adds up to 30 %.
JITTER = 0.30


@dataclass(frozen=True)
class Backoff:
    """``delay(attempt) = min(base · 2^(attempt−1), cap) · (1 + jitter · r)``, r in [0, 1).

    A negative ``jitter`` subtracts instead (the outbox's "minus 0–20 %").
    """

    base_ms: float = BASE_MS
    cap_ms: float = CAP_MS
    jitter: float = JITTER
    random: Callable[[], float] = _random.random

    def step(self, attempt: int) -> float:
        """The delay before jitter for the ``attempt``-th try (1-based)."""
        attempt = max(1, int(attempt))
        # 2**attempt overflows nothing in Python, but min() first keeps it cheap.
        if attempt > 64:
            return self.cap_ms
        return min(self.base_ms * 2.0 ** (attempt - 1), self.cap_ms)

    def __call__(self, attempt: int) -> float:
        return self.step(attempt) * (1.0 + self.jitter * self.random())


def make_backoff(random: Callable[[], float] = _random.random, **kw: float) -> Backoff:
    """The job queue's ladder: roughly 1 s, 2 s, 4 s, 8 s, 16 s, then about 30 s."""
    return Backoff(random=random, **kw)


#: The longest ``Retry-After`` honoured: a server asking for more is retried after an hour,
#: so a job's attempts still end within ``max_attempts`` hours at most.
RETRY_AFTER_CAP_MS = 3_600_000.0


def retry_after_ms(value: object, now_ms: float) -> float | None:
    """A ``Retry-After`` header's wait in ms (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date
    counted from ``now_ms`` (a date past is no wait), at most :data:`RETRY_AFTER_CAP_MS`; None
    for no header or one that says neither (whatever bytes a server sent)."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # "²" is a digit to str.isdigit, not to float()
        return min(float(text) * 1000.0, RETRY_AFTER_CAP_MS)
    try:
        when = email.utils.parsedate_to_datetime(text)
        if when.tzinfo is None:  # an HTTP-date is GMT
            when = when.replace(tzinfo=datetime.timezone.utc)
        at = when.timestamp() * 1000.0
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return min(max(0.0, at - now_ms), RETRY_AFTER_CAP_MS)
