"""Periodic schedules: the stored record, its slots, and the decisions taken on them.

Theory of operation
-------------------
A schedule (``@pyjobq.periodic(every=...)``) is stored beside the jobs, so a tab that has not
imported the page's code, or the next session, still knows it. Its occurrences are *slots*:
the multiples of ``every`` counted from the UNIX epoch (:func:`slot_at`), so every tab, with
any clock reading, computes the same slots — 15 minutes means :00, :15, :30 and :45 of every
hour (UTC), a day means midnight UTC.

A stored schedule says which slots are accounted for: every slot up to ``last_slot`` was
enqueued or skipped. The lease holder alone enqueues (pyjobq/engine/periodic.py), and it does
so in one transaction with the schedule's advance (:class:`~pyjobq.core.ports.ScheduleStore`,
``advance_schedule``) deciding there, on what that transaction read, with
:func:`occurrence`: the slot is taken only if it is still past ``last_slot``. So however
many tabs (or a frozen ex-holder that thaws) decide on the same slot, one transaction takes
it and the others find it accounted for — each slot is enqueued at most once per origin.
The job's id is the slot's own (:func:`occurrence_id`), a second guard: a second ``add`` of it
would fail the whole transaction.

The rules, decided here and documented in docs/periodic.md:

* **A new schedule starts at the next slot**: storing it accounts for the slot under way
  (as cron, huey and arq do; nothing runs at definition).
* **Missed slots run once**: when the holder looks, only the latest due slot is enqueued and
  the slots between are skipped — after a night with no tab open, one run, not one per slot.
* **Coalescing**: a slot that comes due while the previous occurrence's job is still
  unfinished (pending, running or paused) is skipped, not queued behind it (as APScheduler's
  ``max_instances=1``); the next slot after that job ends runs as usual.
* **A changed definition** (another ``every``, type, label …) replaces the stored one and keeps
  what was accounted for: the next occurrence is the first slot of the new ``every`` past
  ``last_slot``.

Pure: every function takes ``now`` and returns a value; nothing here touches a store or a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from .errors import InvalidJobError, PyjobqError
from .records import DEFAULT_MAX_ATTEMPTS, JobRecord, NewJob, check_str
from .status import UNFINISHED

__all__ = ["ScheduleDefinition", "Schedule", "Occurrence", "ScheduleError", "MIN_EVERY_MS",
           "SCHEDULE_VERSION", "slot_at", "next_slot", "due_slot", "define", "occurrence",
           "occurrence_id", "earliest_wake"]

#: The shortest ``every``: a second. Shorter periodic work belongs in a loop of its own.
MIN_EVERY_MS = 1_000
#: The stored form's version: a schedule with a larger ``v`` is a newer pyjobq's, left alone.
SCHEDULE_VERSION = 1


class ScheduleError(PyjobqError):
    """A stored value is not a valid schedule (or a newer pyjobq's: :attr:`foreign`)."""

    def __init__(self, message: str, *, foreign: bool = False) -> None:
        super().__init__(message)
        self.foreign = foreign


def _check_every(every_ms: Any, what: str) -> float:
    if isinstance(every_ms, bool) or not isinstance(every_ms, (int, float)) \
            or not math.isfinite(every_ms) or every_ms != int(every_ms) \
            or every_ms < MIN_EVERY_MS:
        raise InvalidJobError(f"{what} must be a whole number of milliseconds >= {MIN_EVERY_MS} "
                         f"(a second), got {every_ms!r}")
    return float(every_ms)


@dataclass(frozen=True)
class ScheduleDefinition:
    """A schedule as a page defines it: no accounting yet (what the ``schedule`` request
    carries). ``name`` is also the reconstructor its jobs are rebuilt with."""

    name: str
    every_ms: float
    type: str = "periodic"
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    label: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        check_str(self.name, "periodic(name)", "a schedule's name, a non-empty str")
        if not self.name:
            raise InvalidJobError("periodic(name): a schedule's name must be a non-empty str")
        object.__setattr__(self, "every_ms", _check_every(self.every_ms, "every"))
        # The job's own checks, once, here: a definition that could not file its jobs is refused
        # where it is made, not at its first occurrence in some other tab.
        self.job(0.0)

    def job(self, slot: float) -> NewJob:
        """The job of ``slot``'s occurrence."""
        return NewJob(id=occurrence_id(self.name, slot), reconstructor=self.name,
                      params={"schedule": self.name, "slot": slot}, type=self.type,
                      group=self.group, label=self.label if self.label is not None else self.name,
                      max_attempts=self.max_attempts)

    def to_message(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_message(cls, data: Mapping[str, Any]) -> "ScheduleDefinition":
        try:
            return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})
        except TypeError as exc:
            raise InvalidJobError(f"malformed schedule: {exc}") from None


