"""The in-flight table: every way out of it stops the flight's timer, lets its run lock go and
settles its waiters, exactly once."""

from __future__ import annotations

from pyjobq.engine.inflight import FlightTable
from pyjobq.testing import FakeClock, run


class Lock:
    def __init__(self) -> None:
        self.released = 0

    def __call__(self) -> None:
        self.released += 1


def table() -> tuple[FlightTable, FakeClock, list[str], list[int]]:
    clock, expired, ended = FakeClock(), [], [0]
    flights = FlightTable(clock, "tab", on_ended=lambda: ended.__setitem__(0, ended[0] + 1))
    return flights, clock, expired, ended


def test_a_flight_that_never_starts_meets_its_deadline_and_one_that_starts_does_not() -> None:
    flights, clock, expired, _ = table()
    slow = flights.add("a", "t", release_run_lock=None, deadline_ms=100,
                       on_deadline=lambda f: expired.append(f.job_id))
    quick = flights.add("b", "u", release_run_lock=None, deadline_ms=100,
                        on_deadline=lambda f: expired.append(f.job_id))
    flights.started(quick)
    clock.advance(100)
    assert expired == ["a"] and slow.claim != quick.claim and quick.started


def test_answers_are_matched_by_claim_and_an_older_claim_is_not_this_one() -> None:
    flights, *_ = table()
    flight = flights.add("a", "t", release_run_lock=None, deadline_ms=100,
                         on_deadline=lambda f: None)
    assert flights.for_answer({"job_id": "a", "claim": flight.claim}) is flight
    assert flights.for_answer({"job_id": "a", "claim": "tab:0"}) is None
    assert flights.for_answer({"job_id": "b", "claim": flight.claim}) is None


def test_finish_takes_it_out_stops_the_deadline_lets_the_lock_go_and_settles_waiters() -> None:
    async def main() -> None:
        flights, clock, expired, _ = table()
        lock = Lock()
        flight = flights.add("a", "t", release_run_lock=lock, deadline_ms=100,
                             on_deadline=lambda f: expired.append("a"))
        waiter = flight.wait_settled()
        flights.finish(flight)
        flights.finish(flight)  # twice is once
        clock.advance(1_000)
        assert ("a" in flights, flights.ours(), lock.released, waiter.done(), expired) \
            == (False, set(), 1, True, [])
    run(main)


def test_take_keeps_the_run_lock_until_finish() -> None:
    flights, *_ = table()
    lock = Lock()
    flight = flights.add("a", "t", release_run_lock=lock, deadline_ms=100,
                         on_deadline=lambda f: None)
    flights.take(flight)
    assert ("a" in flights, lock.released) == (False, 0)
    flights.finish(flight)
    assert lock.released == 1


def test_an_abandoned_run_keeps_its_type_and_lock_until_the_page_says_it_ended() -> None:
    async def main() -> None:
        flights, clock, _, ended = table()
        lock = Lock()
        flight = flights.add("a", "t", release_run_lock=lock, deadline_ms=100,
                             on_deadline=lambda f: None)
        waiter = flight.wait_settled()
        assert flights.abandon("a") is flight
        # Its waiters (suspend_type) wait for the run to end: its executor may still be saving.
        assert ("a" in flights, flights.ours(), flights.busy_types(), flights.ending, waiter.done(),
                lock.released) == (False, {"a"}, {"t"}, True, False, 0)
        assert flights.ended("tab:999") is False
        assert flights.ended(flight.claim) is True
        assert waiter.done()
        assert (flights.ours(), flights.busy_types(), flights.ending, lock.released, ended[0]) \
            == (set(), set(), False, 1, 1)
        assert flights.ended(flight.claim) is False  # its last word, heard twice
        clock.advance(10_000)
        assert (lock.released, ended[0]) == (1, 1)  # nothing of it fires later
    run(main)


def test_an_abandoned_run_ends_on_its_pages_word_only_however_late() -> None:
    # The page bounds an abandoned run from the moment it handles abandon_run; a clock here,
    # started when abandon_run was sent, ran out while a busy page had not yet handled it and
    # freed the type with the old request still on the wire.
    flights, clock, _, ended = table()
    lock = Lock()
    flight = flights.add("a", "t", release_run_lock=lock, deadline_ms=100,
                         on_deadline=lambda f: None)
    flights.abandon("a")
    clock.advance(3_600_000)
    assert (flights.ending, flights.busy_types(), lock.released, ended[0]) == (True, {"t"}, 0, 0)
    assert flights.ended(flight.claim) is True
    assert (flights.ending, flights.busy_types(), lock.released, ended[0]) == (False, set(), 1, 1)


def test_abandoning_what_is_not_in_flight_does_nothing() -> None:
    flights, *_ = table()
    assert flights.abandon("nope") is None and not flights.ending


def test_a_run_abandoned_while_its_outcome_was_being_stored_ends_when_that_store_finishes() -> None:
    # Its page already answered (that answer is what was being stored): waiting out the grace
    # period would hold its type busy for nothing — and stopping the grace timer without ending
    # it would hold the type for ever (a simulation seed found that).
    flights, clock, _, ended = table()
    lock = Lock()
    flight = flights.add("a", "t", release_run_lock=lock, deadline_ms=100,
                         on_deadline=lambda f: None)
    flights.started(flight)
    flights.abandon("a")
    flights.finish(flight)
    assert (flights.ending, flights.busy_types(), lock.released, ended[0]) == (False, set(), 1, 1)
    clock.advance(10_000)
    assert (lock.released, ended[0]) == (1, 1)


def test_staggered_deadlines_are_each_met_on_time_by_the_one_timer() -> None:
    flights, clock, expired, _ = table()
    added = []
    for i, job_id in enumerate("abc"):
        added.append(flights.add(job_id, job_id, release_run_lock=None, deadline_ms=100,
                                 on_deadline=lambda f: expired.append((f.job_id, clock.now()))))
        clock.advance(30)  # a at 0, b at 30, c at 60: due at 100, 130, 160
    start = clock.now() - 90
    flights.started(added[1])  # b's deadline no longer applies
    clock.advance(9)
    assert expired == []
    clock.advance(1)
    assert expired == [("a", start + 100)]
    clock.advance(59)
    assert expired == [("a", start + 100)]
    clock.advance(1)
    assert expired == [("a", start + 100), ("c", start + 160)]
    clock.advance(1_000)
    assert len(expired) == 2  # each deadline is met once


def armed(clock: FakeClock) -> list[object]:
    """The clock's timers not cancelled."""
    return [t for _at, _n, t, _cb in clock._timers if not t.cancelled]


def test_many_runs_keep_one_timer_and_an_empty_table_keeps_none() -> None:
    flights, clock, expired, _ = table()
    runs = [flights.add(f"j{i}", "t", release_run_lock=None, deadline_ms=10_000,
                        on_deadline=lambda f: expired.append(f.job_id)) for i in range(50)]
    assert len(armed(clock)) == 1
    for flight in runs:
        flights.started(flight)
        flights.finish(flight)
    assert armed(clock) == [] and expired == []
    late = flights.add("late", "t", release_run_lock=None, deadline_ms=10_000,
                       on_deadline=lambda f: expired.append(f.job_id))
    flights.abandon(late.job_id)  # dropped: out of the running table, no deadline left
    assert armed(clock) == []
    clock.advance(20_000)
    assert expired == []
