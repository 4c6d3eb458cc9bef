"""The lease holder's view of the queue (pyjobq/core/view.py), step by step."""

from __future__ import annotations

from pyjobq.core.status import Status
from pyjobq.core.view import DUE_ALWAYS, Entry, QueueView

T0 = 1_700_000_000_000.0


def entry(job_id: str, type: str = "t", status: Status = Status.PENDING, created: float = T0,
          due: float | None = T0, **kw: object) -> Entry:
    return Entry(job_id, type, status, created,
                 due if status is Status.PENDING or kw.pop("lease", False) else None,
                 **kw)  # type: ignore[arg-type]


def test_picks_the_oldest_due_job_of_every_idle_type() -> None:
    rows = [entry("a2", "a", created=T0 + 2), entry("a1", "a", created=T0 + 1),
            entry("b1", "b", created=T0 + 3), entry("c-late", "c", due=T0 + 500),
            entry("r", "d", Status.RUNNING), entry("z", "e", Status.PAUSED)]
    view = QueueView()
    view.replace(rows)
    assert [e.id for e in view.picks(T0, busy_types=set())] == ["a1", "b1"]
    assert [e.id for e in view.picks(T0, busy_types={"a"})] == ["b1"]
    # oldest first
    assert [e.id for e in view.picks(T0 + 500, busy_types=set())] == ["c-late", "a1", "b1"]


def test_a_job_not_yet_due_does_not_hold_up_a_younger_due_one_of_its_type() -> None:
    view = QueueView()
    view.replace([entry("old-retrying", created=T0, due=T0 + 30_000),
                  entry("young", created=T0 + 1)])
    assert view.oldest_due("t", T0) == entry("young", created=T0 + 1)
    assert view.oldest_due("t", T0, exclude={"young"}) is None


def test_own_writes_move_entries_and_finished_ones_leave() -> None:
    view = QueueView()
    view.replace([entry("a"), entry("b", created=T0 + 1)])
    view.apply(entry("a", status=Status.RUNNING, owner="me"))
    assert [e.id for e in view.with_status(Status.RUNNING)] == ["a"]
    assert view.oldest_due("t", T0).id == "b"  # a running record is no pick (not a lease)
    view.apply(entry("a", status=Status.DONE))
    assert "a" not in view and len(view) == 1
    view.forget("b")
    assert view.picks(T0, set()) == [] and view.next_due_at() is None


def test_a_running_lease_that_ran_out_is_a_pick_only_on_leases() -> None:
    view = QueueView()
    view.replace([entry("l", status=Status.RUNNING, due=T0 - 1, lease=True)])
    assert view.picks(T0, set()) == []
    assert [e.id for e in view.picks(T0, set(), leases=True)] == ["l"]


def test_next_due_at_skips_what_is_already_due_when_asked_for_after() -> None:
    view = QueueView()
    view.replace([entry("now", due=T0), entry("soon", created=T0 + 1, due=T0 + 100),
                  entry("later", created=T0 + 2, due=T0 + 900)])
    assert view.next_due_at() == T0
    assert view.next_due_at(after=T0) == T0 + 100
    view.apply(entry("soon", created=T0 + 1, status=Status.RUNNING))
    assert view.next_due_at(after=T0) == T0 + 900
    assert view.next_due_at(after=T0 + 900) is None


def test_news_only_marks_ids_to_read_again() -> None:
    view = QueueView()
    view.replace([entry("a")])
    view.mark_stale("a")
    view.mark_stale("new")
    assert "new" not in view  # news is not truth: nothing is added from it
    assert view.stale() == ["a", "new"] and view.stale() == []
    view.mark_stale("a")
    view.apply(entry("a", status=Status.RUNNING))  # read from the store: no longer stale
    assert view.stale() == []


def test_snapshot_tells_whether_a_read_changed_anything() -> None:
    view = QueueView()
    view.replace([entry("a")])
    before = view.snapshot()
    again = QueueView()
    again.replace([entry("a")])
    assert again.snapshot() == before
    again.replace([entry("a"), entry("b", created=T0 + 1)])
    assert again.snapshot() != before


