"""The retry policy driven step by step, asserting the whole record after each step (h11 style)."""

from __future__ import annotations

import pytest

from pyjobq.core import policy
from pyjobq.core.backoff import RETRY_AFTER_CAP_MS, make_backoff, retry_after_ms
from pyjobq.core.records import (
    JobRecord,
    RunResult,
    is_service_worker,
    new_id,
    service_worker_source,
)
from pyjobq.core.status import Event, Status
from pyjobq.errors import IllegalTransition
from pyjobq.testing import record

T0 = 1_000_000.0
BACKOFF = make_backoff(lambda: 0.0)  # exact steps: 1 s, 2 s, 4 s, ...


def fresh(max_attempts: int = 5, **changes: object) -> JobRecord:
    return record("j1", params={"method": "POST", "path": "/a", "body": {"x": 1}}, type="save",
                  group="doc", label="Save", created_at=T0,
                  **{"max_attempts": max_attempts, "next_retry_at": T0, **changes})


def settle(record: JobRecord, now: float, online: bool = True, lock: str | None = None,
           **outcome: object):
    return policy.settle(record, RunResult(**outcome), now=now, online=online, backoff=BACKOFF,
                         held_yield_lock=lock)


def test_new_record() -> None:
    assert fresh() == JobRecord(
        id="j1", type="save", group="doc", label="Save", status=Status.PENDING, attempts=0,
        max_attempts=5, created_at=T0, updated_at=T0, next_retry_at=T0, _reconstructor="fetch",
        _params={"method": "POST", "path": "/a", "body": {"x": 1}},
    )


def test_claim_spends_an_attempt_and_sets_the_owner() -> None:
    assert policy.claim(fresh(), T0 + 1, "tab-a") == fresh().evolve(
        status=Status.RUNNING, attempts=1, owner="tab-a", next_retry_at=None, updated_at=T0 + 1)


def test_claim_at_the_ceiling_fails_unrun() -> None:
    record = fresh(max_attempts=2, attempts=2)
    assert policy.claim(record, T0 + 1, "tab-a") == record.evolve(
        status=Status.FAILED, next_retry_at=None, updated_at=T0 + 1,
        error="no attempts left (2 of 2 spent)", code="attempts_exhausted")


def test_claim_at_the_ceiling_explains_itself_not_the_attempt_before() -> None:
    # Stored at its ceiling (by other code, an older pyjobq) after a 401: the claim fails it for
    # having no attempts left, and nothing of that 401 remains to blame.
    record = fresh(max_attempts=1, attempts=1, error="HTTPError: 401", http_status=401,
                   code="token_expired")
    assert policy.claim(record, T0 + 1, "tab-a") == record.evolve(
        status=Status.FAILED, next_retry_at=None, updated_at=T0 + 1,
        error="no attempts left (1 of 1 spent)", http_status=None, code="attempts_exhausted")


def test_ok_is_done() -> None:
    running = policy.claim(fresh(), T0, "tab-a")
    assert settle(running, T0 + 5, ok=True, result={"id": 7}, status=201) == running.evolve(
        status=Status.DONE, owner=None, updated_at=T0 + 5, result={"id": 7}, http_status=201)


def test_ok_clears_an_earlier_error() -> None:
    running = policy.claim(fresh(error="boom", code="x", http_status=500), T0, "tab-a")
    done = settle(running, T0, ok=True, result=None, status=200)
    assert (done.error, done.code, done.http_status) == (None, None, 200)


def test_ordinary_failure_with_attempts_left_goes_back_on_the_ladder() -> None:
    record = fresh()
    now = T0
    for attempt in range(1, 5):
        running = policy.claim(record, now, "tab-a")
        record = settle(running, now, ok=False, error="HTTPError: 500", status=500)
        assert record == running.evolve(status=Status.PENDING, owner=None, updated_at=now,
                                        next_retry_at=now + BACKOFF(attempt),
                                        error="HTTPError: 500", http_status=500)
        now = record.next_retry_at
    running = policy.claim(record, now, "tab-a")
    assert running.attempts == 5
    assert settle(running, now, ok=False, error="HTTPError: 500", status=500) == running.evolve(
        status=Status.FAILED, owner=None, updated_at=now, error="HTTPError: 500", http_status=500)


