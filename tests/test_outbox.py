"""The outbox facade on the job queue's engine, on the memory store and a fake clock."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import pyjobq
from pyjobq.core import outbox_claims as claims
from pyjobq.core.backoff import make_backoff
from pyjobq.core.messages import parse, updated_jobs
from pyjobq.core.status import Status
from pyjobq.errors import InvalidJobError
from pyjobq.handle import Job
from pyjobq.memory import MemoryStore
from pyjobq.outbox import Outbox, OutboxEntry, OutboxHandler, Prune, outbox_backoff
from pyjobq.testing import T0, FakeClock, FreezableClock, record, run, settle

DAY = 24 * 3600 * 1000.0


class Calls:
    """Handlers that record what they were called with; ``fail`` makes process raise."""

    def __init__(self) -> None:
        self.processed: list[OutboxEntry] = []
        self.results: list[Any] = []
        self.exhausted: list[str] = []
        self.rolled_back: list[str] = []
        self.fail: Exception | None = None

    async def process(self, entry: OutboxEntry, **kw: Any) -> None:
        self.processed.append(entry)
        if "result" in kw:
            self.results.append(kw["result"])
        if self.fail is not None:
            raise self.fail

    def on_exhausted(self, entry: OutboxEntry) -> None:
        self.exhausted.append(entry.id)

    async def rollback(self, entry: OutboxEntry) -> None:
        self.rolled_back.append(entry.id)


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name in ("add", "get", "update", "update_many", "delete_many", "by_status", "by_group",
                    "entries", "next_due_at", "all"):
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


def make(store: MemoryStore | None = None, clock: FakeClock | None = None,
         **kw: Any) -> tuple[Outbox, Calls]:
    calls = Calls()
    handlers = kw.pop("handlers", None) or {
        "send": OutboxHandler(process=calls.process, on_exhausted=calls.on_exhausted),
        "react": {"process": calls.process, "rollback": calls.rollback},
    }
    kw.setdefault("poll_interval_ms", 0)
    kw.setdefault("backoff", outbox_backoff(random=lambda: 0.5))
    box = Outbox(store if store is not None else MemoryStore(), handlers,
                 clock=clock or FakeClock(), **kw)
    return box, calls


def started(fail: Exception | None = None, *, seed: tuple[dict[str, Any], ...] = (),
            store: MemoryStore | None = None,
            **kw: Any) -> tuple[Outbox, Calls, MemoryStore, FakeClock]:
    """``make()`` on ``store`` (a new one) holding the raw records ``seed`` and a new clock
    (at ``T0``), its process raising ``fail``, started."""
    store, clock = store if store is not None else MemoryStore(), FakeClock()
    for value in seed:
        store.put_raw(value)
    box, calls = make(store, clock, **kw)
    calls.fail = fail
    box.start()
    return box, calls, store, clock


def stored(job_id: str, type_: str, created_at: float, **changes: Any) -> dict[str, Any]:
    changes.setdefault("next_retry_at", created_at)
    return record(job_id, type=type_, reconstructor=type_, params={"n": job_id},
                  created_at=created_at, **changes).to_dict()


# ---------------------------------------------------------------- the facade and the store port

def test_outbox_is_exported_and_drives_the_engine_on_the_injected_store() -> None:
    async def main() -> None:
        assert pyjobq.Outbox is Outbox and "Outbox" in pyjobq.__all__
        store = MemoryStore()
        box, calls = make(store)
        assert box._scheduler.store is store  # one engine, on the port it was given
        box.start()
        job = await box.enqueue("send", {"text": "hi"})
        await settle()
        assert [(e.id, e.type, e.payload, e.attempts) for e in calls.processed] == [
            (job.id, "send", {"text": "hi"}, 1)]
        assert (await job.done).status == "done"
        assert await store.all() == []  # success deletes
        box.stop()
    run(main)


def test_enqueue_refuses_unknown_types_and_unstorable_payloads() -> None:
    async def main() -> None:
        box, _, *_ = started()
        with pytest.raises(InvalidJobError):
            await box.enqueue("nope", {})
        with pytest.raises(InvalidJobError):
            await box.enqueue("send", {"x": object()})
        box.stop()
    run(main)


# ---------------------------------------------------------------- claims

def test_claims_are_fifo_by_created_at_among_due_entries() -> None:
    async def main() -> None:
        box, calls, store, clock = started(seed=(
            stored("young", "send", T0 - 10, next_retry_at=T0),
            stored("old-not-due", "send", T0 - 30, next_retry_at=T0 + 500),
            stored("old", "send", T0 - 20, next_retry_at=T0 - 1),
        ))
        await settle()
        assert [e.id for e in calls.processed] == ["old", "young"]
        clock.advance(500)
        await settle()
        assert [e.id for e in calls.processed] == ["old", "young", "old-not-due"]
        box.stop()
    run(main)


def test_claims_read_keys_through_the_index_never_whole_due_records() -> None:
    async def main() -> None:
        box, calls, store, _ = started(store=CountingStore(), prune=False)
        # Both filed before the first settles (in one burst), so the settle can claim the next.
        await asyncio.gather(box.enqueue("send", {"big": "x" * 1000}),
                             box.enqueue("send", {"big": "y" * 1000}))
        await settle()
        assert len(calls.processed) == 2
        # the pass's view: fields read through the index, no payloads
        assert "entries" in store.calls
        assert "all" not in store.calls  # never every record, payloads and all
        # The claim is one read-modify-write of the one record it takes; the settle of the first
        # and the claim of the second share one transaction (group commit).
        assert store.calls.count("update_many") == 3 and "update" not in store.calls
        box.stop()
    run(main)


def test_a_lease_that_ran_out_is_claimable_again_and_a_live_one_is_not() -> None:
    async def main() -> None:
        box, calls, store, clock = started(seed=(
            stored("expired", "send", T0 - 100, status="running", owner="dead-tab", attempts=1,
                   next_retry_at=T0 - 1),
            stored("held", "send", T0 - 50, status="running", owner="other-tab", attempts=1,
                   next_retry_at=T0 + 5000),
        ))
        await settle()
        assert [(e.id, e.attempts) for e in calls.processed] == [("expired", 2)]
        assert (await store.get("held")).owner == "other-tab"
        # One timer, armed for the lease's end: no polling in between.
        assert clock.next_timer_at() == T0 + 5000
        clock.advance(4999)
        await settle()
        assert len(calls.processed) == 1
        clock.advance(1)
        await settle()
        assert [e.id for e in calls.processed] == ["expired", "held"]
        assert await store.all() == []
        box.stop()
    run(main)


def test_claims_are_leases_on_the_running_record() -> None:
    async def main() -> None:
        gate = asyncio.get_running_loop().create_future()
        box, _, store, clock = started(lease_ms=10_000,
                                       handlers={"send": {"process": lambda e: gate}})
        job = await box.enqueue("send", 1)
        await settle()
        record = await store.get(job.id)
        assert (record.status, record.owner, record.next_retry_at) == (
            Status.RUNNING, box.source, clock.now() + 10_000)
        # A second entry of the type is due but waits for its lane: the next timer is the
        # lease's renewal, a third of the lease away, not a zero-delay timer that would wake
        # the loop again and again.
        second = await box.enqueue("send", 2)
        await settle()
        assert (await store.get(second.id)).status is Status.PENDING
        assert clock.next_timer_at() == clock.now() + 10_000 / 3
        clock.advance(10_000 / 3)
        await settle()
        assert (await store.get(job.id)).next_retry_at == clock.now() + 10_000  # renewed
        assert (await store.get(second.id)).status is Status.PENDING
        gate.set_result(None)
        await settle()
        assert await store.get(job.id) is None and await store.get(second.id) is None
        box.stop()
    run(main)


# ---------------------------------------------------------------- failures

def test_failure_backs_off_minus_jitter_and_arms_one_timer() -> None:
    async def main() -> None:
        box, calls, store, clock = started(RuntimeError("server down"))
        job = await box.enqueue("send", 1)
        await settle()
        record = await store.get(job.id)
        # min(1000·2^0, 30000) minus 0.5·20 %.
        assert (record.status, record.attempts, record.next_retry_at) == (
            Status.PENDING, 1, clock.now() + 900)
        assert clock.next_timer_at() == record.next_retry_at
        clock.advance(900)
        await settle()
        assert (await store.get(job.id)).next_retry_at == clock.now() + 1800
        calls.fail = None
        clock.advance(1800)
        await settle()
        assert len(calls.processed) == 3 and await store.all() == []
        box.stop()
    run(main)


def test_the_default_backoff_subtracts_up_to_20_percent() -> None:
    ladder = outbox_backoff(random=lambda: 0.999)
    assert 800 < ladder(1) <= 1000 and 24_000 < ladder(9) <= 30_000
    assert outbox_backoff(random=lambda: 0.0)(3) == 4000
    assert make_backoff(lambda: 0.5)(1) == 1150  # the job queue's: plus up to 30 %

    async def main() -> None:
        box, _ = make(backoff=None)
        assert box._scheduler.backoff.jitter == -0.20
    run(main)


def test_offline_failure_costs_no_attempt_and_logs_skip(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        online = {"now": False}
        box, calls, store, clock = started(OSError("Failed to fetch"),
                                           is_online=lambda: online["now"])
        job = await box.enqueue("send", 1)
        await settle()
        record = await store.get(job.id)
        assert (record.status, record.attempts, record.given_back) == (Status.PENDING, 0, 1)
        assert [r.phase for r in caplog.records if getattr(r, "outbox_event", None)] == [
            "start", "skip"]
        box.stop()
    caplog.set_level(logging.INFO, logger="pyjobq")
    run(main)


def test_coming_back_online_drains() -> None:
    async def main() -> None:
        listeners: list[Any] = []

        def subscribe_online(callback: Any) -> Any:
            listeners.append(callback)
            return lambda: listeners.remove(callback)

        box, calls, store, clock = started(subscribe_online=subscribe_online)
        await settle()
        store.put_raw(stored("from-another-tab", "send", clock.now()))  # no wake reached us
        await settle()
        assert calls.processed == []
        listeners[0](True)
        await settle()
        assert [e.id for e in calls.processed] == ["from-another-tab"]
        box.stop()
        assert listeners == []  # stop() unsubscribes
    run(main)


def test_wake_and_the_watchdog_drain() -> None:
    async def main() -> None:
        box, calls, store, clock = started(poll_interval_ms=30_000)
        await settle()
        store.put_raw(stored("a", "send", clock.now()))
        clock.advance(29_999)
        await settle()
        assert calls.processed == []
        clock.advance(1)
        await settle()
        assert [e.id for e in calls.processed] == ["a"]
        store.put_raw(stored("b", "send", clock.now()))
        box.wake()
        await settle()
        assert [e.id for e in calls.processed] == ["a", "b"]
        box.stop()
        store.put_raw(stored("c", "send", clock.now()))
        clock.advance(60_000)
        await settle()
        assert len(calls.processed) == 2  # stopped: no watchdog, no drain
    run(main)


def test_non_retryable_error_exhausts_at_once_and_is_kept_for_manual_retry() -> None:
    async def main() -> None:
        store = MemoryStore()
        box, calls = make(store, is_retryable_error=lambda err: not isinstance(err, ValueError))
        calls.fail = ValueError("bad payload")
        box.start()
        job = await box.enqueue("send", 1)
        await settle()
        assert calls.exhausted == [job.id]
        failed = await box.list_failed()
        assert [(e.id, e.status, e.attempts) for e in failed] == [(job.id, "failed", 1)]
        assert "bad payload" in failed[0].error
        calls.fail = None
        assert await box.retry(job.id) is True
        await settle()
        assert await store.all() == [] and len(calls.processed) == 2
        box.stop()
    run(main)


def test_the_handlers_classifier_wins_over_the_options() -> None:
    async def main() -> None:
        calls = Calls()
        calls.fail = ValueError("x")
        box, _ = make(handlers={"send": OutboxHandler(process=calls.process,
                                                      on_exhausted=calls.on_exhausted,
                                                      is_retryable_error=lambda e: False)},
                      is_retryable_error=lambda e: True)
        box.start()
        job = await box.enqueue("send", 1)
        await settle()
        assert calls.exhausted == [job.id]
        box.stop()
    run(main)


def test_max_attempts_without_on_exhausted_rolls_back_then_deletes() -> None:
    async def main() -> None:
        box, calls, store, clock = started(RuntimeError("no"))
        job = await box.enqueue("react", {"emoji": "+1"}, max_attempts=2)
        await settle()
        clock.advance(900)
        await settle()
        assert calls.rolled_back == [job.id] and calls.exhausted == []
        assert await store.all() == []
        box.stop()
    run(main)


def test_a_rollback_cut_short_is_finished_by_the_next_start() -> None:
    async def main() -> None:
        box, calls, store, clock = started(seed=(
            stored("left", "react", T0, status="failed", next_retry_at=None, attempts=5),
            stored("kept", "send", T0, status="failed", next_retry_at=None, attempts=5),
        ))
        await settle()
        assert calls.rolled_back == ["left"] and calls.exhausted == []
        assert [r.id for r in await store.all()] == ["kept"]
        box.stop()
    run(main)


def test_unknown_type_warns_and_deletes(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        box, calls, store, clock = started(seed=(
            stored("ghost", "gone/type", T0),
            stored("fetchy", "fetch", T0),  # not the built-in fetch here
        ))
        await settle()
        assert await store.all() == [] and calls.processed == []
        warned = [r for r in caplog.records
                  if r.levelno == logging.WARNING and "never-happen" in r.getMessage()]
        assert sorted(r.entry_type for r in warned) == ["fetch", "gone/type"]
        box.stop()
    caplog.set_level(logging.INFO, logger="pyjobq")
    run(main)


# ---------------------------------------------------------------- transport

def test_transport_result_is_handed_to_process() -> None:
    async def main() -> None:
        class Transport:
            def __init__(self) -> None:
                self.fail = True

            async def send(self, entry: OutboxEntry) -> Any:
                if self.fail:
                    raise ConnectionError("worker busy")
                return {"sent": entry.payload}

        transport = Transport()
        box, calls, store, clock = started(transport=transport)
        job = await box.enqueue("send", 7)
        await settle()
        # send error: the retry path
        assert calls.processed == [] and (await store.get(job.id)).attempts == 1
        transport.fail = False
        clock.advance(900)
        await settle()
        assert calls.results == [{"sent": 7}] and await store.all() == []
        box.stop()
    run(main)


# ------------------------------------------------------------- yielding, pruning, activity, logging

@pytest.mark.parametrize("every,expected", [(1, 3), (2, 1), (0, 0)])
def test_yield_every(every: int, expected: int) -> None:
    async def main() -> None:
        idles: list[int] = []

        async def idle() -> None:
            idles.append(1)

        box, calls, *_ = started(yield_every=every, idle=idle)
        for n in range(3):
            await box.enqueue("send", n)
        await settle()
        assert len(calls.processed) == 3 and len(idles) == expected
        box.stop()
    run(main)


def test_prune_default_90_days_and_200_failed_and_false_disables() -> None:
    async def main() -> None:
        clock = FakeClock()
        t = clock.now()

        def fill(store: MemoryStore) -> None:
            store.put_raw(stored("ancient", "send", t - 100 * DAY, status="failed",
                                 next_retry_at=None, updated_at=t - 91 * DAY))
            for n in range(201):
                store.put_raw(stored(f"f{n:03d}", "send", t - 1000 + n, status="failed",
                                     next_retry_at=None, updated_at=t - 1000 + n))

        store = MemoryStore()
        fill(store)
        box, _ = make(store, clock)
        box.start()
        await settle()
        ids = [r.id for r in await store.all()]
        assert len(ids) == 200 and "ancient" not in ids and "f000" not in ids and "f200" in ids
        box.stop()

        kept = MemoryStore()
        fill(kept)
        box, _ = make(kept, clock, prune=False)
        box.start()
        await settle()
        assert len(await kept.all()) == 202
        box.stop()

        small = MemoryStore()
        fill(small)
        box, _ = make(small, clock, prune=Prune(max_age_ms=None, max_failed=5))
        box.start()
        await settle()
        assert [r.id for r in await small.all()] == ["f196", "f197", "f198", "f199", "f200"]
        box.stop()
    run(main)


def test_on_activity_hears_every_change() -> None:
    async def main() -> None:
        seen: list[tuple[str, bool]] = []
        box, _, *_ = started(
            on_activity=lambda u: seen.append((u["status"], bool(u.get("deleted")))))
        await box.enqueue("send", 1)
        await settle()
        assert seen == [("pending", False), ("running", False), ("done", False), ("done", True)]
        box.stop()
    run(main)


def test_logging_is_silent_by_default_with_one_structured_event_per_step(
        caplog: pytest.LogCaptureFixture) -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("pyjobq").handlers)

    async def main() -> None:
        box, calls, store, clock = started(RuntimeError("boom"))
        job = await box.enqueue("send", 1, max_attempts=2)
        await settle()
        clock.advance(900)
        await settle()
        calls.fail = None
        await box.retry(job.id)
        await settle()
        box.stop()
        return job.id

    caplog.set_level(logging.INFO, logger="pyjobq")
    job_id = run(main)
    events = [r for r in caplog.records if getattr(r, "outbox_event", None) == "outbox-process"]
    assert [r.phase for r in events] == ["start", "retry", "start", "error", "start", "done"]
    assert {r.entry_id for r in events} == {job_id} and {r.entry_type for r in events} == {"send"}
    assert [r.attempt for r in events] == [1, 1, 2, 2, 1, 1]
    assert events[3].levelno == logging.WARNING and "boom" in events[3].error


class SlowStore(MemoryStore):
    """A store whose reads take a few event-loop turns, as IndexedDB's do."""

    async def by_status(self, status: Any) -> Any:
        for _ in range(5):
            await asyncio.sleep(0)
        return await super().by_status(status)