def test_fifo_picks_the_one_oldest_due_record_of_any_type_and_nothing_while_one_is_busy() -> None:
    rows = [entry("react", "msg/react", created=T0 + 2), entry("send", "msg/send", created=T0 + 1),
            entry("send2", "msg/send", created=T0 + 3),
            entry("early-not-due", "msg/send", created=T0, due=T0 + 9)]
    view = QueueView()
    view.replace(rows)
    assert [e.id for e in view.picks(T0, busy_types=set(), lanes="fifo")] == ["send"]
    # one at a time, whatever its type
    assert view.picks(T0, busy_types={"msg/send"}, lanes="fifo") == []
    assert [e.id for e in view.picks(T0, set(), exclude={"send"}, lanes="fifo")] == ["react"]
    assert [e.id for e in view.picks(T0 + 9, set(), lanes="fifo")] == ["early-not-due"]
    # The settle's follow-on: the next oldest of any type (fifo), or of its own lane (type).
    assert view.follow_on("msg/send", T0, exclude={"send"}, lanes="fifo").id == "react"
    assert view.follow_on("msg/send", T0, exclude={"send"}).id == "send2"


# ---------------------------------------------------------------- keys that replace


def test_a_keyed_job_waits_while_its_key_runs_in_any_lane_and_its_lane_goes_on() -> None:
    view = QueueView()
    view.replace([entry("running", "a", Status.RUNNING, key="k"),
                  entry("keyed", "b", created=T0 + 1, key="k"),
                  entry("plain", "b", created=T0 + 2),
                  entry("other-key", "c", created=T0 + 3, key="k2")])
    assert [e.id for e in view.picks(T0, busy_types={"a"})] == ["plain", "other-key"]
    view.apply(entry("running", "a", Status.DONE, key="k"))  # its run ended
    assert [e.id for e in view.picks(T0, busy_types=set())] == ["keyed", "other-key"]


def test_a_keyed_job_waits_while_a_run_of_its_key_is_ours_in_flight() -> None:
    view = QueueView()
    view.replace([entry("ours", "a", key="k"), entry("next", "b", created=T0 + 1, key="k")])
    assert [e.id for e in view.picks(T0, busy_types={"a"}, exclude={"ours"})] == []


def test_an_older_waiting_job_behind_a_newer_one_of_its_key_is_superseded_never_started() -> None:
    """A keyed run that fell back to waiting (retry, recovery, retry_job) behind a newer job of
    its key: the view never starts it — not as a pick, not as a settle's follow-on — and lists
    it to be replaced; the newer one starts."""
    view = QueueView()
    old = entry("old", "a", created=T0, key="k", attempts=1)
    new = entry("new", "b", created=T0 + 1, key="k")
    view.replace([old, new, entry("paused-old", "c", Status.PAUSED, created=T0 - 1, key="k"),
                  entry("alone", "a", created=T0 + 2, key="k2")])
    assert [e.id for e in view.superseded()] == ["paused-old", "old"]
    assert [e.id for e in view.picks(T0, busy_types=set())] == ["new", "alone"]
    assert view.follow_on("a", T0) == entry("alone", "a", created=T0 + 2, key="k2")
    view.forget("old")
    view.forget("paused-old")
    assert view.superseded() == []
    assert [e.id for e in view.keyed("k")] == ["new"]


def test_a_pending_record_with_no_time_reads_as_due_already() -> None:
    # pyjobq stores none; another writer (or an older pyjobq) may: skipped, it stayed pending.
    # Due already, not at its updated_at: another writer's clock may be ahead of ours.
    view = QueueView()
    view.replace([Entry("no-time", "t", Status.PENDING, T0, None, updated_at=T0 + 60_000),
                  Entry("paused", "t", Status.PAUSED, T0, None, updated_at=T0)])
    assert [e.id for e in view.picks(T0, busy_types=set())] == ["no-time"]
    assert view.next_due_at() == DUE_ALWAYS and view.next_due_at(T0) is None  # no timer for it
    view.apply(Entry("no-time", "t", Status.RUNNING, T0, None, updated_at=T0 + 6))
    assert view.picks(T0 + 10, busy_types=set()) == [] and view.next_due_at() is None