def test_ladder_delays_are_1_2_4_8_seconds() -> None:
    record, delays = fresh(), []
    for _ in range(4):
        record = settle(policy.claim(record, T0, "a"), T0, ok=False, error="e")
        delays.append(record.next_retry_at - T0)
    assert delays == [1000.0, 2000.0, 4000.0, 8000.0]


def test_max_attempts_one_fails_on_the_first_ordinary_failure() -> None:
    running = policy.claim(fresh(max_attempts=1), T0, "a")
    assert settle(running, T0, ok=False, error="e", status=500).status is Status.FAILED


def test_401_goes_back_in_60_s_and_gives_the_attempt_back() -> None:
    running = policy.claim(fresh(), T0, "tab-a")
    record = settle(running, T0 + 3, ok=False, error="expired", status=401, code="token_expired")
    assert record == running.evolve(
        status=Status.PENDING, owner=None, updated_at=T0 + 3, next_retry_at=T0 + 3 + 60_000,
        attempts=0, given_back=1, error="expired", http_status=401, code="token_expired",
        unauthorized_since=T0 + 3)


def test_401_never_fails_even_after_100_repeats() -> None:
    record = fresh(max_attempts=2)
    now = T0
    for i in range(100):
        record = settle(policy.claim(record, now, "a"), now, ok=False, error="expired", status=401)
        assert (record.status, record.attempts, record.next_retry_at) == (
            Status.PENDING, 0, now + 60_000)
        now += 60_000
    assert record.given_back == 100


def test_401_at_the_last_attempt_still_does_not_fail() -> None:
    running = policy.claim(fresh(max_attempts=3, attempts=2), T0, "a")
    assert running.attempts == 3
    record = settle(running, T0, ok=False, error="expired", status=401)
    assert (record.status, record.attempts) == (Status.PENDING, 2)


def test_offline_failure_gives_the_attempt_back_and_climbs_the_ladder() -> None:
    running = policy.claim(fresh(), T0, "a")
    first = settle(running, T0, online=False, ok=False, error="TypeError: Failed to fetch")
    assert first == running.evolve(status=Status.PENDING, owner=None, updated_at=T0,
                                   next_retry_at=T0 + 1000, attempts=0, given_back=1,
                                   error="TypeError: Failed to fetch", code="offline")
    second = settle(policy.claim(first, T0, "a"), T0, online=False, ok=False, error="x")
    # The ladder counts every try, counted or not: 2 s next, not 1 s again.
    assert (second.attempts, second.given_back, second.next_retry_at) == (0, 2, T0 + 2000)


def test_offline_for_a_long_time_never_fails_and_caps_the_delay() -> None:
    record = fresh(max_attempts=2)
    for _ in range(50):
        record = settle(policy.claim(record, T0, "a"), T0, online=False, ok=False, error="x")
    assert (record.status, record.attempts, record.next_retry_at) == (
        Status.PENDING, 0, T0 + 30_000)


@pytest.mark.parametrize("status", [400, 403, 409, 413, 422])
def test_400_403_409_413_422_fail_at_once_on_attempt_one_of_five(status: int) -> None:
    running = policy.claim(fresh(), T0, "a")
    record = settle(running, T0 + 1, ok=False, error="no", status=status, code="refused")
    assert record == running.evolve(
        status=Status.FAILED, owner=None, updated_at=T0 + 1, next_retry_at=None, attempts=1,
        error="no", http_status=status, code="refused")


@pytest.mark.parametrize("status", [400, 403, 409, 413, 422])
def test_terminal_statuses_fail_even_offline(status: int) -> None:
    running = policy.claim(fresh(), T0, "a")
    record = settle(running, T0, online=False, ok=False, error="no", status=status)
    assert record.status is Status.FAILED