def test_an_enqueue_right_after_start_on_a_slow_store_is_stored_and_processed() -> None:
    async def main() -> None:
        seen: list[Any] = []

        async def process(entry: OutboxEntry) -> None:
            seen.append(entry.payload)

        box = Outbox(SlowStore(), {"send": OutboxHandler(process=process)}, poll_interval_ms=0)
        box.start()
        # start()'s store check is still reading: the enqueue waits for it instead of being lost.
        job = await asyncio.wait_for(box.enqueue("send", "first"), 5)
        assert (await asyncio.wait_for(job.done, 5)).status == "done"
        assert seen == ["first"]
        box.stop()

    run(main)


# ---------------------------------------------------------------- the outbox as its users know it

def test_an_entry_enqueued_before_start_is_stored_at_once_and_sent_on_start() -> None:
    async def main() -> None:
        store = MemoryStore()
        box, calls = make(store)
        # no start(): still stored
        job = await asyncio.wait_for(box.enqueue("send", {"text": "early"}), 1)
        assert [(r.id, r.status) for r in await store.all()] == [(job.id, Status.PENDING)]
        await settle()
        assert calls.processed == []  # not sent before start()
        box.start()
        await settle()
        assert [e.payload for e in calls.processed] == [{"text": "early"}]
        assert (await job.done).status == "done" and await store.all() == []
        box.stop()
    run(main)  # a hang fails instead of stalling


