"""The outbox's vocabulary: what a handler receives (:class:`OutboxEntry`), a type's handlers
(:class:`OutboxHandler`), a transport, what ``start()`` prunes, its constants and its log
events (:func:`log_event`)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random as _random
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Protocol

from ..core.backoff import Backoff
from ..core.errors import InvalidJobError
from ..core.records import JobRecord
from ..core.status import CLAIMABLE, ONLY_FAILED

_AN_ENTRY_ID = "an entry's id, a str such as job.id of what enqueue() returned or OutboxEntry.id"

DAY_MS = 24 * 3600 * 1000.0
DEFAULT_POLL_INTERVAL_MS = 30_000.0
DEFAULT_LEASE_MS = 60_000.0
#: The outbox's process-flow event name, carried in every log record's ``extra``.
EVENT = "outbox-process"
#: A run renews its lease every ``lease_ms / RENEWALS_PER_LEASE``: two renewals can be missed
#: (a slow store, a busy page) before another processor may take the entry.
RENEWALS_PER_LEASE = 3
#: What a delivery takes back: the entry running under another processor's lease, back to
#: pending after that run failed, or failed with no rollback begun.
DELIVERABLE = CLAIMABLE | ONLY_FAILED


def outbox_backoff(random: Callable[[], float] = _random.random) -> Backoff:
    """The outbox's ladder: ``min(1000 · 2^(attempts−1), 30000)`` minus 0–20 % jitter."""
    return Backoff(jitter=-0.20, random=random)


@dataclass(frozen=True)
class Prune:
    """Failed entries to delete on ``start()``: older than ``max_age_ms``,
    and the oldest beyond ``max_failed``."""

    max_age_ms: float | None = 90 * DAY_MS
    max_failed: int | None = 200


@dataclass(frozen=True)
class OutboxEntry:
    """What a handler receives: the stored entry, with its payload copied out of the store."""

    id: str
    type: str
    payload: Any
    attempts: int
    max_attempts: int
    created_at: float
    status: str
    error: str | None = None
    code: str | None = None
    http_status: int | None = None

    @classmethod
    def of(cls, record: JobRecord) -> "OutboxEntry":
        return cls(id=record.id, type=record._reconstructor, payload=record._params,
                   attempts=record.attempts, max_attempts=record.max_attempts,
                   created_at=record.created_at, status=record.status.value, error=record.error,
                   code=record.code, http_status=record.http_status)


@dataclass(frozen=True)
class OutboxHandler:
    """One entry type's handlers.

    Args:
        process: ``process(entry)`` — or ``process(entry, result=...)`` with a
            transport. Must be idempotent: a page that dies after it succeeded
            but before the delete runs it again.
        on_exhausted: called once the entry failed for good; the record is kept
            as failed for :meth:`Outbox.retry`.
        rollback: without ``on_exhausted``: revert an optimistic change; the
            record is then deleted.
        is_retryable_error: ``False`` fails the entry at once, whatever its attempts.
    """

    process: Callable[..., Any]
    on_exhausted: Callable[[OutboxEntry], Any] | None = None
    rollback: Callable[[OutboxEntry], Any] | None = None
    is_retryable_error: Callable[[BaseException], bool] | None = None

    @classmethod
    def of(cls, value: Any) -> "OutboxHandler":
        """Accept an :class:`OutboxHandler` or a mapping with the same keys
        (the outbox's object literal)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"process", "on_exhausted", "rollback", "is_retryable_error"}
            if unknown:
                raise InvalidJobError(f"unknown handler keys {sorted(unknown)}")
            return cls(**value)
        raise InvalidJobError(
            f"a handler is an OutboxHandler or a dict with 'process', got {value!r}")

    def __post_init__(self) -> None:
        if not callable(self.process):
            raise InvalidJobError("a handler needs a callable process(entry)")


async def _call(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    value = fn(*args, **kw)
    return await value if inspect.isawaitable(value) else value


def _outbox_idle() -> Awaitable[None]:
    return asyncio.sleep(0)


class OutboxTransport(Protocol):
    """What ``Outbox(transport=...)`` takes: ``send(entry)``, sync or async, whose result is
    handed to the handler's ``process(entry, result=...)``."""

    def send(self, entry: OutboxEntry) -> Any: ...


def log_event(log: logging.Logger, phase: str, job_id: Any, job_type: Any, attempts: Any, *,
              level: int = logging.INFO, **more: Any) -> None:
    """Log one step of the outbox's process flow, with :data:`EVENT` and the entry in ``extra``."""
    log.log(level, "%s %s %s %s", EVENT, phase, job_type, job_id, extra={
        "outbox_event": EVENT, "phase": phase, "entry_id": job_id, "entry_type": job_type,
        "attempt": attempts, **more,
    })
