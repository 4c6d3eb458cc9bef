"""The engine's mode: one frozen value saying which of pyjobq's three queues a scheduler runs.

Theory of operation
-------------------
One engine (:class:`pyjobq.engine.scheduler.Scheduler`) runs three queues that differ in a
few decisions, and each decision is a field here, read by name where it is made:

* **the job queue** (:data:`JOB_QUEUE`, persistent jobs in IndexedDB, spec
  job-queue.txt): one processor lease for the origin; a running record whose page
  is gone is recovered inside that lease, and each run holds a *run lock* so that a
  frozen tab's run is neither recovered nor doubled; ``done`` records are kept (the
  retention sweep removes them after seven days).
* **volatile jobs** (:data:`VOLATILE`, closures in this tab): the same loop over a
  store only this tab sees; nothing else can recover a run, so no run locks; a
  finished job is forgotten once published, and a type can be suspended.
* **the outbox** (:data:`OUTBOX`, spec outbox.txt): claims are *leases* — the claim
  writes ``next_retry_at`` on the running record — so processors that share a store
  but hold no common lock reclaim a lease that ran out as due work; a done entry is
  deleted; claims are FIFO across types, one at a time ("keysOnly + one get, FIFO by
  createdAt among due keys"), so a ``msg/react`` never overtakes its ``msg/send``; and
  an HTTP status means nothing by itself: the handler's ``is_retryable_error`` decides,
  and an offline failure is released uncounted whatever it carried.

A value rather than flags, so the combinations that exist are the three named
here and no reader has to work out what ``volatile and lease_ms is None`` meant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from .messages import RECHECK_MS

__all__ = ["Mode", "JOB_QUEUE", "VOLATILE", "OUTBOX", "RETENTION_MS"]


@dataclass(frozen=True)
class Mode:
    """Which queue an engine runs; use a preset,
    or ``preset.with_lease(ms)`` for the outbox's length."""

    #: The queue's name in logs and errors.
    name: str
    #: The claim's lease length in ms, or None: a running record is freed by recovery inside the
    #: processor lease instead (the job queue, volatile jobs).
    lease_ms: float | None = None
    #: Each run holds ``<lock>:run:["<type>","<id>"]`` until its outcome is stored, so recovery
    #: skips it.
    run_locks: bool = False
    #: ``"keep"`` stores a ``done`` record; ``"delete"`` removes it once done is published.
    on_success: Literal["keep", "delete"] = "keep"
    #: The in-tab engine of volatile jobs: updates say so, types can be suspended.
    volatile: bool = False
    #: ``"type"``: each type is a lane, the oldest due job of every idle type starts (spec
    #: job-queue.txt "Each job type is its own queue"). ``"fifo"``: the oldest due record of
    #: any type, one at a time (spec outbox.txt "FIFO by createdAt among due keys").
    lanes: Literal["type", "fifo"] = "type"
    #: The job queue's HTTP status rules (spec "Retry timing and special HTTP statuses"): a 401
    #: waits 60 s uncounted, 400/403/409/413/422 fail at once, and only a failure with no HTTP
    #: status counts as offline. False (the outbox): a status is an ordinary error, and every
    #: failure while offline is released uncounted.
    http_status_rules: bool = True
    #: The lease holder deletes ``done`` records older than this by itself, on taking the lease
    #: and every :data:`~pyjobq.core.retention.SWEEP_EVERY_MS` while it holds it; None: no sweep.
    retention_ms: float | None = None
    #: Likewise for ``failed`` records, in the same sweep; None (the default): a failed job is
    #: kept until it is retried or deleted.
    failed_retention_ms: float | None = None
    #: An idle engine reads the store again this often, news or no news: a record stored by a
    #: tab that died before its ``job-update`` left is found within this bound, not at the next
    #: enqueue or the hourly sweep. None: only its own writes reach its store (volatile jobs),
    #: or a watchdog of its own does this (the outbox's ``poll_interval_ms``).
    recheck_ms: float | None = None

    def __post_init__(self) -> None:
        if self.on_success not in ("keep", "delete"):
            raise ValueError(f"Mode.on_success must be 'keep' or 'delete', got {self.on_success!r}")
        if self.lease_ms is not None and not self.lease_ms > 0:
            raise ValueError(
                f"Mode.lease_ms must be a positive number of milliseconds, got {self.lease_ms!r}")
        if self.run_locks and self.lease_ms is not None:
            raise ValueError(
                "Mode: run locks guard lock-based recovery, which leases replace; choose one")
        if self.lanes not in ("type", "fifo"):
            raise ValueError(f"Mode.lanes must be 'type' or 'fifo', got {self.lanes!r}")
        if self.recheck_ms is not None and not self.recheck_ms > 0:
            raise ValueError(f"Mode.recheck_ms must be a positive number of milliseconds or None, "
                             f"got {self.recheck_ms!r}")
        for name in ("retention_ms", "failed_retention_ms"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(
                    f"Mode.{name} must be a positive number of milliseconds or None, "
                    f"got {value!r}")

    @property
    def leases(self) -> bool:
        """True when claims are leases (a running record whose lease ran out is due)."""
        return self.lease_ms is not None

    @property
    def recovers(self) -> bool:
        """True when a pass recovers running records no page of ours has in flight."""
        return self.lease_ms is None

    def with_lease(self, lease_ms: float) -> "Mode":
        """This mode with claims that are leases of ``lease_ms`` milliseconds."""
        return dataclasses.replace(self, lease_ms=lease_ms)

    def with_retention(self, done_ms: float | None, failed_ms: float | None) -> "Mode":
        """This mode keeping ``done`` records ``done_ms`` and ``failed`` ones ``failed_ms``
        (None: until deleted)."""
        return dataclasses.replace(self, retention_ms=done_ms, failed_retention_ms=failed_ms)


#: How long the job queue keeps a ``done`` record (spec "Startup and cleanup": 7 days).
RETENTION_MS = 7 * 24 * 3600 * 1000.0

#: Persistent jobs: one processor lease, lock-based recovery, run locks, done records kept 7 days.
JOB_QUEUE = Mode("job queue", run_locks=True, retention_ms=RETENTION_MS, recheck_ms=RECHECK_MS)
#: Volatile jobs: this tab's closures; no run locks (nothing else recovers), suspendable types.
VOLATILE = Mode("volatile", volatile=True)
#: The outbox: claims are 60 s leases, FIFO across types, a done entry is deleted, no HTTP rules.
OUTBOX = Mode("outbox", lease_ms=60_000.0, on_success="delete", lanes="fifo",
              http_status_rules=False)