def test_stop_then_start_drains_again_and_entries_enqueued_while_stopped_wait_for_it() -> None:
    async def main() -> None:
        box, calls, store, _ = started()
        await box.enqueue("send", 1)
        await settle()
        box.stop()
        job = await asyncio.wait_for(box.enqueue("send", 2), 1)
        await settle()
        assert [e.payload for e in calls.processed] == [1]
        assert [r.id for r in await store.all()] == [job.id]
        box.start()
        await settle()
        assert [e.payload for e in calls.processed] == [1, 2]
        box.stop()
        await box.enqueue("send", 3)
        box.resume()  # the spec's "drains on ... resume": a stopped outbox starts again
        await settle()
        assert [e.payload for e in calls.processed] == [1, 2, 3]
        await box.enqueue("send", 4)
        box.resume()  # and a running one drains now
        await settle()
        assert [e.payload for e in calls.processed] == [1, 2, 3, 4]
        box.stop()
    run(main)  # a hang fails instead of stalling


def test_a_process_running_at_stop_finishes_and_its_outcome_is_stored() -> None:
    async def main() -> None:
        store = MemoryStore()
        gate = asyncio.Event()
        done: list[Any] = []

        async def slow(entry: OutboxEntry) -> None:
            await gate.wait()
            done.append(entry.payload)

        box, _ = make(store, handlers={"send": {"process": slow}})
        box.start()
        job = await box.enqueue("send", "a")
        await box.enqueue("send", "b")
        await settle()
        box.stop()
        gate.set()
        await settle()
        assert done == ["a"] and (await job.done).status == "done"  # settled, not left to its lease
        assert [r._params for r in await store.all()] == ["b"]  # nothing claimed after stop()
        box.start()
        await settle()
        assert done == ["a", "b"]
        box.stop()
    run(main)  # a hang fails instead of stalling


