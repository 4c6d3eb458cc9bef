"""The holes a fault review found, one test (or more) per finding, on the memory fakes.

Each of these failed on the main branch before the fix. Chromium covers what only the browser
can show (tests/e2e/faults.spec.js, tests/browser/test_idb_store.py).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from helpers import Server, holding, one_tab, reconstructor, serving
from pyjobq.abort import AbortSignal
from pyjobq.core import messages
from pyjobq.core.lanes import run_lock
from pyjobq.core.messages import make
from pyjobq.core.records import MAX_DEPTH, NEWS_RESULT_LIMIT
from pyjobq.errors import InvalidJobError, StoreInUseError
from pyjobq.handle import Job
from pyjobq.memory import MemoryStore
from pyjobq.outbox import Outbox
from pyjobq.testing import CHANNEL, LOCK, FakeClock, Response, Tab, World, run, settle
from store_contract import make_record


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def raw_record(job_id: str, now: float, **changes: Any) -> dict[str, Any]:
    record = make_record(job_id, created_at=now - 10).evolve(
        _reconstructor="fetch", _params={"method": "POST", "path": f"/{job_id}", "body": None},
        next_retry_at=now - 1, updated_at=now - 10,
    ).to_dict()
    record.update(changes)
    return record


# ---------------------------------------------------------------- one bad record stops the queue

@pytest.mark.parametrize("bad", [
    {"attempts": math.nan}, {"max_attempts": math.inf}, {"created_at": -math.inf},
    {"updated_at": math.nan}, {"next_retry_at": -math.inf}, {"attempts": -3, "max_attempts": 1},
    {"given_back": -1}, {"attempts": 1.5},
    {"_params": nested(3000)}, {"result": nested(3000)}, {"v3": nested(3000)}, {"status": 5},
], ids=lambda b: ",".join(f"{k}={v if isinstance(v, (int, float)) else type(v).__name__}"
                           for k, v in b.items()))
def test_a_record_with_bad_numbers_or_any_depth_fails_alone_and_the_queue_runs_on(
        bad: dict) -> None:
    async def main() -> None:
        world, server = World(), Server()
        now = world.clock.now()
        world.store.put_raw(raw_record("bad", now, type="other", **bad))
        tab = world.open_tab(transport=server)
        job = tab.side.enqueue_fetch("POST", "/good", type="save")
        await settle()
        assert (await asyncio.wait_for(job.done, 5)).status == "done"
        records = {r["id"]: r for r in await tab.side.query_all()}  # <bg-jobs>'s read works
        assert records["bad"]["status"] == "failed" and records["bad"]["code"] == "malformed_record"
        assert server.paths == ["/good"]  # the bad record never reached the server
        world.clock.advance(120_000)
        await settle()
        assert server.paths == ["/good"]
    run(main)


# -------------------------------------------------------------- an HTTP failure refunded as offline

def test_a_500_answered_just_before_the_network_dropped_costs_its_attempt() -> None:
    async def main() -> None:
        world = World()
        calls: list[str] = []

        async def transport(method: str, path: str, body: Any) -> Any:
            calls.append(path)
            world.online = False  # the network drops right after the server answered
            return Response(500, {"code": "boom"})

        tab = world.open_tab(transport=transport)
        job = tab.side.enqueue_fetch("POST", "/once", max_attempts=1)
        for _ in range(5):
            await settle()
            world.clock.advance(40_000)
        outcome = await asyncio.wait_for(job.done, 5)
        assert (outcome.status, outcome.http_status, calls) == ("failed", 500, ["/once"])
    run(main)


def test_offline_is_what_the_page_saw_when_the_attempt_failed() -> None:
    async def main() -> None:
        world = World()

        async def transport(method: str, path: str, body: Any) -> Any:
            world.online = False
            # Back online before the worker stores the outcome: the failure still found no network.
            asyncio.get_running_loop().call_soon(setattr, world, "online", True)
            raise TypeError("Failed to fetch")

        tab = world.open_tab(transport=transport)
        job = tab.side.enqueue_fetch("POST", "/x", max_attempts=1)
        await settle()
        record = await world.store.get(job.id)
        assert (record.status.value, record.code, record.attempts, record.given_back) == (
            "pending", "offline", 0, 1)
    run(main)


# ---------------------------------------------------------- a database upgrade runs live jobs twice

def test_a_stopped_scheduler_keeps_its_runs_locked_until_the_page_ends_them() -> None:
    async def main() -> None:
        world = World()
        on_wire: list[str] = []
        ended = asyncio.get_running_loop().create_future()
        aborted: list[Any] = []

        async def transport(method: str, path: str, body: Any, signal: AbortSignal) -> Any:
            on_wire.append(path)
            signal.add_callback(aborted.append)
            await ended  # the request is still on the wire
            on_wire.remove(path)
            return Response(200, {})

        a = world.open_tab(transport=transport)
        job = a.side.enqueue_fetch("POST", "/live")
        await settle()
        assert on_wire == ["/live"]
        a.scheduler.stop()  # what the worker does when another tab upgrades the database
        seen_on_wire: list[list[str]] = []

        async def newer(method: str, path: str, body: Any) -> Any:
            seen_on_wire.append(list(on_wire))
            return Response(200, {})

        b = world.open_tab(transport=newer)  # the tab with the newer code
        b.scheduler.wake()
        await world.advance(5_000)
        assert aborted == ["abandoned"]  # told to drop the run
        assert world.locks.held().get(run_lock(LOCK, "default", job.id)) == "exclusive"
        # never run twice at once
        assert b.scheduler.in_flight == frozenset() and seen_on_wire == []
        ended.set_result(None)
        await world.advance(1_000)
        # Its outcome was not stored (the old page's store is closed): the newer tab recovers
        # the job, and only once the old page's request has ended.
        assert seen_on_wire == [[]]
    run(main)


# ------------------------------------------------------------- delete/cancel frees the type at once

@pytest.mark.parametrize("how", ["delete", "cancel"])
def test_the_debounce_recipe_never_has_two_saves_of_one_type_in_flight(how: str) -> None:
    async def main() -> None:
        world = World()
        on_wire: list[str] = []
        overlaps: list[tuple[str, ...]] = []
        keys: list[Any] = []

        async def transport(method: str, path: str, body: Any, signal: AbortSignal, *,
                            idempotency_key: str | None = None) -> Any:
            keys.append(idempotency_key)
            if on_wire:
                overlaps.append((*on_wire, path))
            on_wire.append(path)
            try:
                await signal  # a slow upload; the abort reaches fetch, which ends a moment later
                await asyncio.sleep(0.01)
                raise OSError("AbortError")
            finally:
                on_wire.remove(path)

        tab = world.open_tab(transport=transport)
        v1 = tab.side.enqueue_fetch("PUT", "/position/v1", {"v": 1}, type="save")
        await settle()
        v2 = tab.side.enqueue_fetch("PUT", "/position/v2", {"v": 2}, type="save")
        if how == "delete":
            assert await tab.side.delete_job(v1.id)
        else:
            assert await tab.side.cancel_job(v1.id)
        await settle()
        assert on_wire == ["/position/v1"]  # v2 waits: v1's request is still ending
        await asyncio.sleep(0.05)
        await settle()
        assert overlaps == [] and on_wire == ["/position/v2"]
        assert keys == [v1.id, v2.id]  # the job's id, for an Idempotency-Key header
    run(main)


def test_a_transport_of_three_arguments_is_called_as_before() -> None:
    async def main() -> None:
        world, server, tab = serving()
        job = tab.side.enqueue_fetch("POST", "/three", {"a": 1})
        await settle()
        assert (await job.done).status == "done" and server.calls == [("POST", "/three", {"a": 1})]
    run(main)


# ------------------------------------------------------------- a late result lands on the wrong run

def test_an_answer_for_another_claim_is_ignored() -> None:
    async def main() -> None:
        world, server, tab, job = await holding("/slow")
        # Run 1's answer, still in flight when the job was claimed again: another claim's word.
        tab.page_link.send(make("run_result", job_id=job.id, claim="tab1:999", ok=True,
                                result={"old": True}))
        await settle()
        assert (await world.store.get(job.id)).status.value == "running"
        server.release("/slow", Response(200, {"new": True}))
        await settle()
        assert (await job.done).result == {"new": True}
    run(main)


def test_a_page_refuses_a_second_run_of_a_job_it_is_running() -> None:
    async def main() -> None:
        world, server, tab = serving("hold")
        answers: list[dict[str, Any]] = []
        tab.worker_link.subscribe(
            lambda m: answers.append(m) if m.get("type") == "run_result" else None)
        job = tab.side.enqueue_fetch("POST", "/once")
        await settle()
        run_msg = make("run", job_id=job.id, claim="tab1:77", reconstructor="fetch",
                       params={"method": "POST", "path": "/once", "body": None}, job_type="default",
                       attempt=2)
        tab.worker_link.send(run_msg)
        await settle()
        assert len(server.calls) == 1
        assert [(a["claim"], a["code"]) for a in answers] == [("tab1:77", "already_running")]
    run(main)


# ---------------------------------------------------------------- the channel trusted as truth

async def a_run_and_another_tab() -> tuple[World, Server, Tab, Job, Tab]:
    """Tab A with its job ``/real`` held on the wire, and a second tab B."""
    world, server, a, job = await holding("/real")
    return world, server, a, job, world.open_tab()


def test_a_forged_job_update_neither_ends_a_run_nor_resolves_done() -> None:
    async def main() -> None:
        world, server, _, job, b = await a_run_and_another_tab()
        watching = b.side.job(job.id)
        await settle()
        forger = world.channels.channel(CHANNEL)  # any same-origin script
        forger.post(make("job-update", source="evil", jobs=[{"id": job.id, "deleted": True}]))
        forger.post(make("job-update", source="evil",
                         jobs=[{"id": job.id, "status": "done", "result": "forged"}]))
        await settle()
        assert server.holding == ["/real"] and server.cancelled == []
        assert not job.done.done() and not watching.done.done()
        assert (await world.store.get(job.id)).status.value == "running"
        server.release("/real", Response(200, {"real": True}))
        await settle()
        assert (await job.done).result == {"real": True}
        assert (await asyncio.wait_for(watching.done, 5)).result == {"real": True}
    run(main)


def test_a_true_delete_by_another_tab_still_ends_the_run_and_resolves_done() -> None:
    async def main() -> None:
        world, server, a, job, b = await a_run_and_another_tab()
        assert await b.side.delete_job(job.id)
        await settle()
        assert server.cancelled == ["/real"] and a.scheduler.in_flight == frozenset()
        assert (await job.done).code == "deleted"
    run(main)


# ---------------------------------------------------------------- requests overtake the enqueue

def test_delete_job_right_after_filing_deletes_it_and_it_is_never_sent() -> None:
    async def main() -> None:
        world, server, tab = serving()
        prev = tab.side.enqueue_fetch("PUT", "/draft", {"v": 1}, delay_ms=500)
        assert await tab.side.delete_job(prev.id) is True
        await world.advance(1_000)
        assert server.calls == [] and (await prev.done).code == "deleted"
    run(main)


# ---------------------------------------------------------------- a body too deep to store

def test_a_body_too_deep_to_store_is_refused_at_the_call_and_its_batch_is_stored() -> None:
    async def main() -> None:
        world, server, tab = serving()
        innocent = tab.side.enqueue_fetch("POST", "/innocent")
        with pytest.raises(InvalidJobError, match=f"^body .*deeper than {MAX_DEPTH - 1} levels "
                                                  f".*inside the job's params.*{MAX_DEPTH}"):
            tab.side.enqueue_fetch("POST", "/deep", nested(600))
        with pytest.raises(InvalidJobError, match=f"deeper than {MAX_DEPTH - 1} levels"):
            tab.side.enqueue_fetch("POST", "/one-too-deep", nested(MAX_DEPTH))
        tab.side.enqueue_fetch("POST", "/at-the-limit", nested(MAX_DEPTH - 1))
        await settle()
        assert (await asyncio.wait_for(innocent.stored, 5)) is None
        assert (await asyncio.wait_for(innocent.done, 5)).status == "done"
        assert sorted(server.paths) == ["/at-the-limit", "/innocent"]
    run(main)


def test_a_result_too_deep_to_store_fails_its_job_once() -> None:
    async def main() -> None:
        runs: list[int] = []

        async def deep(params: Any, signal: Any) -> Any:
            runs.append(1)
            return nested(600)

        world, tab = one_tab(reconstructors={"deep": reconstructor(deep)})
        job = tab.side.enqueue_persistent("deep", None, max_attempts=3)
        for _ in range(3):
            await world.advance(60_000)
        outcome = await asyncio.wait_for(job.done, 5)
        assert (outcome.status, outcome.code, runs) == ("failed", "result_not_cloneable", [1])
    run(main)


def test_the_scheduler_fails_a_result_it_cannot_store_instead_of_running_it_again() -> None:
    async def main() -> None:
        world, server, tab, job = await holding("/x", max_attempts=3)
        claim = next(iter(tab.scheduler.flights)).claim
        # An older page that checks no depth answers with a result nobody can store.
        tab.page_link.send(make("run_result", job_id=job.id, claim=claim, ok=True,
                                result=nested(600)))
        await world.advance(60_000)
        record = await world.store.get(job.id)
        assert (record.status.value, record.code, record.attempts) == ("failed",
                                                                       "result_not_storable", 1)
        assert len(server.calls) == 1
    run(main)


# --------------------------------------------------------- a transient store error stalls the queue

def test_a_pass_that_raised_re_arms_its_wake() -> None:
    async def main() -> None:
        world, server = World(), Server()
        failures = [OSError("IndexedDB: transient")]
        entries = world.store.entries  # the pass's first read: its view of the queue

        async def flaky(ids: Any = None) -> Any:
            if failures:
                raise failures.pop()
            return await entries(ids)

        world.store.entries = flaky  # type: ignore[method-assign]
        tab = world.open_tab(transport=server)
        job = tab.side.enqueue_fetch("POST", "/soon", delay_ms=500)
        await settle()
        assert failures == [] and server.calls == []
        await world.advance(2_000)  # nothing else wakes the queue
        assert (await asyncio.wait_for(job.done, 5)).status == "done"
    run(main)


# ---------------------------------------------------------------- records from a newer pyjobq

def test_unknown_fields_survive_a_read_modify_write() -> None:
    async def main() -> None:
        world, server = World(), Server()
        now = world.clock.now()
        world.store.put_raw(raw_record("newer", now, priority=7, v2_meta={"by": "pyjobq 2"}))
        tab = world.open_tab(transport=server)
        heard: list[Any] = []
        tab.side.on_update(heard.append)
        await world.advance(1_000)
        stored = world.store.raw()["newer"]
        assert stored["status"] == "done"
        assert (stored["priority"], stored["v2_meta"]) == (7, {"by": "pyjobq 2"})
        assert heard and all("v2_meta" not in u for u in heard)  # news stays small
    run(main)


def test_a_status_this_version_does_not_know_is_left_as_it_is() -> None:
    async def main() -> None:
        world, server = World(), Server()
        now = world.clock.now()
        value = raw_record("snoozed", now, status="snoozed", snooze_until=now + 5)
        world.store.put_raw(value)
        tab = world.open_tab(transport=server)
        await tab.side.query_all()
        assert await tab.side.delete_job("unrelated") is False
        await tab.side.retry_all()
        await world.advance(120_000)
        assert world.store.raw()["snoozed"] == value and server.calls == []
    run(main)


# ---------------------------------------------------------------- an Outbox on the queue's database

def test_an_outbox_refuses_a_store_holding_the_job_queues_records() -> None:
    async def main() -> None:
        store, clock = MemoryStore(), FakeClock()
        queue_record = raw_record("queued", clock.now())
        store.put_raw(queue_record)
        processed: list[Any] = []

        async def process(entry: Any) -> None:
            processed.append(entry)

        box = Outbox(store, {"send": {"process": process}}, clock=clock)
        box.start()
        await settle()
        clock.advance(120_000)
        await settle()
        assert isinstance(box.refused, StoreInUseError) and "job queue" in str(box.refused)
        assert store.raw() == {"queued": queue_record} and processed == []
        with pytest.raises(StoreInUseError):
            await box.enqueue("send", {"n": 1})
    run(main)


# ---------------------------------------------------------------- a 10 MB result crosses every tab

def test_a_big_result_stays_out_of_job_updates_and_done_reads_it_from_the_store() -> None:
    async def main() -> None:
        world = World()
        big = {"text": "x" * (NEWS_RESULT_LIMIT * 4)}
        server = Server("hold")
        tab = world.open_tab(transport=server)
        job = tab.side.enqueue_fetch("GET", "/big")
        await settle()
        other = world.open_tab()
        heard: list[Any] = []
        other.side.on_update(heard.append)
        watching = other.side.job(job.id)
        await settle()
        server.release("/big", Response(200, big))
        await settle()
        assert (await asyncio.wait_for(job.done, 5)).result == big
        assert (await asyncio.wait_for(watching.done, 5)).result == big
        done = [u for u in heard if u.get("status") == "done"]
        assert done and all(u["result"] is None and u["result_truncated"] for u in done)
    run(main)


# ---------------------------------------------------------------- the run protocol

def test_the_run_messages_carry_and_check_claims() -> None:
    for type_ in ("run_started", "abandon_run", "run_check"):
        assert messages.parse(make(type_, job_id="j", claim="t:1"))["claim"] == "t:1"
        for claim in ({"claim": 5}, {}):  # of another type, or none: refused
            with pytest.raises(messages.BadMessage):
                messages.parse(make(type_, job_id="j", **claim))
    with pytest.raises(messages.BadMessage):
        messages.parse(make("run_result", job_id="j", ok=True, claim="t:1", offline="no"))


# ---------------------------------------------------------------- found by the soak

def test_a_page_frozen_between_its_recovery_look_and_write_leaves_the_new_run_alone() -> None:
    """Found by the soak: tab A judged a record orphaned, froze before writing, tab B
    recovered and claimed it meanwhile; A's write on resume must not recover B's run."""
    async def main() -> None:
        world = World()
        now = world.clock.now()
        world.store.put_raw(raw_record("orphan", now, status="running", owner="dead-tab",
                                       attempts=1, next_retry_at=None))
        a_froze: list[str] = []

        async def hook(tab: Any, operation: str, phase: str, args: tuple) -> None:
            if (tab.name == "tab1" and operation in ("update", "update_many") and phase == "before"
                    and not a_froze):
                a_froze.append(args[0].job_id if operation == "update"
                               else ",".join(c.job_id for c in args[0]))
                tab.freeze()
                await tab.thawed()

        world.store_hook = hook
        a = world.open_tab(transport=Server(), page_lease=True)
        await settle()
        assert a_froze == ["orphan"]  # frozen between its look at the running records and the write
        b_server = Server("hold")
        world.open_tab(transport=b_server, page_lease=True)
        await world.advance(1_000)
        assert b_server.holding == ["/orphan"]
        a.resume()
        await world.advance(1_000)
        record = await world.store.get("orphan")
        assert (record.status.value, record.owner, record.attempts) == ("running", "tab2", 2)
        b_server.release("/orphan")
        await settle()
        assert (await world.store.get("orphan")).status.value == "done"
    run(main)


def test_what_is_stored_is_the_body_checked_at_the_call() -> None:
    """Found by review: the JSON check ran at the call, but the message was made a step later
    from the caller's objects, so a body changed in between (a NaN appended, a list nested too
    deep) was stored unchecked. The job carries the JSON text checked at the call."""
    from pyjobq.testing import Response

    async def main() -> None:
        world = World()
        seen: list[Any] = []

        async def server(method: str, path: str, body: Any) -> Response:
            seen.append(body)
            return Response(200, {})

        tab = world.open_tab(transport=server)
        body: dict[str, Any] = {"items": [1]}
        job = tab.queue.enqueue_fetch("POST", "/x", body)
        body["items"].append(float("nan"))  # after the call, before the batch is sent
        body["deep"] = nested(500)
        assert (await asyncio.wait_for(job.done, 5)).status == "done"
        assert seen == [{"items": [1]}]

    run(main)
