"""What a job's ``done`` resolves to: :class:`Outcome`; and :class:`JobFailed`, what
``job.result()`` raises when that outcome is not ``done``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .errors import InvalidJobError, PyjobqError
from .status import TERMINAL, Status


@dataclass(frozen=True)
class Outcome:
    """What ``done`` resolves to once a job reaches a terminal status.

    ``status`` describes the job (:attr:`Status.DONE`, :attr:`Status.FAILED` or
    :attr:`Status.CANCELLED`; a ``str`` enum, so ``outcome.status == "done"`` holds
    too), ``http_status`` the server's response, and ``code`` the specific error —
    use ``code`` when explaining a failure, since errors with different remedies
    can share one HTTP status. Every code pyjobq sets is a :class:`~pyjobq.Code`, with its
    meaning and remedy: a deleted job resolves as cancelled with ``Code.DELETED``, one this
    page could not store as failed with ``Code.NOT_STORED``.

    Raises:
        InvalidJobError: ``status`` is not a terminal status.
    """

    id: str
    status: Status
    result: Any = None
    error: str | None = None
    http_status: int | None = None
    code: str | None = None

    def __post_init__(self) -> None:
        try:
            status = Status(self.status)
        except ValueError:
            status = None
        if status not in TERMINAL:
            raise InvalidJobError(
                f"an Outcome's status must be one of {', '.join(sorted(TERMINAL))},"
                f" got {self.status!r}")
        object.__setattr__(self, "status", status)

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Outcome:
        """The outcome a terminal record (a stored record or a ``job-update``) stands for."""
        return cls(
            id=record["id"],
            status=record["status"],
            result=record.get("result"),
            error=record.get("error"),
            http_status=record.get("http_status"),
            code=record.get("code"),
        )


class JobFailed(PyjobqError):
    """:meth:`Job.result` of a job that did not end ``done``: it failed, or it was cancelled
    (a deleted job is cancelled with code ``deleted``).

    It lives beside :class:`Outcome`, which it carries; an engine never raises it (so no
    ``reply`` names it). Its public paths are ``pyjobq.JobFailed`` and
    ``pyjobq.errors.JobFailed``.

    Attributes:
        outcome: the job's :class:`~pyjobq.Outcome` (its ``status``, ``error``,
            ``http_status`` and ``code``: explain a failure by its ``code``).
        code: ``outcome.code``, for ``except JobFailed as e: if e.code == Code.DELETED``.
    """

    def __init__(self, outcome: Outcome) -> None:
        detail = outcome.error or "no error message"
        why = f" (code {outcome.code})" if outcome.code else ""
        http = f", HTTP {outcome.http_status}" if outcome.http_status is not None else ""
        super().__init__(f"job {outcome.id} ended {outcome.status.value}{why}{http}: {detail}")
        self.outcome = outcome
        self.code = outcome.code