def test_claims_are_fifo_across_types_one_at_a_time() -> None:
    """Spec: "FIFO by createdAt among due keys". The spec's own handlers: a reaction must never
    reach the server before the message it reacts to."""
    async def main() -> None:
        server: list[str] = []
        in_flight = {"now": 0, "most": 0}

        async def api(entry: OutboxEntry) -> None:
            in_flight["now"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["now"])
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            server.append(f"{entry.type}:{entry.payload}")
            in_flight["now"] -= 1

        handlers = {"msg/send": {"process": api}, "msg/react": {"process": api}}
        box, _, store, _ = started(handlers=handlers)
        await asyncio.gather(box.enqueue("msg/send", "m1"), box.enqueue("msg/react", "r1"),
                             box.enqueue("msg/send", "m2"), box.enqueue("msg/react", "r2"))
        await settle()
        assert server == ["msg/send:m1", "msg/react:r1", "msg/send:m2", "msg/react:r2"]
        assert in_flight["most"] == 1
        box.stop()
    run(main)  # a hang fails instead of stalling


def test_fifo_across_types_on_entries_already_in_the_store() -> None:
    async def main() -> None:
        store, clock = MemoryStore(), FakeClock()
        t = clock.now()
        store.put_raw(stored("react", "react", t - 10, next_retry_at=t))
        store.put_raw(stored("send", "send", t - 20, next_retry_at=t))
        store.put_raw(stored("later", "send", t - 5, next_retry_at=t))
        finished: list[str] = []
        slow = asyncio.Event()

        async def api(entry: OutboxEntry) -> None:
            if entry.id == "send":
                await slow.wait()  # a slow server: the reaction must wait for its message
            finished.append(entry.id)

        box, _ = make(store, clock, handlers={"send": {"process": api}, "react": {"process": api}})
        box.start()
        await settle()
        assert finished == [] and [r.status for r in await store.all()].count(Status.RUNNING) == 1
        slow.set()
        await settle()
        assert finished == ["send", "react", "later"]
        box.stop()
    run(main)  # a hang fails instead of stalling