@dataclass(frozen=True)
class Schedule:
    """A stored schedule: its definition, and the slots accounted for.

    ``last_slot``: every slot up to it was enqueued or skipped. ``last_job_id``: the job of the
    last slot enqueued (None before the first), which coalescing looks at.
    """

    definition: ScheduleDefinition
    last_slot: float
    created_at: float
    updated_at: float
    last_job_id: str | None = None

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def every_ms(self) -> float:
        return self.definition.every_ms

    def to_dict(self) -> dict[str, Any]:
        """The stored value: flat, keyed on ``name``."""
        return {"v": SCHEDULE_VERSION, **self.definition.to_message(),
                "last_slot": self.last_slot, "last_job_id": self.last_job_id,
                "created_at": self.created_at, "updated_at": self.updated_at}

    @classmethod
    def from_dict(cls, data: Any) -> "Schedule":
        """Decode a stored value.

        Raises:
            ScheduleError: not a schedule (``foreign``: a newer pyjobq's, to be left alone).
        """
        if not isinstance(data, Mapping):
            raise ScheduleError(f"a schedule must be an object, got {type(data).__name__}")
        version = data.get("v")
        if isinstance(version, (int, float)) and not isinstance(version, bool) \
                and version > SCHEDULE_VERSION:
            raise ScheduleError(f"schedule {data.get('name')!r} is version {version}, a newer "
                                "pyjobq's", foreign=True)
        try:
            definition = ScheduleDefinition.from_message(data)
            numbers = [data["last_slot"], data["created_at"], data["updated_at"]]
            if not all(isinstance(n, (int, float)) and not isinstance(n, bool)
                       and math.isfinite(n) for n in numbers):
                raise ValueError(f"last_slot, created_at, updated_at must be numbers: {numbers}")
            last_job_id = data.get("last_job_id")
            if last_job_id is not None and not isinstance(last_job_id, str):
                raise ValueError(f"last_job_id must be a str or None, got {last_job_id!r}")
        except (KeyError, ValueError, PyjobqError) as exc:
            raise ScheduleError(f"stored schedule {data.get('name')!r} is malformed: "
                                f"{exc}") from None
        return cls(definition, float(numbers[0]), float(numbers[1]), float(numbers[2]),
                   last_job_id)


@dataclass(frozen=True)
class Occurrence:
    """What one advance decided: the schedule as it is to be stored, and the job to add in the
    same transaction (None: the slot was skipped, coalesced behind an unfinished job)."""

    schedule: Schedule
    job: JobRecord | None
    slot: float


def occurrence_id(name: str, slot: float) -> str:
    """The job id of ``name``'s occurrence at ``slot``: ``periodic:<name>:<slot in ms>``."""
    return f"periodic:{name}:{int(slot)}"


def slot_at(every_ms: float, now: float) -> float:
    """The latest slot at or before ``now``: a multiple of ``every_ms`` since the epoch."""
    return math.floor(now / every_ms) * every_ms


def next_slot(schedule: Schedule) -> float:
    """The first slot past what ``schedule`` accounted for: when it is next due."""
    return slot_at(schedule.every_ms, schedule.last_slot) + schedule.every_ms


def due_slot(schedule: Schedule, now: float) -> float | None:
    """The latest slot due at ``now`` not yet accounted for; None when none is due. The slots
    between it and ``last_slot`` are skipped (missed slots run once)."""
    latest = slot_at(schedule.every_ms, now)
    return latest if latest > schedule.last_slot else None


def earliest_wake(schedules: Mapping[str, Schedule] | list[Schedule],
                  held_back: Mapping[str, float] | None = None) -> float | None:
    """The soonest moment one of ``schedules`` is next due; None for none. A schedule named in
    ``held_back`` is not looked at before the moment given there."""
    values = schedules.values() if isinstance(schedules, Mapping) else schedules
    held_back = held_back or {}
    return min((max(next_slot(s), held_back.get(s.name, -math.inf)) for s in values),
               default=None)


def define(current: Schedule | None, definition: ScheduleDefinition,
           now: float) -> Schedule | None:
    """What storing ``definition`` writes over ``current``; None: nothing changes.

    A new schedule accounts for the slot under way (its first occurrence is the next slot); a
    changed one keeps what was accounted for (``last_slot``, ``last_job_id``)."""
    if current is None:
        return Schedule(definition, slot_at(definition.every_ms, now), now, now)
    if current.definition == definition:
        return None
    return replace(current, definition=definition, updated_at=now)


def synced(schedule: Schedule, slot: float | None, now: float) -> Occurrence | None:
    """``schedule`` advanced to ``slot`` with no new job, its occurrence being the job already
    stored under that slot's id; None when ``slot`` is no longer the one due (another tab
    advanced it meanwhile)."""
    if slot is None or due_slot(schedule, now) != slot:
        return None
    return Occurrence(replace(schedule, last_slot=slot,
                              last_job_id=occurrence_id(schedule.name, slot), updated_at=now),
                      None, slot)


def occurrence(schedule: Schedule, previous: JobRecord | None, now: float) -> Occurrence | None:
    """The advance of ``schedule`` at ``now``, given the record of its last occurrence's job
    (``previous``: None when there is none, or it was deleted); None when no slot is due.

    The latest due slot is taken: enqueued as a pending job due now, or — while ``previous``
    is unfinished — skipped (coalescing). Either way ``last_slot`` moves to it."""
    slot = due_slot(schedule, now)
    if slot is None:
        return None
    if previous is not None and previous.id == schedule.last_job_id \
            and previous.status in UNFINISHED:
        return Occurrence(replace(schedule, last_slot=slot, updated_at=now), None, slot)
    record = schedule.definition.job(slot).to_record(now)
    return Occurrence(replace(schedule, last_slot=slot, last_job_id=record.id, updated_at=now),
                      record, slot)
