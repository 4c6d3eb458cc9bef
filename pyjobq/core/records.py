"""Job records: an unsaved :class:`NewJob` and the stored :class:`JobRecord`.

The stored form is a flat JSON-like dict (the IndexedDB value). ``_reconstructor``
and ``_params`` are how a persistent job is rebuilt after a reload (spec:
"Rebuilding a closure after reload"); they are never the closure itself and
never credentials. ``next_retry_at`` is set only while a record is pending, so
the ``by_next_retry`` index holds exactly the records waiting to run — or, when
the scheduler runs on leases (``Scheduler(lease_ms=...)``, the outbox mode), on a
running record as the end of its lease: the outbox's ``reservedTo``, one field for
"not before" whatever the status, so a lease that ran out is found by the same index.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Mapping, NamedTuple

from ..errors import InvalidJobError, PyjobqError
from .status import TERMINAL, Status

DEFAULT_MAX_ATTEMPTS = 5
FETCH = "fetch"
FETCH_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RecordError(PyjobqError):
    """A stored value is not a valid job record (missing or mistyped fields)."""


def new_id() -> str:
    return uuid.uuid4().hex


def check_json(value: Any, what: str) -> Any:
    """Raise :class:`InvalidJobError` unless ``value`` survives JSON (what storage and messages hold)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidJobError(
            f"{what} must be JSON-like (dict, list, str, int, float, bool, None) so it can be "
            f"stored and sent between tabs: {exc}"
        ) from None
    return value


@dataclass(frozen=True)
class NewJob:
    """A job as the caller asked for it: no timestamps, no status yet."""

    id: str
    reconstructor: str
    params: Any
    type: str = "default"
    group: str | None = None
    label: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    delay_ms: float = 0

    def __post_init__(self) -> None:
        _need(isinstance(self.id, str) and self.id != "", "id must be a non-empty str")
        _need(isinstance(self.reconstructor, str) and self.reconstructor != "",
              "reconstructor must be a non-empty str naming a registered factory")
        _need(isinstance(self.type, str) and self.type != "", "type must be a non-empty str")
        _need(self.group is None or isinstance(self.group, str), "group must be a str or None")
        _need(self.label is None or isinstance(self.label, str), "label must be a str or None")
        _need(
            isinstance(self.max_attempts, int) and not isinstance(self.max_attempts, bool)
            and self.max_attempts >= 1,
            f"max_attempts must be an int >= 1, got {self.max_attempts!r}",
        )
        _need(
            isinstance(self.delay_ms, (int, float)) and not isinstance(self.delay_ms, bool)
            and math.isfinite(self.delay_ms) and self.delay_ms >= 0,
            f"delay_ms must be a finite number >= 0, got {self.delay_ms!r}",
        )
        check_json(self.params, "the job's params")

    def to_message(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_message(cls, data: Mapping[str, Any]) -> "NewJob":
        try:
            return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})
        except TypeError as exc:
            raise InvalidJobError(f"malformed job: {exc}") from None

    def to_record(self, now: float) -> "JobRecord":
        return JobRecord(
            id=self.id,
            type=self.type,
            group=self.group,
            label=self.label,
            status=Status.PENDING,
            attempts=0,
            max_attempts=self.max_attempts,
            created_at=now,
            updated_at=now,
            next_retry_at=now + self.delay_ms,
            _reconstructor=self.reconstructor,
            _params=self.params,
        )


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidJobError(message)


@dataclass(frozen=True)
class JobRecord:
    """A stored job. Change it with :meth:`evolve`; status changes go through the policy."""

    id: str
    type: str
    status: Status
    attempts: int
    max_attempts: int
    created_at: float
    updated_at: float
    _reconstructor: str
    _params: Any
    group: str | None = None
    label: str | None = None
    next_retry_at: float | None = None
    result: Any = None
    error: str | None = None
    http_status: int | None = None
    code: str | None = None
    #: Attempts handed back (401, offline, interrupted): they climb the ladder, not the ceiling.
    given_back: int = 0
    #: The lock a paused job waits on; None for a suspended (volatile) type.
    yield_lock: str | None = None
    #: Which scheduler handed the job to a page, while it is running.
    owner: str | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def evolve(self, **changes: Any) -> "JobRecord":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    def summary(self) -> dict[str, Any]:
        """What travels in a ``job-update``: everything but ``_params``, which may be large."""
        d = self.to_dict()
        del d["_params"]
        return d

    @classmethod
    def from_dict(cls, data: Any) -> "JobRecord":
        """Decode a stored value, rejecting missing or mistyped fields with :class:`RecordError`."""
        if not isinstance(data, Mapping):
            raise RecordError(f"a job record must be an object, got {type(data).__name__}")
        missing = [f.name for f in fields(cls) if f.name not in data and f.default is _MISSING_DEFAULT]
        if missing:
            raise RecordError(f"job record {data.get('id')!r} is missing {', '.join(missing)}")
        try:
            status = Status(data["status"])
        except ValueError:
            raise RecordError(f"job record {data.get('id')!r} has unknown status {data['status']!r}") from None
        for name, kinds in _FIELD_TYPES.items():
            if name not in data:
                continue  # a required field was reported missing above; the rest have defaults
            value = data[name]
            if value is None and name in _OPTIONAL:
                continue
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise RecordError(
                    f"job record {data.get('id')!r} has {name}={value!r}, expected "
                    + " or ".join(k.__name__ for k in kinds)
                )
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = status
        for name in ("attempts", "max_attempts", "given_back", "http_status"):
            if isinstance(values.get(name), float):
                values[name] = int(values[name])
        return cls(**values)


_MISSING_DEFAULT = fields(NewJob)[0].default  # dataclasses.MISSING, without importing a private name
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "type": (str,),
    "attempts": (int, float),
    "max_attempts": (int, float),
    "created_at": (int, float),
    "updated_at": (int, float),
    "_reconstructor": (str,),
    "group": (str,),
    "label": (str,),
    "next_retry_at": (int, float),
    "error": (str,),
    "http_status": (int, float),
    "code": (str,),
    "given_back": (int, float),
    "yield_lock": (str,),
    "owner": (str,),
}
_OPTIONAL = frozenset({"group", "label", "next_retry_at", "error", "http_status", "code", "yield_lock", "owner"})


class DueKey(NamedTuple):
    """What a claim reads of a due record before its one ``get``: no payload.

    ``status`` is ``pending``, or ``running`` for a lease that ran out.
    """

    id: str
    type: str
    created_at: float
    status: Status


@dataclass(frozen=True)
class Outcome:
    """What ``done`` resolves to once a job reaches a terminal status.

    ``status`` describes the job, ``http_status`` the server's response, and
    ``code`` the specific error — use ``code`` when explaining a failure, since
    errors with different remedies can share one HTTP status.
    """

    id: str
    status: str
    result: Any = None
    error: str | None = None
    http_status: int | None = None
    code: str | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> "Outcome":
        return cls(
            id=record["id"],
            status=str(record["status"]),
            result=record.get("result"),
            error=record.get("error"),
            http_status=record.get("http_status"),
            code=record.get("code"),
        )


@dataclass(frozen=True)
class RunResult:
    """A page's answer to ``run``: the fields of the ``run_result`` message."""

    ok: bool
    result: Any = None
    error: str | None = None
    status: int | None = None
    code: str | None = None
    terminal: bool = False
    interrupted: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