@pytest.mark.parametrize("status", [401, 403, 409, 422])
def test_http_statuses_follow_is_retryable_error_not_the_job_queues_rules(status: int) -> None:
    async def main() -> None:
        store, clock = MemoryStore(), FakeClock()
        box, calls = make(store, clock)  # every error retryable (the default)
        calls.fail = pyjobq.JobError(f"HTTP {status}", status=status)
        box.start()
        job = await box.enqueue("send", 1, max_attempts=3)
        await settle()
        record = await store.get(job.id)
        # An ordinary retryable failure: counted, on the outbox's ladder (not 60 s, not failed
        # at once).
        assert (record.status, record.attempts, record.given_back) == (Status.PENDING, 1, 0)
        assert record.next_retry_at - clock.now() < 60_000
        for _ in range(3):
            clock.advance(30_000)
            await settle()
        assert len(calls.processed) == 3 and calls.exhausted == [job.id]  # max attempts exhaust
        outcome = await job.done
        assert (outcome.status, outcome.http_status) == ("failed", status)
        box.stop()
    run(main)  # a hang fails instead of stalling


@pytest.mark.parametrize("status", [401, 403, 409, 422])
def test_a_non_retryable_http_status_exhausts_at_once_and_rolls_back(status: int) -> None:
    async def main() -> None:
        store = MemoryStore()
        box, calls = make(store,
                          is_retryable_error=lambda err: getattr(err, "status", None) != status)
        calls.fail = pyjobq.JobError(f"HTTP {status}", status=status)
        box.start()
        job = await box.enqueue("react", 1, max_attempts=5)
        await settle()
        assert calls.rolled_back == [job.id] and len(calls.processed) == 1
        assert await store.all() == []
        box.stop()
    run(main)  # a hang fails instead of stalling


def test_offline_releases_uncounted_whatever_the_error_carried() -> None:
    async def main() -> None:
        store = MemoryStore()
        box, calls = make(store, is_online=lambda: False)
        calls.fail = pyjobq.JobError("HTTP 503", status=503)
        box.start()
        job = await box.enqueue("send", 1, max_attempts=1)
        await settle()
        record = await store.get(job.id)
        assert (record.status, record.attempts, record.given_back) == (Status.PENDING, 0, 1)
        assert calls.exhausted == []
        box.stop()
    run(main)  # a hang fails instead of stalling


def test_the_rollback_delete_and_the_unknown_type_delete_are_published() -> None:
    async def main() -> None:
        store, clock = MemoryStore(), FakeClock()
        store.put_raw(stored("ghost", "gone/type", clock.now()))
        heard: list[Any] = []
        box, calls = make(store, clock, on_activity=heard.append)
        posted: list[Any] = []
        channel = box._scheduler._channel
        real_post = channel.post

        def post(message: Any) -> None:  # what every other listener of the channel hears
            posted.extend(updated_jobs(parse(message)))
            real_post(message)

        channel.post = post  # type: ignore[method-assign]
        calls.fail = RuntimeError("no")
        box.start()
        job = await box.enqueue("react", 1, max_attempts=1)
        await settle()
        assert calls.rolled_back == [job.id] and await store.all() == []
        deleted = {u.id for u in heard if u.get("deleted")}
        assert {"ghost", job.id} <= deleted
        posted_deleted = {j["id"] for j in posted if j.get("deleted")}
        assert {"ghost", job.id} <= posted_deleted
        box.stop()
    run(main)  # a hang fails instead of stalling


# ---------------------------------------------------------------- a run's claim: the pure decisions

def running(**changes: Any) -> Any:
    """Entry ``e`` on its 2nd attempt, running under ``me``'s lease until T0 + 100."""
    fields: dict[str, Any] = dict(type="react", reconstructor="react", params={"n": 1},
                                  status="running", attempts=2, given_back=1, owner="me",
                                  next_retry_at=T0 + 100)
    fields.update(changes)
    return record("e", **fields)


MINE = claims.RunClaim("e", "me", attempts=2, given_back=1)