def test_404_retries_on_the_ladder_then_fails_at_max_attempts() -> None:
    record, statuses = fresh(max_attempts=3), []
    for _ in range(3):
        record = settle(policy.claim(record, T0, "a"), T0, ok=False, error="not found", status=404)
        statuses.append((record.status, record.attempts))
    assert statuses == [(Status.PENDING, 1), (Status.PENDING, 2), (Status.FAILED, 3)]
    assert record.http_status == 404


def test_terminal_fails_at_once() -> None:
    running = policy.claim(fresh(), T0, "a")
    record = settle(running, T0, ok=False, error="cannot decode", terminal=True, code="bad_audio")
    assert record == running.evolve(
        status=Status.FAILED, owner=None, updated_at=T0, error="cannot decode", code="bad_audio")


def test_terminal_wins_over_401_and_offline() -> None:
    running = policy.claim(fresh(), T0, "a")
    record = settle(running, T0, online=False, ok=False, error="x", status=401, terminal=True)
    assert record.status is Status.FAILED


def test_interrupted_gives_the_attempt_back_and_is_pending_now() -> None:
    running = policy.claim(fresh(attempts=2), T0, "a")
    assert settle(running, T0 + 9, ok=False, error="aborted", interrupted=True) == running.evolve(
        status=Status.PENDING, owner=None, updated_at=T0 + 9, next_retry_at=T0 + 9, attempts=2,
        given_back=1, error="aborted")


def test_interrupted_with_the_lock_held_parks() -> None:
    running = policy.claim(fresh(), T0, "a")
    record = settle(running, T0, lock="fg", ok=False, error="aborted", interrupted=True)
    assert record == running.evolve(
        status=Status.PAUSED, owner=None, updated_at=T0, next_retry_at=None, attempts=0,
        given_back=1, error="aborted", yield_lock="fg")


def test_interrupted_on_the_last_attempt_is_not_failed() -> None:
    running = policy.claim(fresh(max_attempts=1), T0, "a")
    record = settle(running, T0, ok=False, error="aborted", interrupted=True)
    assert (record.status, record.attempts) == (Status.PENDING, 0)


def test_recover_spends_the_attempt_and_is_pending_now() -> None:
    running = policy.claim(fresh(), T0, "dead-tab")
    assert policy.recover(running, T0 + 50) == running.evolve(
        status=Status.PENDING, owner=None, updated_at=T0 + 50, next_retry_at=T0 + 50, attempts=1)


def test_recover_at_the_ceiling_fails() -> None:
    running = policy.claim(fresh(max_attempts=1), T0, "dead-tab")
    assert policy.recover(running, T0 + 50) == running.evolve(
        status=Status.FAILED, owner=None, updated_at=T0 + 50,
        error="the page running the last allowed attempt (1 of 1) went away mid-run",
        code="page_gone")


def test_recover_of_a_service_workers_run_gives_the_attempt_back_even_at_the_ceiling() -> None:
    # The browser ended the Service Worker at its event's limit: the run was cut short, not
    # failed by the job.
    running = policy.claim(fresh(max_attempts=1), T0, service_worker_source())
    assert policy.recover(running, T0 + 50) == running.evolve(
        status=Status.PENDING, owner=None, updated_at=T0 + 50, next_retry_at=T0 + 50,
        attempts=0, given_back=1, cut_short=1)
    assert not is_service_worker(new_id()) and not is_service_worker(None)
    # A job that kills the Service Worker every time spends its attempts after a few.
    worn = policy.claim(fresh(max_attempts=1).evolve(cut_short=policy.SW_GIVE_BACKS), T0,
                        service_worker_source())
    assert policy.recover(worn, T0 + 50).status is Status.FAILED


def test_attempts_given_back_for_other_causes_leave_the_service_workers_allowance_whole() -> None:
    # The jobs Background Sync exists for failed offline first: those give-backs say nothing of
    # the Service Worker, and must not use up what a run cut short by it may give back.
    offline_thrice = fresh(max_attempts=1).evolve(given_back=3, code="offline")
    running = policy.claim(offline_thrice, T0, service_worker_source())
    recovered = policy.recover(running, T0 + 50)
    assert (recovered.status, recovered.attempts, recovered.given_back, recovered.cut_short) == (
        Status.PENDING, 0, 4, 1)
    assert policy.revive(policy.claim(recovered, T0 + 60, "tab-a").evolve(
        status=Status.FAILED), T0 + 70).cut_short == 0


