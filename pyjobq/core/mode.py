"""The engine's mode: one frozen value saying which of pyjobq's three queues a scheduler runs.

Theory of operation
-------------------
One engine (:class:`pyjobq.scheduler.Scheduler`) runs three queues that differ in a
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
  deleted.

A value rather than flags, so the combinations that exist are the three named
here and no reader has to work out what ``volatile and lease_ms is None`` meant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

__all__ = ["Mode", "JOB_QUEUE", "VOLATILE", "OUTBOX"]


@dataclass(frozen=True)
class Mode:
    """Which queue an engine runs; use a preset, or ``preset.with_lease(ms)`` for the outbox's length."""

    #: The queue's name in logs and errors.
    name: str
    #: The claim's lease length in ms, or None: a running record is freed by recovery inside the
    #: processor lease instead (the job queue, volatile jobs).
    lease_ms: float | None = None
    #: Each run holds ``<lock>:run:<id>`` until its outcome is stored, so recovery skips it.
    run_locks: bool = False
    #: ``"keep"`` stores a ``done`` record; ``"delete"`` removes it once done is published.
    on_success: Literal["keep", "delete"] = "keep"
    #: The in-tab engine of volatile jobs: updates say so, types can be suspended.
    volatile: bool = False

    def __post_init__(self) -> None:
        if self.on_success not in ("keep", "delete"):
            raise ValueError(f"Mode.on_success must be 'keep' or 'delete', got {self.on_success!r}")
        if self.lease_ms is not None and not self.lease_ms > 0:
            raise ValueError(f"Mode.lease_ms must be a positive number of milliseconds, got {self.lease_ms!r}")
        if self.run_locks and self.lease_ms is not None:
            raise ValueError("Mode: run locks guard lock-based recovery, which leases replace; choose one")

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


#: Persistent jobs: one processor lease, lock-based recovery, run locks, done records kept.
JOB_QUEUE = Mode("job queue", run_locks=True)
#: Volatile jobs: this tab's closures; no run locks (nothing else recovers), suspendable types.
VOLATILE = Mode("volatile", volatile=True)
#: The outbox: claims are 60 s leases, a done entry is deleted.
OUTBOX = Mode("outbox", lease_ms=60_000.0, on_success="delete")