def test_a_run_claim_is_its_owner_and_its_attempt() -> None:
    assert claims.RunClaim.of(running()) == MINE
    assert MINE.holds(running())
    assert not MINE.holds(None)
    assert not MINE.holds(running(owner="other"))  # taken over
    assert not MINE.holds(running(attempts=3))  # a later claim
    assert not MINE.holds(running(given_back=2))  # given back, then claimed again
    assert not MINE.holds(running(status="pending", owner=None))
    assert MINE.failed_on(running(status="failed", owner=None, next_retry_at=None))
    # rollback begun
    assert not MINE.failed_on(running(status="failed", owner="me", next_retry_at=None))
    # a later run
    assert not MINE.failed_on(running(status="failed", owner=None, attempts=3, next_retry_at=None))


def test_a_renewal_pushes_the_lease_only_while_the_record_is_the_claim() -> None:
    assert claims.renewed(running(), MINE, T0 + 50, 90) == running(
        next_retry_at=T0 + 140, updated_at=T0 + 50)
    assert claims.renewed(running(owner="other"), MINE, T0 + 50, 90) is None
    assert claims.renewed(running(attempts=3), MINE, T0 + 50, 90) is None
    assert claims.renewed(running(status="pending", owner=None, next_retry_at=T0 + 500),
                          MINE, T0 + 50, 90) is None
    assert claims.renewed(running(status="failed", owner=None, next_retry_at=None),
                          MINE, T0 + 50, 90) is None


def test_a_delivery_takes_the_entry_back_from_anything_but_a_rollback_begun() -> None:
    now = T0 + 200
    back = running(next_retry_at=now + 90, updated_at=now)
    # still mine: the settle applies as it is
    assert claims.delivered(running(), MINE, now, 90) is None
    assert claims.delivered(running(owner="other", attempts=3, given_back=1),
                            MINE, now, 90) == back.evolve(attempts=3)
    assert claims.delivered(running(status="pending", owner=None, next_retry_at=T0 + 900,
                                    attempts=3, error="no", code="x"),
                            MINE, now, 90) == back.evolve(attempts=3, error="no", code="x")
    assert claims.delivered(running(status="failed", owner=None, next_retry_at=None, error="gone",
                                    code="page_gone"),
                            MINE, now, 90) == back.evolve(error="gone", code="page_gone")
    assert claims.delivered(running(status="failed", owner="other", next_retry_at=None),
                            MINE, now, 90) is None
    assert claims.delivered(running(status="done", owner=None, next_retry_at=None),
                            MINE, now, 90) is None


def test_a_rollback_is_marked_on_the_failed_record_and_nowhere_else() -> None:
    failed = running(status="failed", owner=None, next_retry_at=None, updated_at=T0 + 5)
    # updated_at kept: prune's age
    assert claims.rollback_begun(failed, "me") == failed.evolve(owner="me")
    assert claims.rollback_begun(failed.evolve(owner="dead"), "me") == failed.evolve(owner="me")
    assert claims.rollback_begun(running(), "me") is None
    assert claims.rollback_begun(running(status="pending", owner=None), "me") is None


def test_a_lease_that_ran_out_on_the_ceiling_is_said_as_such_once() -> None:
    seen = running(status="failed", owner=None, next_retry_at=None, error="HTTPError: 500",
                   code="http_500", http_status=500)
    said = seen.evolve(code="page_gone", error=claims.LEASE_RAN_OUT, http_status=None)
    assert claims.lease_ran_out(seen, seen) == said
    assert claims.lease_ran_out(said, seen) is None  # said already
    assert claims.lease_ran_out(seen.evolve(owner="me"), seen) is None  # a rollback began
    assert claims.lease_ran_out(seen.evolve(attempts=3), seen) is None  # another failure since
    assert claims.lease_ran_out(running(status="pending", owner=None), seen) is None
    assert claims.undecided(said) and not claims.undecided(seen)
    assert not claims.undecided(said.evolve(owner="me"))


# ----------------------------------------------------------- two processors on one store: the lease

class Gated:
    """One outbox's handlers whose ``process`` waits for the test: ``release(ok)`` ends the
    oldest call still waiting; ``processed`` and ``rolled_back`` say what ran, in order."""

    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        self.name, self.log = name, log
        self.waiting: list[asyncio.Future[bool]] = []
        #: While set, ``rollback`` waits for it.
        self.rollback_gate: asyncio.Future[None] | None = None

    async def process(self, entry: OutboxEntry) -> None:
        self.log.append((self.name, f"process {entry.attempts}"))
        gate = asyncio.get_running_loop().create_future()
        self.waiting.append(gate)
        if not await gate:
            raise RuntimeError(f"{self.name}: the server said no")

    def release(self, ok: bool) -> None:
        self.waiting.pop(0).set_result(ok)

    async def rollback(self, entry: OutboxEntry) -> None:
        self.log.append((self.name, "rollback"))
        if self.rollback_gate is not None:
            await self.rollback_gate

    def on_exhausted(self, entry: OutboxEntry) -> None:
        self.log.append((self.name, "on_exhausted"))


LEASE = 9_000.0


