"""The lanes: one job per type at a time, oldest first; orphans; unparkable paused jobs."""

from __future__ import annotations

from pyjobq.core.lanes import orphans, unparkable
from pyjobq.core.records import JobRecord
from pyjobq.core.status import Status
from pyjobq.testing import record


def rec(job_id: str, type_: str = "a", created: float = 0.0, status: Status = Status.PENDING,
        yield_lock: str | None = None) -> JobRecord:
    return record(job_id, type=type_, created_at=created, status=status, yield_lock=yield_lock,
                  params=None, next_retry_at=created)


def test_orphans_skip_in_flight_and_non_running() -> None:
    running = [rec("x", status=Status.RUNNING), rec("y", status=Status.RUNNING), rec("z")]
    assert orphans(running, in_flight={"x"}) == [rec("y", status=Status.RUNNING)]
    assert orphans(running, in_flight=set()) == [rec("x", status=Status.RUNNING),
                                                 rec("y", status=Status.RUNNING)]


def test_unparkable_returns_paused_jobs_whose_lock_is_not_held_exclusively() -> None:
    paused = [
        rec("free", status=Status.PAUSED, yield_lock="L1"),
        rec("held", status=Status.PAUSED, yield_lock="L2"),
        rec("shared", status=Status.PAUSED, yield_lock="L3"),
        rec("suspended", "t", status=Status.PAUSED, yield_lock=None),
        rec("pending", status=Status.PENDING, yield_lock="L1"),
    ]
    held = {"L2": "exclusive", "L3": "shared"}
    assert [r.id for r in unparkable(paused, held, suspended={"t"})] == ["free", "shared"]


def test_a_record_paused_with_no_yield_lock_and_no_suspension_is_unparkable() -> None:
    # Another writer's (or an older pyjobq's) paused record: nothing else would ever unpark it.
    paused = [rec("foreign", "t", status=Status.PAUSED, yield_lock=None),
              rec("suspended", "s", status=Status.PAUSED, yield_lock=None)]
    assert [r.id for r in unparkable(paused, {}, suspended={"s"})] == ["foreign"]


# ---------------------------------------------------------------- park or claim: plan_starts

from pyjobq.core.lanes import Starts, chains, plan_starts  # noqa: E402
from pyjobq.core.view import Entry  # noqa: E402


def ent(job_id: str, type_: str) -> Entry:
    return Entry(job_id, type_, Status.PENDING, 0.0, 0.0)


def test_every_pick_is_claimed_when_nothing_yields_or_is_suspended() -> None:
    picks = [ent("a1", "a"), ent("b1", "b")]
    assert plan_starts(picks, suspended=set(), yields={}, held={}) == Starts(claims=tuple(picks))


def test_a_suspended_type_is_parked_with_no_lock_and_nothing_is_watched() -> None:
    picks = [ent("a1", "a"), ent("b1", "b")]
    assert plan_starts(picks, suspended={"b"}, yields={}, held={}) \
        == Starts(parks=((picks[1], None),), claims=(picks[0],))


def test_a_type_whose_yield_lock_is_held_exclusively_parks_on_it_and_watches_it_once() -> None:
    picks = [ent("a1", "a"), ent("b1", "b"), ent("c1", "c")]
    starts = plan_starts(picks, suspended=set(),
                         yields={"a": "typing", "b": "typing", "c": "other"},
                         held={"typing": "exclusive", "other": "shared"})
    assert starts == Starts(parks=((picks[0], "typing"), (picks[1], "typing")), claims=(picks[2],),
                            watch=("typing",))


def test_a_yield_lock_held_only_in_shared_mode_does_not_park() -> None:
    # Shared holders are watchers (our own watch among them), not foreground work.
    picks = [ent("a1", "a")]
    assert plan_starts(picks, suspended=set(), yields={"a": "typing"}, held={"typing": "shared"}) \
        == Starts(claims=(picks[0],))


def test_suspension_wins_over_a_held_yield_lock() -> None:
    picks = [ent("a1", "a")]
    assert plan_starts(picks, suspended={"a"}, yields={"a": "typing"},
                       held={"typing": "exclusive"}) == Starts(parks=((picks[0], None),))


def test_a_lane_chains_its_next_claim_only_when_nothing_else_must_be_decided() -> None:
    assert chains("a", suspended=set(), yields={}, busy_elsewhere=set())
    assert not chains("a", suspended={"a"}, yields={}, busy_elsewhere=set())
    assert not chains("a", suspended=set(), yields={"a": "typing"}, busy_elsewhere=set())
    assert not chains("a", suspended=set(), yields={}, busy_elsewhere={"a"})
    assert chains("a", suspended={"b"}, yields={"b": "typing"}, busy_elsewhere={"b"})


def test_a_run_lock_held_elsewhere_keeps_its_lane_busy_whatever_its_record_says() -> None:
    """A run lock another page holds on a job no longer unfinished (a run still on the wire) or
    on a pending one (taken ahead of a claim by a frozen former holder) keeps its lane busy; this
    page's own (in flight, or taken ahead) and shared holders (watches) do not."""
    from pyjobq.core.lanes import run_lock, types_held

    gone, taken_ahead = run_lock("q", "save", "x"), run_lock("q", "upload", "y")
    mine = run_lock("q", "sync", "m")
    held = {"q": "exclusive", gone: "exclusive", taken_ahead: "exclusive", mine: "exclusive",
            run_lock("q", "other", "w"): "shared",        # a watch, not a run
            # any script may name a lock
            "q:run:[not json": "exclusive", 'q:run:["t"]': "exclusive",
            "q:run:legacy-id": "exclusive", "other:run:[\"save\",\"z\"]": "exclusive"}
    assert gone == 'q:run:["save","x"]'
    assert types_held(held, "q", mine={"m"}) == {"save": gone, "upload": taken_ahead}
    assert types_held(held, "q", mine={"m", "y"}) == {"save": gone}


def test_a_lane_running_here_is_not_counted_busy_elsewhere() -> None:
    """``skip``: a lane running here may hold its next job's run lock before that job is in
    flight (a settle's follow-on); counting it as another page's broke the lane's chain and
    watched this page's own lock."""
    from pyjobq.core.lanes import run_lock, types_held

    next_here, elsewhere = run_lock("q", "save", "n"), run_lock("q", "upload", "u")
    held = {next_here: "exclusive", elsewhere: "exclusive"}
    assert types_held(held, "q", mine=set()) == {"save": next_here, "upload": elsewhere}
    assert types_held(held, "q", mine=set(), skip={"save"}) == {"upload": elsewhere}