# ---------------------------------------------------------------- a terminal record's cause
# Each way a record ends, after an attempt that left its own error, status and code: the
# record explains the cause that ended it, never the attempt before.

def _after_a_401(max_attempts: int = 1) -> JobRecord:
    """A job whose first try got a 401 (given back), claimed again for its last allowed try."""
    first = policy.claim(fresh(max_attempts=max_attempts), T0, "tab-a")
    waiting = settle(first, T0 + 1, ok=False, error="HTTPError: 401", status=401,
                     code="token_expired")
    assert waiting == first.evolve(status=Status.PENDING, owner=None, updated_at=T0 + 1, attempts=0,
                                   given_back=1, next_retry_at=T0 + 1 + 60_000,
                                   error="HTTPError: 401", http_status=401, code="token_expired",
                                   unauthorized_since=T0 + 1)
    last = policy.claim(waiting, T0 + 60_001, "tab-a")
    assert last == waiting.evolve(status=Status.RUNNING, owner="tab-a", updated_at=T0 + 60_001,
                                  attempts=1, next_retry_at=None)
    return last


def test_a_page_gone_on_the_last_try_after_a_401_is_page_gone() -> None:
    last = _after_a_401()
    assert policy.recover(last, T0 + 60_100) == last.evolve(
        unauthorized_since=None,
        status=Status.FAILED, owner=None, updated_at=T0 + 60_100,
        error="the page running the last allowed attempt (1 of 1) went away mid-run",
        http_status=None, code="page_gone")


def test_a_page_gone_on_the_last_try_after_an_offline_failure_is_page_gone() -> None:
    first = policy.claim(fresh(max_attempts=1), T0, "tab-a")
    waiting = settle(first, T0 + 1, online=False, ok=False, error="TypeError: Failed to fetch")
    assert waiting == first.evolve(status=Status.PENDING, owner=None, updated_at=T0 + 1, attempts=0,
                                   given_back=1, next_retry_at=T0 + 1 + 1000,
                                   error="TypeError: Failed to fetch", code="offline")
    last = policy.claim(waiting, T0 + 1001, "tab-a")
    assert last == waiting.evolve(status=Status.RUNNING, owner="tab-a", updated_at=T0 + 1001,
                                  attempts=1, next_retry_at=None)
    assert policy.recover(last, T0 + 2000) == last.evolve(
        status=Status.FAILED, owner=None, updated_at=T0 + 2000,
        error="the page running the last allowed attempt (1 of 1) went away mid-run",
        http_status=None, code="page_gone")


def test_a_lease_reclaimed_on_the_last_try_after_a_401_is_page_gone() -> None:
    waiting = policy.settle(policy.claim(fresh(max_attempts=1), T0, "a", 1_000.0),
                            RunResult(ok=False, error="HTTPError: 401", status=401,
                                      code="token_expired"),
                            now=T0 + 1, online=True, backoff=BACKOFF)
    leased = policy.claim(waiting, T0 + 60_001, "a", 1_000.0)
    assert (leased.status, leased.attempts, leased.http_status, leased.next_retry_at) == (
        Status.RUNNING, 1, 401, T0 + 61_001)
    assert policy.reclaim(leased, T0 + 61_001, "b", 1_000.0) == leased.evolve(
        unauthorized_since=None, status=Status.FAILED, owner=None, updated_at=T0 + 61_001,
        next_retry_at=None,
        error="its lease ran out on the last allowed attempt (1 of 1): the page running it closed, "
              "crashed or froze mid-run, so whether its work was done is unknown",
        http_status=None, code="page_gone")