def two_outboxes(
        **kw: Any) -> tuple[Outbox, Gated, Outbox, Gated, MemoryStore, FakeClock, FreezableClock]:
    """Outbox ``a`` and outbox ``b`` on one store and one clock, neither started; ``a`` sees the
    clock through a :class:`FreezableClock` (a frozen page: its timers wait for the thaw).
    Type ``react`` rolls back; ``send`` is kept for a manual retry; neither retries a refusal."""
    store, clock = MemoryStore(), FakeClock()
    frozen = FreezableClock(clock)
    log: list[tuple[str, str]] = []
    boxes: list[tuple[Outbox, Gated]] = []
    for name, its_clock in (("a", frozen), ("b", clock)):
        gated = Gated(name, log)
        handlers = {"react": {"process": gated.process, "rollback": gated.rollback},
                    "send": {"process": gated.process, "on_exhausted": gated.on_exhausted}}
        box = Outbox(store, handlers, clock=its_clock, poll_interval_ms=0, lease_ms=LEASE,
                     is_retryable_error=lambda err: False, **kw)
        boxes.append((box, gated))
    (a, ga), (b, gb) = boxes
    return a, ga, b, gb, store, clock, frozen


async def past_the_lease(
        kind: str = "react", max_attempts: int = 3,
) -> tuple[Outbox, Gated, Outbox, Gated, MemoryStore, FakeClock, FreezableClock, Job]:
    """:func:`two_outboxes`, both started: ``a`` runs one ``kind`` entry (payload 1, at most
    ``max_attempts`` attempts) and its page is frozen in the middle of process() (no renewal)
    while the clock runs past the lease's end. Returns what :func:`two_outboxes` does and the
    entry's job."""
    a, ga, b, gb, store, clock, frozen = two_outboxes()
    a.start()
    job = await a.enqueue(kind, 1, max_attempts=max_attempts)
    await settle()
    b.start()
    frozen.freeze()
    clock.advance(LEASE + 1)
    await settle()
    return a, ga, b, gb, store, clock, frozen, job


def test_the_lease_is_renewed_while_process_runs_so_another_outbox_never_takes_it() -> None:
    async def main() -> None:
        a, ga, b, gb, store, clock, _ = two_outboxes()
        a.start()
        job = await a.enqueue("react", {"emoji": "+1"}, max_attempts=2)
        await settle()
        b.start()
        await settle()
        # process() runs for five leases: the lease is renewed long before each end.
        for _ in range(15):
            clock.advance(LEASE / 3)
            b.wake()
            await settle()
            held = await store.get(job.id)
            assert (held.status, held.owner, held.attempts) == (Status.RUNNING, a.source, 1)
            assert held.next_retry_at > clock.now() + LEASE / 2
        assert ga.log == [("a", "process 1")]  # b never ran it
        ga.release(True)
        await settle()
        assert await store.all() == [] and (await job.done).status == "done"
        assert ga.log == [("a", "process 1")]  # delivered, not rolled back
        clock.advance(LEASE)
        await settle()
        assert await store.all() == [] and ga.log == [("a", "process 1")]
        a.stop(), b.stop()
    run(main)


def test_renewing_stops_when_the_run_settles() -> None:
    async def main() -> None:
        box, calls, store, clock = started(RuntimeError("no"), lease_ms=LEASE)
        job = await box.enqueue("send", 1)
        await settle()
        pending = await store.get(job.id)
        assert (pending.status, pending.attempts) == (Status.PENDING, 1)
        # The one timer left is the retry's: no renewal of a lease that is over.
        assert clock.next_timer_at() == pending.next_retry_at
        clock.advance(LEASE / 3)
        assert await store.get(job.id) == pending
        box.stop()
    run(main)


def test_a_processor_that_lost_its_lease_knows_it_and_its_failure_is_not_stored() -> None:
    async def main() -> None:
        # a's page is frozen in the middle of process(): no renewal
        a, ga, b, gb, store, clock, frozen, job = await past_the_lease()
        taken = await store.get(job.id)
        assert (taken.status, taken.owner, taken.attempts) == (Status.RUNNING, b.source, 2)
        frozen.thaw()  # a's renewal finds the entry b's: a stops renewing it
        await settle()
        assert (await store.get(job.id)) == taken
        ga.release(False)  # a's run fails: b's run decides, a's failure is not stored
        await settle()
        assert (await store.get(job.id)) == taken
        clock.advance(LEASE)  # b's renewals alone keep the lease
        await settle()
        assert (await store.get(job.id)).owner == b.source
        gb.release(True)
        await settle()
        assert await store.all() == []
        assert ga.log == [("a", "process 1"), ("b", "process 2")]
        a.stop(), b.stop()
    run(main)


def test_a_delivery_wins_over_a_reclaim_and_its_entry_is_never_rolled_back() -> None:
    async def main() -> None:
        a, ga, b, gb, store, clock, frozen, job = await past_the_lease()
        assert (await store.get(job.id)).owner == b.source  # b took it over and runs it
        frozen.thaw()
        ga.release(True)  # a's process() succeeded: the entry was delivered
        await settle()
        assert await store.all() == []
        gb.release(False)  # b's run of it then fails: nothing is left to roll back
        await settle()
        assert await store.all() == []
        assert ga.log == [("a", "process 1"), ("b", "process 2")]  # no rollback
        a.stop(), b.stop()
    run(main)


@pytest.mark.parametrize("kind", ["react", "send"])
def test_a_lease_that_ran_out_on_the_last_attempt_is_not_rolled_back_while_its_run_may_deliver(
        kind: str) -> None:
    async def main() -> None:
        a, ga, b, gb, store, clock, frozen, job = await past_the_lease(kind, max_attempts=1)
        failed = await store.get(job.id)
        # Failed at the ceiling, and said so; on_exhausted surfaces it, nothing is reverted.
        assert (failed.status, failed.code, failed.owner) == (Status.FAILED, "page_gone", None)
        assert ga.log == [("a", "process 1")] + ([("b", "on_exhausted")] if kind == "send" else [])
        frozen.thaw()
        ga.release(True)  # the frozen run delivered after all
        await settle()
        assert await store.all() == []
        assert [step for _, step in ga.log] == (
            ["process 1"] + (["on_exhausted"] if kind == "send" else []))
        a.stop(), b.stop()
    run(main)


