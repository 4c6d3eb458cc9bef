"""The engine's mode value: the three presets decide what the flags used to,
and nonsense is refused."""

import dataclasses

import pytest

from pyjobq.core.mode import JOB_QUEUE, OUTBOX, VOLATILE, Mode


def test_the_job_queue_recovers_under_its_lease_with_run_locks_and_keeps_done_records():
    assert (JOB_QUEUE.run_locks, JOB_QUEUE.leases, JOB_QUEUE.recovers, JOB_QUEUE.on_success,
            JOB_QUEUE.volatile) == (True, False, True, "keep", False)


def test_volatile_jobs_need_no_run_locks_since_nothing_else_recovers_them():
    assert (VOLATILE.run_locks, VOLATILE.leases, VOLATILE.recovers, VOLATILE.volatile) == (
        False, False, True, True)


def test_the_outbox_claims_leases_and_deletes_done_entries():
    assert (OUTBOX.run_locks, OUTBOX.leases, OUTBOX.recovers, OUTBOX.on_success, OUTBOX.lease_ms) \
        == (False, True, False, "delete", 60_000.0)


def test_with_lease_changes_only_the_lease_length():
    longer = OUTBOX.with_lease(5_000)
    assert longer.lease_ms == 5_000
    assert dataclasses.replace(longer, lease_ms=OUTBOX.lease_ms) == OUTBOX


def test_a_mode_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        JOB_QUEUE.run_locks = False  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, words", [
    ({"on_success": "archive"}, "on_success must be 'keep' or 'delete'"),
    ({"lease_ms": 0}, "lease_ms must be a positive number"),
    ({"lease_ms": -5}, "lease_ms must be a positive number"),
    ({"lease_ms": 1_000, "run_locks": True}, "choose one"),
])
def test_a_mode_that_cannot_work_is_refused_with_its_reason(kwargs, words):
    with pytest.raises(ValueError, match=words):
        Mode("mine", **kwargs)


def test_the_scheduler_refuses_something_that_is_not_a_mode():
    from pyjobq.engine.scheduler import Scheduler

    with pytest.raises(TypeError, match="JOB_QUEUE, VOLATILE or OUTBOX"):
        Scheduler(store=None, locks=None, channel=None, link=None,
                  clock=None,  # type: ignore[arg-type]
                  lock_name="q", source="s", mode="outbox")  # type: ignore[arg-type]
