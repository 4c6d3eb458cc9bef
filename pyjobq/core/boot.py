"""The scheduler worker's boot: which failures are retried, and when.

Theory of operation
-------------------
A tab that cannot process must never hold the processor lease: every other tab would wait
behind it for its whole life. So a worker that fails to boot, or whose boot stops
making progress, is ended; its page lets the lease go, and a new worker is started later and
gets in line again only once it holds what it needs to boot (``worker.mjs``: the
distribution's files, fetched as bytes).

Whether to start again is decided here, from what the failure says about the future:

1. A Content-Security-Policy refused something the boot needs → permanent (the page's
   policy does not change by itself: ``WorkerUnavailable``, saying what to allow).
2. A boot that made no progress within its deadline (``timeout``: a download neither
   answered nor refused — DESIGN.md, a refused ``pyodide.asm.wasm`` can leave
   ``loadPyodide`` hanging) → retried.
3. Any failure while the browser says it is offline → retried: nothing could be fetched, so
   it says nothing about the distribution or the page.
4. A download of the distribution's files that failed while online (``fetch``) → retried: a
   dropped connection, a server's bad minute.
5. Anything else (``script``, ``import``, ``load``, ``install``, ``start`` while online) →
   permanent: a worker script that throws, a distribution that is not where the page says,
   a package that is not in the lock, a bug — starting again would fail the same way.

A deadline is judged from time the page could have heard the worker: one that fires more than
:data:`LATE_MS` after it was due ran late because this page could not run (frozen — its worker
frozen with it, so the worker's silence says nothing — or busy, the worker's word waiting
behind it) and is armed once more from then (:func:`is_stalled`); only a deadline that fires
on time, or a second one, ends the boot. Once, not each time: a hidden tab's timers run late
too, and a stalled boot there must still be ended.

A retry comes on the browser's ``online`` event, and at the latest after the job queue's own
ladder (:func:`~pyjobq.core.backoff.make_backoff`: about 1 s, 2 s, 4 s, … then 30 s), so a
tab whose ``online`` never fires (Chromium's DevTools emulation in a worker) still gets there.

Every function here is pure: the driver (:class:`pyjobq.executor.boot.Boot`) carries the
decisions out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

#: The stages ``worker.mjs`` reports a failure at, in the order a boot passes them.
STAGES = ("script", "import", "fetch", "load", "install", "start")
#: The stage of a boot that made no progress within its deadline.
TIMEOUT = "timeout"
#: A download of the distribution's files: failing online is the network's doing too.
FETCH = "fetch"


#: How late a deadline may fire and still say the boot made no progress (timer slack).
LATE_MS = 1_000.0


@dataclass(frozen=True)
class BootFailure:
    """What went wrong with one boot of the scheduler worker.

    Attributes:
        stage: where it failed (:data:`STAGES`, or :data:`TIMEOUT` for a stalled boot).
        message: the worker's (or the browser's) own words.
        online: ``navigator.onLine`` when the failure was seen.
        refused: a Content-Security-Policy refused something the boot needed.
    """

    stage: str
    message: str
    online: bool
    refused: bool = False


@dataclass(frozen=True)
class Retry:
    """Start a new worker on the next ``online`` event, or after ``delay_ms`` at the latest."""

    delay_ms: float


def is_transient(failure: BootFailure) -> bool:
    """Whether a new worker may boot where this one failed (the module docstring's rules)."""
    if failure.refused:
        return False
    return failure.stage in (TIMEOUT, FETCH) or not failure.online


def after_failure(failure: BootFailure, failures: int,
                  backoff: Callable[[int], float]) -> Retry | None:
    """What to do after the ``failures``-th failure in a row (1-based): a :class:`Retry`, or
    None when the failure is permanent (the page raises ``WorkerUnavailable`` from then on)."""
    if not is_transient(failure):
        return None
    return Retry(delay_ms=backoff(failures))


def is_stalled(armed_at: float, now: float, stall_ms: float, *, armed_again: bool) -> bool:
    """Whether a boot deadline armed at ``armed_at`` for ``stall_ms`` and firing at ``now`` ends
    the boot as stalled: it fired on time (within :data:`LATE_MS`), or it was already armed once
    more after firing late (``armed_again``). False: arm it again from ``now``."""
    return armed_again or now - armed_at <= stall_ms + LATE_MS