def test_the_run_whose_lease_ran_out_on_the_last_attempt_rolls_back_once_it_fails() -> None:
    async def main() -> None:
        a, ga, b, gb, store, clock, frozen, job = await past_the_lease(max_attempts=1)
        assert (await store.get(job.id)).status is Status.FAILED and ga.log == [("a", "process 1")]
        frozen.thaw()
        ga.release(False)  # now the fate is known: not delivered, so the change is reverted
        await settle()
        assert ga.log == [("a", "process 1"), ("a", "rollback")] and await store.all() == []
        a.stop(), b.stop()
    run(main)


def test_a_rollback_is_claimed_before_it_runs_and_a_later_delivery_is_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        a, ga, b, gb, store, clock, frozen, job = await past_the_lease()
        gb.rollback_gate = asyncio.get_running_loop().create_future()
        gb.release(False)  # b's run fails for good first: b begins rolling the entry back
        await settle()
        assert ga.log == [("a", "process 1"), ("b", "process 2"), ("b", "rollback")]
        frozen.thaw()
        ga.release(True)  # too late: the revert is under way; it is not undone, and said so, loudly
        await settle()
        rolling = await store.get(job.id)
        assert (rolling.status, rolling.owner) == (Status.FAILED, b.source)
        late = [r for r in caplog.records if getattr(r, "phase", None) == "late"]
        assert [(r.levelno, r.entry_id) for r in late] == [(logging.ERROR, job.id)]
        gb.rollback_gate.set_result(None)
        await settle()
        assert await store.all() == [] and ga.log[-1] == ("b", "rollback")
        a.stop(), b.stop()
    caplog.set_level(logging.INFO, logger="pyjobq")
    run(main)


def test_start_finishes_rollbacks_but_not_of_an_entry_whose_last_run_may_have_delivered() -> None:
    async def main() -> None:
        box, calls, store, clock = started(seed=(
            stored("unknown", "react", T0, status="failed", next_retry_at=None, attempts=5,
                   code="page_gone"),
            stored("begun", "react", T0, status="failed", next_retry_at=None, attempts=5,
                   code="page_gone", owner="a-page-that-died-mid-rollback"),
            stored("left", "react", T0, status="failed", next_retry_at=None, attempts=5,
                   code="not_retryable"),
        ))
        await settle()
        assert sorted(calls.rolled_back) == ["begun", "left"]
        assert [e.id for e in await box.list_failed()] == ["unknown"]
        box.stop()
    run(main)


# ---------------------------------------------------------------- start(): rollbacks, then prune

def test_start_finishes_interrupted_rollbacks_before_it_prunes() -> None:
    async def main() -> None:
        old = dict(status="failed", next_retry_at=None, attempts=5, updated_at=T0 - 100 * DAY)
        box, calls, store, clock = started(
            seed=(stored("old-react", "react", T0 - 100 * DAY, **old),))
        await settle()
        assert calls.rolled_back == ["old-react"]  # reverted, not silently pruned
        assert await store.all() == []
        box.stop()
    run(main)


def test_prune_deletions_are_published() -> None:
    async def main() -> None:
        store, clock = MemoryStore(), FakeClock()
        t = clock.now()
        store.put_raw(stored("ancient", "send", t - 100 * DAY, status="failed", next_retry_at=None,
                             updated_at=t - 91 * DAY))
        store.put_raw(stored("recent", "send", t - DAY, status="failed", next_retry_at=None,
                             updated_at=t - DAY))
        heard: list[Any] = []
        box, _ = make(store, clock, on_activity=heard.append)
        posted: list[Any] = []
        channel = box._scheduler._channel
        real_post = channel.post

        def post(message: Any) -> None:
            posted.extend(updated_jobs(parse(message)))
            real_post(message)

        channel.post = post  # type: ignore[method-assign]
        box.start()
        await settle()
        assert [r.id for r in await store.all()] == ["recent"]
        assert [(u.id, u.get("deleted")) for u in heard] == [("ancient", True)]
        assert [(j["id"], j.get("deleted")) for j in posted] == [("ancient", True)]
        box.stop()
    run(main)


@pytest.mark.parametrize("kind", ["react", "send"])
def test_a_lease_that_ran_out_on_the_ceiling_is_failed_as_such_and_handled_once(kind: str) -> None:
    async def main() -> None:
        heard: list[Any] = []
        # The last attempt's page died mid-run; the attempt before had failed with an HTTP 500.
        box, calls, store, clock = started(on_activity=heard.append, seed=(
            stored("gone", kind, T0 - 100, status="running", owner="dead-tab", attempts=5,
                   next_retry_at=T0 - 1, code="http_500", error="HTTPError: 500", http_status=500),
        ))
        await settle()
        failed = await store.get("gone")
        assert (failed.status, failed.code, failed.http_status, failed.owner) == (
            Status.FAILED, "page_gone", None, None)
        assert "lease ran out" in failed.error  # the cause that happened, not the attempt before's
        assert [(u.status, u.code) for u in heard][-1] == ("failed", "page_gone")
        assert calls.exhausted == (["gone"] if kind == "send" else []) and calls.rolled_back == []
        assert [e.id for e in await box.list_failed()] == ["gone"]
        box.stop()
    run(main)