def test_a_handshake_failure_on_the_last_try_after_a_401_has_no_http_status() -> None:
    last = _after_a_401()
    failed = policy.fail(last, T0 + 70_001, "run_started never came", code="handshake_timeout")
    assert failed == last.evolve(
        unauthorized_since=None,
        status=Status.FAILED, owner=None, updated_at=T0 + 70_001,
        error="run_started never came", http_status=None, code="handshake_timeout")


def test_a_terminal_failure_after_a_401_carries_only_its_own_fields() -> None:
    # settle sets all three from the outcome (it always did): pinned here beside
    # the rest.
    last = _after_a_401(max_attempts=3)
    assert settle(last, T0 + 60_002, ok=False, error="cannot decode", terminal=True) == last.evolve(
        unauthorized_since=None,
        status=Status.FAILED, owner=None, updated_at=T0 + 60_002, error="cannot decode",
        http_status=None, code=None)


def test_a_cancel_after_a_401_has_no_http_status() -> None:
    last = _after_a_401()
    assert policy.cancel(last, T0 + 60_002) == last.evolve(
        unauthorized_since=None,
        status=Status.CANCELLED, owner=None, updated_at=T0 + 60_002, error="cancelled",
        http_status=None, code="cancelled")


def test_a_move_to_an_end_that_does_not_say_why_is_refused() -> None:
    with pytest.raises(TypeError, match=r"missing \['http_status'\]"):
        policy._move(policy.claim(fresh(), T0, "a"), Event.FAIL, T0, error="x", code=None)


def test_a_page_that_always_crashes_eventually_stops() -> None:
    record = fresh(max_attempts=3)
    for _ in range(3):
        record = policy.recover(policy.claim(record, T0, "a"), T0)
    assert (record.status, record.attempts) == (Status.FAILED, 3)


def test_recover_of_a_pending_record_is_illegal() -> None:
    with pytest.raises(IllegalTransition):
        policy.recover(fresh(), T0)


def test_park_and_unpark() -> None:
    parked = policy.park(fresh(), T0 + 1, "fg")
    assert parked == fresh().evolve(status=Status.PAUSED, next_retry_at=None, updated_at=T0 + 1,
                                    yield_lock="fg")
    assert policy.unpark(parked, T0 + 2) == fresh().evolve(updated_at=T0 + 2, next_retry_at=T0 + 2)


def test_a_park_in_a_backoff_keeps_what_is_left_of_it_for_the_unpark() -> None:
    waiting = fresh(attempts=1, next_retry_at=T0 + 1_000)  # the ladder's first step
    assert policy.backoff_left(waiting, T0 + 400) == T0 + 1_000
    assert policy.backoff_left(waiting, T0 + 1_000) is None  # due already
    assert policy.backoff_left(fresh(next_retry_at=None), T0) is None
    assert policy.backoff_left(policy.park(waiting, T0, None), T0) is None  # paused: not pending
    parked = policy.park(waiting, T0 + 400, None)
    assert parked == waiting.evolve(status=Status.PAUSED, next_retry_at=None, updated_at=T0 + 400)
    assert policy.unpark(parked, T0 + 500, T0 + 1_000) == waiting.evolve(updated_at=T0 + 500)
    # Resumed after the backoff would have ended: due at once, never in the past.
    assert policy.unpark(parked, T0 + 5_000, T0 + 1_000) == waiting.evolve(
        updated_at=T0 + 5_000, next_retry_at=T0 + 5_000)


@pytest.mark.parametrize("start", ["pending", "running", "paused"])
def test_cancel(start: str) -> None:
    record = {"pending": fresh(), "running": policy.claim(fresh(), T0, "a"),
              "paused": policy.park(fresh(), T0, "fg")}[start]
    assert policy.cancel(record, T0 + 1) == record.evolve(
        status=Status.CANCELLED, owner=None, next_retry_at=None, yield_lock=None, updated_at=T0 + 1,
        error="cancelled", code="cancelled")


def test_cancel_of_a_done_job_is_illegal() -> None:
    done = settle(policy.claim(fresh(), T0, "a"), T0, ok=True)
    with pytest.raises(IllegalTransition):
        policy.cancel(done, T0)


