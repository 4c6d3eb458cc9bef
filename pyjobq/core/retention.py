"""Retention: which ``done`` records the job queue deletes, and when the lease holder looks.

Theory of operation
-------------------
Spec job-queue.txt, "Startup and cleanup": "Automatically clean up only successfully
completed jobs ... cleanup_old() deletes done records older than 7 days — and only those."
A failed or cancelled record is the last copy of what the caller asked for, and an
unfinished one is work, so :func:`sweepable` takes ``done`` records and nothing else,
whatever a caller passes it.

Nothing but the app called ``cleanup_old()`` before, so every ``done`` record kept its
full body for ever and storage grew until ``QuotaExceededError``. So the holder of the
processor lease sweeps by itself: on taking the lease for the first time, and then every
:data:`SWEEP_EVERY_MS` while it holds it (:func:`sweep_due`). Once an hour bounds how long
an expired record outlives its seven days, and costs one read of the ``done`` index.

Pure functions: the clock's reading comes in, a decision goes out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from .records import JobRecord
from .status import Status

#: How often the lease holder sweeps while it holds the lease.
SWEEP_EVERY_MS = 3600 * 1000.0


def sweepable(records: Iterable[JobRecord], now: float, retention_ms: float,
              status: Status = Status.DONE) -> list[JobRecord]:
    """The records of ``status`` (``done``, or ``failed`` when the queue sweeps those too)
    last written more than ``retention_ms`` before ``now``, oldest first.

    Records of any other status are never returned, whatever their age: nothing unfinished is
    ever swept.
    """
    if status not in (Status.DONE, Status.FAILED):
        raise ValueError(f"only done and failed records are swept, not {status!r}")
    cutoff = now - retention_ms
    old = [r for r in records if r.status is status and r.updated_at < cutoff]
    old.sort(key=lambda r: (r.updated_at, r.id))
    return old


def sweep_due(last_swept_at: float | None, now: float, every_ms: float = SWEEP_EVERY_MS) -> bool:
    """True when a sweep is due: never swept yet (the lease was just taken),
    or ``every_ms`` passed."""
    return last_swept_at is None or now - last_swept_at >= every_ms


def stamped_ahead(records: Iterable[JobRecord], now: float) -> list[JobRecord]:
    """The ``done`` records last written after ``now``: stamped by a writer whose clock is ahead
    (or by other code). Their age would never reach the retention, so the sweep stamps them
    ``now`` (:func:`clamped`), and their seven days count from when it found them."""
    return [r for r in records if r.status is Status.DONE and r.updated_at > now]


def clamped(record: JobRecord, now: float) -> JobRecord | None:
    """``record`` stamped ``now`` if it is a ``done`` record stamped later; None: left as it is."""
    if record.status is not Status.DONE or record.updated_at <= now:
        return None
    return replace(record, updated_at=now)
