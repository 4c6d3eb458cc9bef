"""pyjobq/core/periodic.py: slots, definitions and the occurrence decision, step by step."""

from __future__ import annotations

import pytest

from pyjobq.core.errors import InvalidJobError
from pyjobq.core.periodic import (
    Schedule,
    ScheduleDefinition,
    ScheduleError,
    define,
    due_slot,
    earliest_wake,
    next_slot,
    occurrence,
    occurrence_id,
    slot_at,
)
from pyjobq.core.status import Status
from pyjobq.testing import record

MIN = 60_000.0
T = 1_700_000_000_000.0  # 20 s past a minute's slot
SLOT = 1_699_999_980_000.0


def definition(**changes: object) -> ScheduleDefinition:
    fields: dict[str, object] = {"name": "tidy", "every_ms": MIN, "type": "tidy"}
    fields.update(changes)
    return ScheduleDefinition(**fields)  # type: ignore[arg-type]


def test_slots_are_multiples_of_every_since_the_epoch() -> None:
    assert slot_at(MIN, T) == SLOT
    assert slot_at(MIN, SLOT) == SLOT  # a slot is its own latest slot
    assert slot_at(15 * MIN, T) == 1_699_999_200_000.0
    assert slot_at(24 * 60 * MIN, T) % (24 * 60 * MIN) == 0  # a day: midnight UTC


def test_a_new_schedule_accounts_for_the_slot_under_way() -> None:
    stored = define(None, definition(), T)
    assert stored == Schedule(definition(), SLOT, T, T)
    assert next_slot(stored) == SLOT + MIN
    assert due_slot(stored, T + 10_000) is None
    assert due_slot(stored, SLOT + MIN) == SLOT + MIN


def test_defining_the_same_again_changes_nothing_and_a_change_keeps_the_accounting() -> None:
    stored = Schedule(definition(), SLOT, T, T, "periodic:tidy:1")
    assert define(stored, definition(), T + 5) is None
    changed = define(stored, definition(every_ms=2 * MIN, label="Tidy"), T + 5)
    assert changed == Schedule(definition(every_ms=2 * MIN, label="Tidy"), SLOT, T, T + 5,
                               "periodic:tidy:1")
    # The next slot of the new every past what was accounted for.
    assert next_slot(changed) == slot_at(2 * MIN, SLOT) + 2 * MIN


def test_the_latest_due_slot_is_enqueued_and_the_missed_ones_skipped() -> None:
    stored = Schedule(definition(), SLOT, T, T)
    now = SLOT + 10 * MIN + 5
    decided = occurrence(stored, None, now)
    assert decided is not None and decided.slot == SLOT + 10 * MIN
    job = decided.job
    assert job is not None
    assert (job.id, job.status, job.next_retry_at, job.type, job.label, job._reconstructor,
            job._params) == (occurrence_id("tidy", SLOT + 10 * MIN), Status.PENDING, now, "tidy",
                             "tidy", "tidy", {"schedule": "tidy", "slot": SLOT + 10 * MIN})
    assert decided.schedule == Schedule(definition(), SLOT + 10 * MIN, T, now, job.id)
    assert occurrence(decided.schedule, job, now + 1) is None  # accounted for


@pytest.mark.parametrize("status", ["pending", "running", "paused"])
def test_a_slot_due_while_the_previous_job_is_unfinished_is_skipped(status: str) -> None:
    previous = record("periodic:tidy:1", status=status)
    stored = Schedule(definition(), SLOT, T, T, previous.id)
    decided = occurrence(stored, previous, SLOT + MIN)
    assert decided is not None and decided.job is None
    assert decided.schedule == Schedule(definition(), SLOT + MIN, T, SLOT + MIN, previous.id)


@pytest.mark.parametrize("status", ["done", "failed", "cancelled"])
def test_a_finished_or_missing_previous_job_lets_the_slot_run(status: str) -> None:
    previous = record("periodic:tidy:1", status=status)
    stored = Schedule(definition(), SLOT, T, T, previous.id)
    for prev in (previous, None):
        decided = occurrence(stored, prev, SLOT + MIN)
        assert decided is not None and decided.job is not None


def test_earliest_wake_is_the_soonest_next_slot() -> None:
    a = Schedule(definition(), SLOT, T, T)
    b = Schedule(definition(name="b", every_ms=15 * MIN), slot_at(15 * MIN, T), T, T)
    assert earliest_wake([a, b]) == SLOT + MIN
    assert earliest_wake([]) is None


def test_a_definition_is_checked_where_it_is_made() -> None:
    with pytest.raises(InvalidJobError, match="every must be a whole number"):
        definition(every_ms=999)
    with pytest.raises(InvalidJobError, match="every must be a whole number"):
        definition(every_ms=1000.5)
    with pytest.raises(InvalidJobError, match="max_attempts"):
        definition(max_attempts=0)
    with pytest.raises(InvalidJobError, match="type"):
        definition(type="")
    with pytest.raises(InvalidJobError):
        definition(name="")


def test_the_stored_form_round_trips_and_bad_values_are_named() -> None:
    stored = Schedule(definition(group="g"), SLOT, T, T + 1, "periodic:tidy:1")
    assert Schedule.from_dict(stored.to_dict()) == stored
    assert stored.to_dict()["v"] == 1 and stored.to_dict()["name"] == "tidy"
    with pytest.raises(ScheduleError, match="malformed") as bad:
        Schedule.from_dict({**stored.to_dict(), "last_slot": "soon"})
    assert not bad.value.foreign
    with pytest.raises(ScheduleError, match="newer") as newer:
        Schedule.from_dict({**stored.to_dict(), "v": 2})
    assert newer.value.foreign
    with pytest.raises(ScheduleError):
        Schedule.from_dict([1])
    with pytest.raises(ScheduleError):
        Schedule.from_dict({"name": "x"})