def test_revive_a_failed_job_with_a_fresh_budget_keeps_params() -> None:
    failed = settle(policy.claim(fresh(), T0, "a"), T0, ok=False, error="no", status=409,
                    code="conflict")
    assert policy.revive(failed, T0 + 7) == fresh().evolve(updated_at=T0 + 7, next_retry_at=T0 + 7)


def test_revive_a_cancelled_job() -> None:
    assert policy.revive(policy.cancel(fresh(), T0), T0 + 7) == fresh().evolve(updated_at=T0 + 7,
                                                                               next_retry_at=T0 + 7)


def test_failed_keeps_params() -> None:
    failed = settle(policy.claim(fresh(), T0, "a"), T0, ok=False, error="no", status=403)
    assert failed._params == {"method": "POST", "path": "/a", "body": {"x": 1}}


OUTCOMES = [
    dict(ok=True),
    dict(ok=False, error="e", status=500),
    dict(ok=False, error="e", status=404),
    dict(ok=False, error="e", status=401),
    dict(ok=False, error="e", status=403),
    dict(ok=False, error="e", terminal=True),
    dict(ok=False, error="e", interrupted=True),
]


@pytest.mark.parametrize("seed", range(20))
def test_attempts_never_exceed_max_attempts(seed: int) -> None:
    import random

    rng = random.Random(seed)
    record = fresh(max_attempts=rng.randint(1, 4))
    now = T0
    for _ in range(200):
        if record.status is Status.PENDING:
            record = policy.claim(record, now, "a")
        elif record.status is Status.RUNNING:
            if rng.random() < 0.1:
                record = policy.recover(record, now)
            else:
                record = settle(record, now, online=rng.random() < 0.7, **rng.choice(OUTCOMES))
        else:
            record = policy.revive(record, now) if record.status is not Status.DONE else fresh()
        assert 0 <= record.attempts <= record.max_attempts, record
        now += 1000


def test_offline_failure_is_coded_offline_and_back_online_makes_it_due_now() -> None:
    from pyjobq.core.policy import back_online

    NOW = T0 + 5
    record = policy.claim(fresh(), T0 + 1, "tab-a")
    waiting = policy.settle(record, RunResult(ok=False, error="TypeError: Failed to fetch"),
                            now=NOW, online=False, backoff=lambda a: 4000.0)
    assert (waiting.status, waiting.code, waiting.next_retry_at, waiting.attempts) == (
        "pending", "offline", NOW + 4000, 0)
    due = back_online(waiting, NOW + 10)
    assert due == waiting.evolve(next_retry_at=NOW + 10, updated_at=NOW + 10)
    # Only offline waits are pulled forward: a 401 keeps its 60 s, a due job is left alone.
    unauthorized = policy.settle(record, RunResult(ok=False, status=401), now=NOW, online=True,
                                 backoff=lambda a: 1.0)
    assert back_online(unauthorized, NOW + 10) is None
    assert back_online(due, NOW + 20) is None
    # A server-named code survives an offline failure; only an unnamed one is coded offline.
    named = policy.settle(record, RunResult(ok=False, code="busy"), now=NOW, online=False,
                          backoff=lambda a: 1.0)
    assert named.code == "busy"


@pytest.mark.parametrize("status", [500, 404, 503])
def test_a_failure_with_an_http_status_is_never_offline(status: int) -> None:
    """A server answered: the attempt counts whatever the network did afterwards."""
    running = policy.claim(fresh(max_attempts=1), T0, "a")
    record = settle(running, T0, online=False, ok=False, error="boom", status=status)
    assert record == running.evolve(status=Status.FAILED, owner=None, updated_at=T0, error="boom",
                                    http_status=status, code=None)


