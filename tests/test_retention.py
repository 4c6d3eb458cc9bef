"""Retention (spec job-queue.txt "Startup and cleanup"):
the lease holder sweeps old done records."""

from __future__ import annotations

import math
from typing import Any

import pytest

import pyjobq
from helpers import one_tab
from pyjobq import ConfigurationError, config
from pyjobq.config import Settings
from pyjobq.core.mode import JOB_QUEUE, OUTBOX, RETENTION_MS, VOLATILE
from pyjobq.core.retention import SWEEP_EVERY_MS, sweep_due, sweepable
from pyjobq.core.status import Status
from pyjobq.executor.wiring import in_process
from pyjobq.memory import MemoryStore
from pyjobq.testing import FakeClock, World, run, settle
from store_contract import make_record

DAY = 24 * 3600 * 1000.0


def aged(job_id: str, status: str, age_ms: float, now: float, **kw: Any) -> Any:
    return make_record(job_id, status=status, updated_at=now - age_ms, created_at=now - age_ms,
                       next_retry_at=None, **kw)


def test_sweepable_takes_only_done_records_past_retention() -> None:
    now = 1_000 * DAY
    records = [aged("done-old", "done", RETENTION_MS + 1, now),
               aged("done-7d", "done", RETENTION_MS, now),
               aged("failed-old", "failed", 30 * DAY, now),
               aged("cancelled-old", "cancelled", 30 * DAY, now),
               make_record("pending-old", updated_at=now - 30 * DAY, created_at=now - 30 * DAY),
               aged("running-old", "running", 30 * DAY, now, owner="x"),
               aged("paused-old", "paused", 30 * DAY, now)]
    assert [r.id for r in sweepable(records, now, RETENTION_MS)] == ["done-old"]


def test_a_sweep_is_due_on_taking_the_lease_and_then_every_hour() -> None:
    assert sweep_due(None, 0.0)
    assert not sweep_due(0.0, SWEEP_EVERY_MS - 1)
    assert sweep_due(0.0, SWEEP_EVERY_MS)


def test_only_the_job_queue_sweeps() -> None:
    assert JOB_QUEUE.retention_ms == 7 * DAY
    assert VOLATILE.retention_ms is None and OUTBOX.retention_ms is None


def test_the_lease_holder_sweeps_on_taking_the_lease_in_one_transaction_and_publishes_it() -> None:
    async def main() -> None:
        world = World()
        now = world.clock.now()
        keep = [aged("done-new", "done", DAY, now),
                aged("failed-old", "failed", 30 * DAY, now, error="no"),
                aged("cancelled-old", "cancelled", 30 * DAY, now)]
        old = [aged(f"done-old-{i}", "done", RETENTION_MS + 1 + i, now) for i in range(3)]
        await world.store.add(keep + old)
        deletes: list[list[str]] = []
        real = world.store.delete_many

        async def delete_many(ids: Any) -> None:
            deletes.append(sorted(ids))
            await real(ids)

        world.store.delete_many = delete_many  # type: ignore[method-assign]
        watcher = world.open_tab()  # another tab, its table open
        heard: list[Any] = []
        watcher.side.on_update(heard.append)
        await settle()  # the watcher took the lease: it swept
        assert deletes == [sorted(r.id for r in old)]  # one batched delete, done records only
        assert sorted(r.id for r in await world.store.all()) == sorted(r.id for r in keep)
        other = world.open_tab()
        seen: list[Any] = []
        other.side.on_update(seen.append)
        watcher.side.enqueue_fetch("POST", "/x")  # any news: a pass
        await settle()
        assert {u.id for u in seen if u.get("deleted")} == set()  # nothing more to sweep
        assert {u.id for u in heard if u.get("deleted")} == {r.id for r in old}
    run(main)


