"""A run's claim on an outbox entry, and the pure decisions on it (:mod:`pyjobq.outbox`).

Processors sharing a store hold no common lock: each decision here is the ``apply`` of one
conditional write (a :class:`~pyjobq.core.ports.Change`), so two processors racing on one
entry each read what the store holds at that moment, and exactly one of them wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from .codes import Code
from .records import JobRecord
from .status import Event, Status, apply

#: The error of an entry whose lease ran out on its last allowed attempt.
LEASE_RAN_OUT = (
    "its lease ran out on the last allowed attempt: the page running it closed, crashed "
    "or froze mid-run, so whether it was delivered is unknown")


@dataclass(frozen=True)
class RunClaim:
    """The claim one run holds: the processor that claimed the entry (the record's ``owner``)
    and the attempt it was handed. A claim taken over by another processor, or a later claim
    of the same entry, is a different claim."""

    entry_id: str
    owner: str
    attempts: int
    given_back: int

    @classmethod
    def of(cls, record: JobRecord) -> "RunClaim":
        assert record.owner is not None, "a running record has an owner"
        return cls(record.id, record.owner, record.attempts, record.given_back)

    def holds(self, record: JobRecord | None) -> bool:
        """The record is still this claim: running, under this owner, on this attempt."""
        return (
            record is not None and record.status is Status.RUNNING and record.owner == self.owner
            and record.attempts == self.attempts and record.given_back == self.given_back)

    def failed_on(self, record: JobRecord | None) -> bool:
        """The record was failed *on* this claim — its lease ran out on the last allowed attempt
        and another processor's claim failed it (no run came after) — and no rollback began."""
        return (record is not None and record.status is Status.FAILED and record.owner is None
                and record.attempts == self.attempts and record.given_back == self.given_back)


def renewed(record: JobRecord, claim: RunClaim, now: float, lease_ms: float) -> JobRecord | None:
    """The lease pushed a whole ``lease_ms`` past ``now`` — only while the record is still
    ``claim``: a renewal never resurrects a settled entry nor takes one back from a processor
    that took it over."""
    if not claim.holds(record):
        return None
    return record.evolve(next_retry_at=now + lease_ms, updated_at=now)


def delivered(record: JobRecord, claim: RunClaim, now: float, lease_ms: float) -> JobRecord | None:
    """``claim``'s ``process()`` succeeded: the entry becomes that claim's running record again,
    so the engine's settle stores it done (and deletes it), whoever held it meanwhile.

    A delivery wins over another processor's lease, its failure (pending again) and a failure
    on the ceiling — everything but a rollback that has begun (a failed record with an owner:
    :func:`rollback_begun`), which cannot be taken back. None: nothing to take back (still
    ``claim``), or too late.
    """
    if claim.holds(record):
        return None
    if record.status is Status.RUNNING:
        status = Status.RUNNING
    elif record.status is Status.PENDING:
        status = apply(Status.PENDING, Event.CLAIM)
    elif record.status is Status.FAILED and record.owner is None:
        status = apply(apply(Status.FAILED, Event.REVIVE), Event.CLAIM)
    else:
        return None
    return record.evolve(status=status, owner=claim.owner, next_retry_at=now + lease_ms,
                         updated_at=now, yield_lock=None)


def rollback_begun(record: JobRecord, owner: str) -> JobRecord | None:
    """A failed entry about to be rolled back, marked so (``owner`` on a failed record) before
    ``rollback`` runs: from here on no delivery takes it back. A mark left by a page that died
    mid-rollback is taken over (``rollback`` is idempotent). ``updated_at`` is kept: prune's age."""
    if record.status is not Status.FAILED:
        return None
    return record.evolve(owner=owner)


def lease_ran_out(record: JobRecord, seen: JobRecord) -> JobRecord | None:
    """The failure ``seen`` — this processor's claim found the entry's lease run out on its last
    attempt — said as what it is (code ``page_gone``), not as an earlier attempt's error: the
    mark by which every later start knows that its last run's fate is unknown."""
    if (record.status is not Status.FAILED or record.owner is not None
            or record.code == Code.PAGE_GONE
            or (record.attempts, record.given_back) != (seen.attempts, seen.given_back)):
        return None
    return record.evolve(code=Code.PAGE_GONE.value, error=LEASE_RAN_OUT, http_status=None)


def undecided(record: JobRecord) -> bool:
    """A failed entry whose last run lost its lease on the ceiling and has not reported: it may
    have been delivered, so it is not rolled back until that run says it failed."""
    return record.status is Status.FAILED and record.owner is None and record.code == Code.PAGE_GONE