@pytest.mark.parametrize("status", [400, 401, 403, 409, 413, 422])
def test_without_the_job_queues_http_rules_a_status_is_an_ordinary_failure(status: int) -> None:
    running = policy.claim(fresh(max_attempts=3), T0, "tab")
    after = policy.settle(running, RunResult(ok=False, error="x", status=status), now=T0 + 1,
                          online=True, backoff=BACKOFF, http_status_rules=False)
    assert (after.status, after.attempts, after.given_back, after.next_retry_at,
            after.http_status) == (Status.PENDING, 1, 0, T0 + 1 + 1000, status)
    last = policy.claim(
        running.evolve(attempts=2, status=Status.PENDING, owner=None, next_retry_at=T0), T0, "tab")
    failed = policy.settle(last, RunResult(ok=False, error="x", status=status), now=T0 + 1,
                           online=True, backoff=BACKOFF, http_status_rules=False)
    assert (failed.status, failed.attempts) == (Status.FAILED, 3)


def test_without_the_job_queues_http_rules_offline_is_uncounted_whatever_the_error_carried() -> None:  # noqa: E501
    running = policy.claim(fresh(), T0, "tab")
    with_status = RunResult(ok=False, error="503", status=503)
    assert policy.settle(running, with_status, now=T0, online=False, backoff=BACKOFF).attempts == 1
    after = policy.settle(running, with_status, now=T0, online=False, backoff=BACKOFF,
                          http_status_rules=False)
    assert (after.status, after.attempts, after.given_back, after.code) == (
        Status.PENDING, 0, 1, policy.OFFLINE)


def test_after_abort_any_failure_is_an_interruption_and_a_success_stays_one() -> None:
    assert policy.after_abort(RunResult(ok=False, error="ValueError", terminal=True)) == RunResult(
        ok=False, error="ValueError", interrupted=True)
    assert policy.after_abort(RunResult(ok=True, result=1)) == RunResult(ok=True, result=1)


# ---------------------------------------------------------------- the claim's read-modify-write

def _stored(status: Status, **kw) -> JobRecord:
    return record("j", status=status, created_at=0.0, params=None, **{"next_retry_at": 0.0, **kw})


def test_claim_due_claims_a_pending_record_as_claim_does() -> None:
    pending = _stored(Status.PENDING, next_retry_at=0.0)
    assert policy.claim_due(pending, 5.0, "me", None) == policy.claim(pending, 5.0, "me", None)


def test_claim_due_leaves_anything_that_changed_since_the_view_saw_it_pending() -> None:
    for status in (Status.RUNNING, Status.PAUSED, Status.DONE, Status.FAILED, Status.CANCELLED):
        assert policy.claim_due(_stored(status), 5.0, "me", None) is None, status


def test_claim_due_on_leases_reclaims_only_a_running_lease_that_ran_out() -> None:
    running = policy.claim(_stored(Status.PENDING, next_retry_at=0.0), 0.0, "gone", 1_000.0)
    assert policy.claim_due(running, 999.0, "me", 1_000.0) is None  # still leased
    assert policy.claim_due(running, 1_000.0, "me", 1_000.0) == policy.reclaim(
        running, 1_000.0, "me", 1_000.0)
    # no leases: recovery's, not the claim's
    assert policy.claim_due(running, 5_000.0, "me", None) is None


# ---------------------------------------------------------------- 401s for a day, Retry-After

def _a_day_of_401s() -> tuple[JobRecord, float]:
    """A job answered 401 at every try, a minute apart, until it failed; and the time then."""
    record, now = fresh(max_attempts=2), T0
    while record.status is Status.PENDING:
        record = settle(policy.claim(record, now, "a"), now, ok=False, error="expired",
                        status=401)
        now += 60_000
    return record, now