def test_the_holder_sweeps_again_within_the_interval_while_it_holds_the_lease() -> None:
    async def main() -> None:
        world = World()
        world.open_tab()
        await settle()
        now = world.clock.now()
        # Done just under seven days ago: expires during the next hour.
        await world.store.add([aged("soon", "done", RETENTION_MS - 60_000, now)])
        await world.advance(60_001)
        assert await world.store.get("soon") is not None  # expired, but no sweep is due yet
        await world.advance(SWEEP_EVERY_MS)
        assert await world.store.get("soon") is None  # swept by itself, with no enqueue or wake
    run(main)


def test_cleanup_old_publishes_its_deletions() -> None:
    async def main() -> None:
        world, tab = one_tab()
        other = world.open_tab()
        await settle()
        now = world.clock.now()
        await world.store.add([aged("old", "done", RETENTION_MS + 1, now)])
        heard: list[Any] = []
        other.side.on_update(heard.append)
        assert await tab.side.cleanup_old() == 1
        await settle()
        assert [(u.id, u.get("deleted")) for u in heard] == [("old", True)]
    run(main)


# ---------------------------------------------------------------- configured retention

def test_failed_records_are_sweepable_only_when_asked_and_nothing_unfinished_ever_is() -> None:
    now = 1_000 * DAY
    records = [aged("done-old", "done", 40 * DAY, now),
               aged("failed-old", "failed", 31 * DAY, now, error="no"),
               aged("failed-new", "failed", 29 * DAY, now, error="no"),
               aged("paused-old", "paused", 40 * DAY, now)]
    assert [r.id for r in sweepable(records, now, 30 * DAY, Status.FAILED)] == ["failed-old"]
    with pytest.raises(ValueError, match="only done and failed"):
        sweepable(records, now, DAY, Status.PAUSED)


def test_the_settings_give_the_job_queue_its_retention() -> None:
    assert Settings().mode == JOB_QUEUE  # today's rules: done 7 days, failed until deleted
    mode = Settings(keep_done_days=1, keep_failed_days=30).mode
    assert (mode.retention_ms, mode.failed_retention_ms) == (DAY, 30 * DAY)
    assert mode.run_locks and mode.recheck_ms == JOB_QUEUE.recheck_ms  # the rest as ever
    with pytest.raises(ValueError, match="failed_retention_ms must be a positive number"):
        JOB_QUEUE.with_retention(DAY, 0)


@pytest.mark.parametrize("name, value", [
    ("keep_done_days", 0), ("keep_done_days", None), ("keep_done_days", True),
    ("keep_failed_days", -1), ("keep_failed_days", math.inf), ("keep_failed_days", "30")])
def test_a_retention_that_is_not_a_number_of_days_is_refused(name: str, value: Any) -> None:
    before = config.settings()
    with pytest.raises(ConfigurationError, match=f"{name} must be a finite number of days > 0"):
        pyjobq.configure(**{name: value})
    assert config.settings() == before  # nothing changed


def test_a_queue_that_keeps_failed_jobs_a_while_sweeps_them_past_it_and_done_ones_past_theirs(
) -> None:
    async def main() -> None:
        clock = FakeClock()
        store = MemoryStore(clock)
        now = clock.now()
        old_failed = aged("failed-old", "failed", 31 * DAY, now, error="no")
        kept = [aged("failed-new", "failed", 29 * DAY, now, error="no"),
                aged("done-new", "done", DAY / 2, now),
                aged("cancelled-old", "cancelled", 90 * DAY, now)]
        await store.add([old_failed, aged("done-old", "done", 2 * DAY, now), *kept])
        engine = in_process(store=store, source="tab", clock=clock, lock_name="sweeps",
                            mode=Settings(keep_done_days=1, keep_failed_days=30).mode)
        deleted: list[str] = []
        engine.link.subscribe(lambda m: deleted.extend(
            r["id"] for r in m.get("jobs", ()) if r.get("deleted")))
        await settle()  # it took the lease: it swept
        assert sorted(r.id for r in await store.all()) == sorted(r.id for r in kept)
        assert sorted(deleted) == ["done-old", "failed-old"]  # published as deleted
        engine.scheduler.stop()
    run(main)