def test_401s_for_a_day_fail_unauthorized_and_any_other_answer_ends_the_streak() -> None:
    record, now = _a_day_of_401s()
    assert record.status is Status.FAILED and record.code == "unauthorized"
    assert record.unauthorized_since == T0 and record.http_status == 401
    assert record.updated_at - T0 == policy.UNAUTHORIZED_FOR_MS
    assert "every attempt for 24 hours was answered 401" in (record.error or "")
    # A 500 between two 401s starts the day again: only an unbroken streak is a bound.
    streak = settle(policy.claim(fresh(), T0, "a"), T0, ok=False, status=401, error="x")
    other = settle(policy.claim(streak, T0 + 1, "a"), T0 + 1, ok=False, status=500, error="x")
    assert (streak.unauthorized_since, other.unauthorized_since) == (T0, None)
    again = settle(policy.claim(other, T0 + 10, "a"), T0 + policy.UNAUTHORIZED_FOR_MS,
                   ok=False, status=401, error="x")
    assert again.status is Status.PENDING
    assert again.unauthorized_since == T0 + policy.UNAUTHORIZED_FOR_MS


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_of_a_429_or_503_is_honoured_up_to_an_hour(status: int) -> None:
    running = policy.claim(fresh(), T0, "a")
    asked = settle(running, T0, ok=False, status=status, error="busy", retry_after_ms=120_000.0)
    assert asked.next_retry_at == T0 + 120_000 and asked.attempts == 1
    shorter = settle(running, T0, ok=False, status=status, error="busy", retry_after_ms=10.0)
    assert shorter.next_retry_at == T0 + 1000  # never sooner than the ladder's own step
    capped = settle(running, T0, ok=False, status=status, error="busy",
                    retry_after_ms=86_400_000.0)
    assert capped.next_retry_at == T0 + RETRY_AFTER_CAP_MS
    at_the_ceiling = policy.claim(fresh(max_attempts=1), T0, "a")
    assert settle(at_the_ceiling, T0, ok=False, status=status, error="busy",
                  retry_after_ms=120_000.0).status is Status.FAILED


def test_retry_after_means_nothing_on_another_status() -> None:
    running = policy.claim(fresh(), T0, "a")
    assert settle(running, T0, ok=False, status=500, error="x",
                  retry_after_ms=120_000.0).next_retry_at == T0 + 1000


@pytest.mark.parametrize("value, expected", [
    ("120", 120_000.0), (" 0 ", 0.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 5_000.0),
    ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0), ("-3", None), ("soon", None), ("1.5", None),
    (None, None), (120, None)])
def test_a_retry_after_header_reads_as_delay_seconds_or_an_http_date(value, expected) -> None:
    now = 1_445_412_480_000.0 - 5_000.0  # five seconds before 07:28:00 GMT
    assert retry_after_ms(value, now) == expected


def test_a_revived_job_starts_its_401s_afresh() -> None:
    record, now = _a_day_of_401s()
    assert record.code == "unauthorized"
    revived = policy.revive(record, now)
    assert revived.unauthorized_since is None
    again = settle(policy.claim(revived, now, "a"), now, ok=False, error="expired", status=401)
    assert (again.status, again.next_retry_at, again.unauthorized_since) == (
        Status.PENDING, now + 60_000, now)
    assert policy.cancel(again, now + 1).unauthorized_since is None


def test_an_attempt_that_reached_no_server_leaves_a_run_of_401s_as_it_was() -> None:
    streak = settle(policy.claim(fresh(), T0, "a"), T0, ok=False, status=401, error="x")
    offline = settle(policy.claim(streak, T0 + 1, "a"), T0 + 1, online=False, ok=False,
                     error="TypeError: Failed to fetch")
    interrupted = settle(policy.claim(offline, T0 + 2, "a"), T0 + 2, ok=False,
                         interrupted=True, error="yielded")
    assert offline.unauthorized_since == interrupted.unauthorized_since == T0
    answered = settle(policy.claim(interrupted, T0 + 3, "a"), T0 + 3, ok=False, status=500,
                      error="x")
    assert answered.unauthorized_since is None


@pytest.mark.parametrize("value", ["²", "¹²", "Mon, 01 Jan 2024 99999999999999999999:00:00 GMT"])
def test_a_retry_after_no_number_or_date_says_is_no_wait(value: str) -> None:
    assert retry_after_ms(value, T0) is None


def test_a_retry_after_beyond_an_hour_is_an_hour() -> None:
    assert retry_after_ms("9" * 400, T0) == RETRY_AFTER_CAP_MS
    assert retry_after_ms("7200", T0) == RETRY_AFTER_CAP_MS
