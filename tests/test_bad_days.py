"""Bad days — a tab frozen or busy at the wrong moment, a tab closed a moment too soon.

Each test failed on the main branch before its fix (its section's heading names the finding).
The liveness, truth and no-spin oracles over many schedules are in tests/test_simulation.py;
Chromium covers what only the browser can show (tests/e2e).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from helpers import Server, checkpointing
from pyjobq.abort import AbortSignal
from pyjobq.core import policy
from pyjobq.core.errors import StorageError
from pyjobq.core.lanes import run_lock
from pyjobq.core.messages import ABANDON_GRACE_MS, RECHECK_MS, make
from pyjobq.core.ports import Change
from pyjobq.core.records import JobRecord
from pyjobq.core.status import UNFINISHED
from pyjobq.engine.lease import PING_MS, SILENT_PINGS, LinkLease
from pyjobq.engine.online import WATCH_MS
from pyjobq.engine.settle import RETRY_MS
from pyjobq.memory import link_pair
from pyjobq.testing import LOCK, Response, Tab, World, record, run, settle


def freeze_at_run(world: World, *, block: bool = False, at: str = "run") -> list[str]:
    """Freeze the tab (or, ``block``, only block its page) the moment its worker first posts a
    message of type ``at``; returns the job ids it did that for."""
    caught: list[str] = []

    def hook(tab: Tab, message: Any) -> None:
        if message.get("type") == at and not caught:
            caught.append(message["job_id"])
            tab.block() if block else tab.freeze()

    world.link_hook = hook
    return caught


# ---------------------------------------------------------------- frozen right after run

def test_a_tab_frozen_right_after_run_runs_the_job_on_resume_rather_than_failing_it() -> None:
    async def main() -> None:
        world, server = World(), Server()
        caught = freeze_at_run(world)
        tab = world.open_tab(transport=server, page_lease=True)
        job = tab.side.enqueue_fetch("POST", "/frozen-at-run")
        await settle()
        assert caught == [job.id] and tab.frozen and server.calls == []
        await world.advance(60_000)  # far past the 10 s handshake
        tab.resume()
        await settle()
        record = await world.store.get(job.id)
        assert (record.status.value, record.code, server.paths) == (
            "done", None, ["/frozen-at-run"])
        assert (await job.done).status == "done"
    run(main)


# ---------------------------------------------------------------- a busy page

def test_a_busy_page_is_not_a_handshake_failure() -> None:
    async def main() -> None:
        world, server = World(), Server()
        caught = freeze_at_run(world, block=True)
        tab = world.open_tab(transport=server, page_lease=True)
        job = tab.side.enqueue_fetch("POST", "/busy")
        await settle()
        assert caught == [job.id] and tab.blocked
        await world.advance(15_000)  # a notebook cell computing for 15 s; the worker runs on
        assert (await world.store.get(job.id)).status.value == "running"
        tab.unblock()
        await settle()
        record = await world.store.get(job.id)
        assert (record.status.value, record.code, record.attempts, server.paths) == (
            "done", None, 1, ["/busy"])
    run(main)


def test_an_abandoned_run_on_a_busy_page_keeps_its_type_until_the_page_ends_it() -> None:
    # The engine freed the type 40 s after *sending* abandon_run, the page counted its 30 s grace
    # from *receiving* it: a page busy for 15 s in between had two saves of one type on the wire.
    async def main() -> None:
        world = World()
        on_wire: list[str] = []
        overlaps: list[tuple[str, ...]] = []

        async def transport(method: str, path: str, body: Any, signal: AbortSignal) -> Any:
            if on_wire:
                overlaps.append((*on_wire, path))
            on_wire.append(path)
            try:
                # A request that outlives its abort (a slow server): the page's grace ends it.
                await asyncio.get_running_loop().create_future()
            finally:
                on_wire.remove(path)

        tab = world.open_tab(transport=transport, page_lease=True)
        v1 = tab.side.enqueue_fetch("PUT", "/position/v1", {"v": 1}, type="save")
        await settle()
        caught = freeze_at_run(world, block=True, at="abandon_run")
        v2 = tab.side.enqueue_fetch("PUT", "/position/v2", {"v": 2}, type="save")
        deleted = asyncio.ensure_future(tab.side.delete_job(v1.id))
        await settle()
        assert caught == [v1.id] and tab.blocked  # busy before it handles abandon_run ...
        await world.advance(15_000)
        tab.unblock()
        await settle()
        assert await deleted
        assert on_wire == ["/position/v1"]  # ... and counts its grace from handling it
        await world.advance(ABANDON_GRACE_MS - 1_000)  # 40 s after the engine sent abandon_run
        assert overlaps == [] and on_wire == ["/position/v1"]
        await world.advance(1_000)  # the page's grace is over: v1 is cancelled, then v2 goes
        assert overlaps == [] and on_wire == ["/position/v2"]
        assert (await world.store.get(v2.id)).status.value == "running"
    run(main)


# ---------------------------------------------------------------- suspend_type after a cancel

def test_suspend_type_after_a_cancel_waits_for_the_abandoned_executor_to_settle() -> None:
    # Spec: suspend_type "resolves when that executor settles". Cancelled first, the run is
    # abandoned but still ending (saving its checkpoint); the suspension came back at once.
    for verb in ("cancel_job", "delete_job"):
        async def main() -> None:
            world = World()
            tab = world.open_tab()
            cleanup = asyncio.Event()
            job = tab.side.enqueue(checkpointing(cleanup), type="decode")
            await settle()
            assert await getattr(tab.side, verb)(job.id) is True
            await settle()
            suspend = asyncio.ensure_future(tab.side.suspend_type("decode"))
            await settle()
            assert not suspend.done(), (
                f"{verb}: resolved while the abandoned executor was still saving")
            cleanup.set()
            await settle()
            assert suspend.done() and suspend.exception() is None, verb
        run(main)


# ------------------------------------------------------------- saved, then closed a moment too soon

def test_an_idle_holder_finds_a_job_whose_news_died_with_its_tab_within_30_s() -> None:
    # A waiting tab stores its own enqueue (its page's request scheduler), then is killed before
    # the job-update leaves. The holder was idle: it found the job only at the hourly sweep.
    async def main() -> None:
        world, server = World(), Server()
        world.open_tab(transport=server, page_lease=True)
        await settle()
        waiting = world.open_tab(transport=server, page_lease=True, waiting=True)
        await settle()

        async def killed_after_commit(tab: Tab, operation: str, phase: str, args: tuple) -> None:
            if tab is waiting and operation == "add" and phase == "after":
                tab.crash()
                raise asyncio.CancelledError()  # the tab's code stops right here: no news

        world.store_hook = killed_after_commit
        job = waiting.side.enqueue_fetch("POST", "/saved-then-closed")
        await settle()
        assert not waiting.alive and (await world.store.get(job.id)).status.value == "pending"
        await world.advance(RECHECK_MS)
        record = await world.store.get(job.id)
        assert (record.status.value, server.paths) == ("done", ["/saved-then-closed"])
    run(main)


def test_a_pending_record_another_writer_stored_with_no_time_runs_to_its_end() -> None:
    # pyjobq stores no pending record without next_retry_at; other code or an older pyjobq may
    # have. A pass read it as never due, so it stayed pending for ever, unsent.
    async def main() -> None:
        world, server = World(), Server()
        foreign = record("no-time", type="notes", next_retry_at=None).to_dict()
        world.store.put_raw(foreign)
        world.open_tab(transport=server)
        await settle()
        stored = await world.store.get("no-time")
        assert stored is not None
        assert (stored.status.value, stored.attempts, server.paths) == ("done", 1, ["/no-time"])
    run(main)


@pytest.mark.parametrize("online", [True, False], ids=["a success", "an offline failure"])
def test_a_settle_whose_write_fails_once_stores_the_pages_answer_on_its_next_try(
        online: bool) -> None:
    """A store's failure may pass (an aborted transaction, a connection closing a moment). A
    success whose settle's write failed once was failed as ``result_not_storable``; an offline
    failure was left running, and its recovery spent the attempt (``page_gone`` at the
    ceiling) though the page never went (found in review)."""
    async def main() -> None:
        world = World()

        async def server(method: str, path: str, body: Any) -> Response:
            if not world.online:
                raise OSError("Failed to fetch")
            return Response(200, {"saved": True})

        tab = world.open_tab(transport=server)
        await settle()
        refused: list[str] = []

        async def once(_tab: Tab, operation: str, phase: str, args: tuple) -> None:
            ids = [c.job_id for c in args[0]] if operation == "update_many" else []
            record = await world.store.get(job.id) if job.id in ids else None
            if phase == "before" and record is not None and record.status.value == "running" \
                    and not refused:
                refused.append(job.id)
                raise StorageError("IndexedDB update_many failed: UnknownError: aborted.")

        world.store_hook = once
        world.online = online
        job = tab.queue.enqueue_fetch("POST", "/save", max_attempts=1)
        await settle()
        assert refused == [job.id]
        await world.advance(RETRY_MS[0])
        record = await world.store.get(job.id)
        assert record is not None
        if online:
            assert (record.status.value, record.result, record.code) == ("done", {"saved": True},
                                                                         None)
        else:
            assert (record.status.value, record.code, record.attempts) == ("pending", "offline", 0)
    run(main)


@pytest.mark.parametrize("phase", ["before", "after"])
def test_a_scheduler_stopped_while_its_claim_commits_hands_off_nothing(phase: str) -> None:
    # stop() (the database upgraded under an open tab: a tab with newer code takes over) landed
    # while a claim's transaction was under way: the claim committed and was handed off anyway,
    # as a run no one would ever store the outcome of, its run lock held while the tab lived —
    # the job stayed running for good and the tab that took over could never recover it.
    # Stopped before the claim's decision, nothing is claimed; after it, the claim is an orphan
    # never sent, its run lock let go, which the next holder recovers and runs once.
    async def main() -> None:
        world, server = World(), Server("hold")
        first = world.open_tab(transport=server)
        await settle()
        first.side.enqueue_fetch("POST", "/slow", type="slow")
        await settle()
        stopped: list[bool] = []

        async def stop_mid_claim(tab: Tab, operation: str, when: str, args: tuple) -> None:
            if tab is first and operation == "update_many" and when == phase and not stopped:
                stopped.append(True)
                tab.scheduler.stop()

        world.store_hook = stop_mid_claim
        job = first.side.enqueue_fetch("POST", "/x", type="fast")
        await settle()
        assert stopped and len(first.scheduler.flights) == 0
        assert [path for _, path, _ in server.calls] == ["/slow"]  # /x never sent from here
        world.store_hook = None
        if not server.held["/slow"].done():
            server.held["/slow"].set_result(Response(200, {}))
        world.open_tab(transport=server)
        for _ in range(10):
            await world.advance(30_000)
        record = await world.store.get(job.id)
        assert record is not None and record.status.value == "done"
        assert [path for _, path, _ in server.calls].count("/x") == 1
        assert not [name for name in world.locks.held() if name.startswith(f"{LOCK}:run:")]
    run(main)


# ---------------------------------------------------------------- no spin: a watch in its own way

def test_a_run_lock_let_go_elsewhere_is_claimed_without_the_watch_getting_in_its_own_way() -> None:
    # The engine watches a run lock held elsewhere with a shared request; it woke from inside
    # the watch's callback, so the pass asked for the lock (ifAvailable) while its own watch still
    # held it shared, found it held, watched again — round and round, no time moving, job stuck.
    async def main() -> None:
        world, server = World(), Server()
        tab = world.open_tab(transport=server, worker_host=True)
        await settle()
        job = tab.side.enqueue_fetch("POST", "/after-the-watch")
        other = world.locks.client()
        let_go = asyncio.get_running_loop().create_future()

        async def hold(_lock: Any) -> None:
            await let_go

        holding = asyncio.ensure_future(other.request(run_lock(LOCK, "default", job.id), hold))
        await settle()
        assert server.calls == []  # its run lock is held elsewhere: watched, not claimed
        let_go.set_result(None)
        await holding
        await settle()
        record = await world.store.get(job.id)
        assert (record.status.value, server.paths) == ("done", ["/after-the-watch"])
    run(main)


# -------------------------------------------------- a delete heard between a claim and its hand-off

def test_a_job_deleted_while_its_claim_was_being_stored_is_dropped_at_its_hand_off() -> None:
    # The holder froze right after its claim committed; another tab deleted the job meanwhile.
    # On resume the delete's news came before the run was in flight, so nothing acted on it, and
    # the deleted job ran on until the 30 s recheck (a simulation seed found it).
    async def main() -> None:
        world, server = World(), Server("hold")
        # A worker host: frozen, it keeps the lease (a page-held lease would be let go, and the
        # run refused on resume), so its claim goes on to the hand-off.
        holder = world.open_tab(transport=server, worker_host=True)
        await settle()  # its worker fetches its files, then takes the lease: before the other asks
        other = world.open_tab(page_lease=True)
        await settle()
        assert holder.holds_lease
        froze: list[str] = []

        async def freeze_after_claim(tab: Tab, operation: str, phase: str, args: tuple) -> None:
            if tab is holder and operation == "update_many" and phase == "after" and not froze:
                froze.append(operation)
                tab.freeze()
                await tab.thawed()

        world.store_hook = freeze_after_claim
        job = holder.side.enqueue_fetch("POST", "/deleted-mid-claim")
        await settle()
        assert froze and (await world.store.get(job.id)).status.value == "running"
        assert await other.side.delete_job(job.id)
        holder.resume()
        await settle()  # no time moves: not the 30 s recheck
        assert server.cancelled == ["/deleted-mid-claim"]  # its run began, and was dropped at once
        assert holder.scheduler is not None and job.id not in holder.scheduler.in_flight
    run(main)


# ---------------------------------------------- one type on the wire: a deleted run on a frozen tab

def test_a_deleted_job_still_sending_on_a_frozen_tab_keeps_its_type_waiting_elsewhere() -> None:
    # Tab A froze while sending job X; tab B took the lease and deleted X. X's record was gone,
    # so nothing told B that a request of type "save" was still on the wire: B sent the next save
    # beside it (the simulation found it). X's run lock, held by A's frozen worker, now says so.
    async def main() -> None:
        world, calls = World(), Server("hold")
        a = world.open_tab(transport=calls, page_lease=True)
        b = world.open_tab(transport=calls, page_lease=True)
        x = a.side.enqueue_fetch("PUT", "/position/v1", type="save")
        await settle()
        assert calls.holding == ["/position/v1"]
        a.freeze()  # A lets the lease go; its worker keeps X's run lock
        await settle()
        assert await b.side.delete_job(x.id)
        y = b.side.enqueue_fetch("PUT", "/position/v2", type="save")
        await settle()
        await world.advance(60_000)
        assert calls.paths == ["/position/v1"]  # v2 waits while v1 may be on the wire
        a.resume()  # A hears of the delete, drops X; its run lock goes, and B's watch wakes
        await settle()
        assert calls.cancelled == ["/position/v1"]
        assert calls.paths == ["/position/v1", "/position/v2"]
        assert (await y.done).status == "done"
    run(main)


# ---------------------------------------------------------------- a frozen worker-host holder

async def until_taken_over(world: World, tab: Tab) -> int:
    """Move time a ping at a time until ``tab`` holds the lease; returns the pings it took."""
    for pings in range(1, SILENT_PINGS + 3):
        await world.advance(PING_MS)
        if tab.queue.lease_holder is not None and tab.queue.lease_holder.holding:
            return pings
    raise AssertionError(f"{tab.name} never took the lease over")


def test_a_frozen_worker_host_holder_is_taken_over_and_gets_back_in_line_when_it_thaws() -> None:
    # A notebook kernel holds the lease from its worker's bootstrap; frozen with its page it
    # cannot let go, and the origin's queue stopped until it thawed (hours, perhaps).
    async def main() -> None:
        world, kernel_server, page_server = World(), Server("hold"), Server()
        kernel = world.open_tab(transport=kernel_server, worker_host=True)
        await settle()
        upload = kernel.side.enqueue_fetch("POST", "/upload", type="upload")
        await settle()
        assert kernel.holds_lease and kernel_server.paths == ["/upload"]
        kernel.freeze()  # mid-upload: its run lock stays held
        page = world.open_tab(transport=page_server, waiting=True)
        save = page.side.enqueue_fetch("POST", "/save", type="save")
        later = page.side.enqueue_fetch("POST", "/upload-2", type="upload")
        await settle()
        assert (await world.store.get(save.id)).status.value == "pending"

        pings = await until_taken_over(world, page)
        assert pings == SILENT_PINGS  # SILENT_PINGS pings unanswered, PING_MS apart: a minute
        await settle()
        assert (await save.done).status == "done" and page_server.paths == ["/save"]
        # The frozen kernel's upload is neither recovered nor doubled, and its type waits.
        assert (await world.store.get(upload.id)).status.value == "running"
        assert (await world.store.get(later.id)).status.value == "pending"

        kernel.resume()
        await settle()
        # it heard, and waits
        assert kernel.host_lease is not None and not kernel.host_lease.holding
        kernel_server.release("/upload")
        await settle()
        assert (await upload.done).status == "done"
        assert (await later.done).status == "done"
        assert kernel_server.paths == ["/upload"] and page_server.paths == ["/save", "/upload-2"]
        # One holder, and no steal back: the page answers the kernel's pings now.
        await world.advance(SILENT_PINGS * PING_MS * 2)
        assert page.queue.lease_holder is not None and page.queue.lease_holder.holding
        assert kernel.host_lease.watch.steals == 0 and not kernel.host_lease.holding
    run(main)


def test_a_busy_holder_page_is_taken_over_and_gets_back_in_line_unharmed() -> None:
    async def main() -> None:
        world, first_server, second_server = World(), Server(), Server()
        first = world.open_tab(transport=first_server, waiting=True)
        await settle()
        done_first = first.side.enqueue_fetch("POST", "/first")
        await settle()
        assert (await done_first.done).status == "done"
        first.block()  # a cell computing for minutes: its page hands its worker nothing
        second = world.open_tab(transport=second_server, waiting=True)
        job = second.side.enqueue_fetch("POST", "/second")
        await until_taken_over(world, second)
        await settle()
        assert (await job.done).status == "done" and second_server.paths == ["/second"]
        first.unblock()
        await settle()
        holder = first.queue.lease_holder
        assert holder is not None and not holder.holding  # it heard it was taken, and waits
        third = first.side.enqueue_fetch("POST", "/third")
        await settle()
        assert (await third.done).status == "done"
        assert first_server.paths == ["/first"] and second_server.paths == ["/second", "/third"]
    run(main)


def test_a_grant_revoked_in_the_turn_it_arrived_is_handed_back_unused() -> None:
    # A page that lent the lease and lost it in the same turn (a freeze, a steal): the worker
    # began a drain under it anyway, and claimed runs its page refused, round and round.
    async def main() -> None:
        page_end, worker_end = link_pair()
        sent: list[dict[str, Any]] = []
        page_end.subscribe(sent.append)
        lease = LinkLease(worker_end)
        drained: list[bool] = []

        async def drain() -> None:
            drained.append(True)

        holding = asyncio.ensure_future(lease.hold(drain, lambda: None))
        await settle()
        page_end.send(make("lease_granted", epoch=1))
        page_end.send(make("lease_revoked", epoch=1))
        assert await holding is False
        assert drained == []
        assert [m["type"] for m in sent] == ["lease_request", "lease_released"]
        assert sent[1]["epoch"] == 1
    run(main)


# ---------------------------------------------------------------- a run lock refused

def test_a_run_lock_the_lock_manager_refuses_loses_no_job_and_stalls_no_lane(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``navigator.locks.request`` can refuse (an opaque origin, a context being torn down): the
    settle that asked for its lane's next run lock is stored all the same, the job whose lock
    was refused waits, unclaimed, for the pass's bounded re-look — asking no faster than that
    meanwhile — and runs once asking works again. (A refusal in a settle used to end the settle
    task: the run stayed ``running`` with its run lock held, and its lane waited for good.)"""
    from pyjobq.loop import new_future
    from pyjobq.memory import MemoryLocks

    refusing = True
    asked: list[str] = []
    take = MemoryLocks.take_if_available

    def refused_while_refusing(self: MemoryLocks, name: str) -> Any:
        if f"{LOCK}:run:" not in name:
            return take(self, name)
        asked.append(name)
        if not refusing or len(asked) == 1:  # the first (/a's) is granted
            return take(self, name)
        answer = new_future()
        answer.set_exception(RuntimeError("navigator.locks.request failed: InvalidStateError"))
        return answer

    monkeypatch.setattr(MemoryLocks, "take_if_available", refused_while_refusing)

    async def main() -> None:
        nonlocal refusing
        world = World()
        gate = asyncio.Event()
        server_calls: list[str] = []

        async def server(method: str, path: str, body: Any) -> Response:
            server_calls.append(path)
            if path == "/a":
                await gate.wait()
            return Response(200, {})

        tab = world.open_tab(transport=server)
        jobs = [tab.queue.enqueue_fetch("POST", path) for path in ("/a", "/b", "/c")]
        await settle()
        assert server_calls == ["/a"]
        gate.set()
        await world.advance(60_000)
        records = [await world.store.get(job.id) for job in jobs]
        assert [r.status.value if r else None for r in records] == ["done", "pending", "pending"]
        assert server_calls == ["/a"]
        assert 1 < len(asked) <= 12, asked  # re-looks, bounded; not a spin
        refusing = False
        for _ in range(6):
            await world.advance(30_000)
        records = [await world.store.get(job.id) for job in jobs]
        assert [r.status.value if r else None for r in records] == ["done", "done", "done"]
        assert server_calls == ["/a", "/b", "/c"]
        assert not [name for name in world.locks.held() if name.startswith(f"{LOCK}:run:")]
    run(main)


# ---------------------------------------------------------------- back online mid-run

async def a_run_failing_offline(world: World) -> tuple[Tab, Any, asyncio.Event, list[float]]:
    """A tab running one job whose fetch fails offline once ``gate`` is set (then succeeds), after
    a long spell (the ladder of attempts given back at its cap); the fetches' times in ``calls``."""
    gate = asyncio.Event()
    calls: list[float] = []

    async def server(method: str, path: str, body: Any) -> Response:
        calls.append(world.clock.now())
        if len(calls) == 1:
            await gate.wait()
            raise OSError("Failed to fetch (the page is offline)")
        return Response(200, {})

    tab = world.open_tab(transport=server)
    job = tab.queue.enqueue_fetch("POST", "/x")
    await settle()
    assert len(calls) == 1
    await world.store.update_many([Change(job.id, lambda cur: cur.evolve(given_back=8))])
    return tab, job, gate, calls


async def ran_again_at_once(world: World, job: Any, calls: list[float]) -> None:
    """Within a second the job ran again and is done (not a ~39 s wait on the offline ladder)."""
    await world.advance(1_000)
    record = await world.store.get(job.id)
    assert record is not None and record.status.value == "done", record
    assert len(calls) == 2


def test_a_run_that_fails_offline_as_the_network_comes_back_is_due_at_once() -> None:
    """The ``online`` event makes every job waiting out an offline failure due now — but a run
    still in flight then is not waiting yet: its failure, read offline by the page a moment
    before the event, used to arrive after the sweep and wait out its whole backoff (up to
    ~39 s after a long spell, the ladder at its cap) with the network back. A run the network
    came back during is due at once when it fails offline."""
    async def main() -> None:
        world = World()
        tab, job, gate, calls = await a_run_failing_offline(world)
        tab.block()  # what the page posts waits: the run's answer reaches the worker late
        world.online = False
        gate.set()  # the fetch fails, the page reading navigator.onLine false
        await settle()
        world.online = True
        assert tab.scheduler is not None
        tab.scheduler.back_online()  # the worker's own online event: the job is still running
        await settle()
        tab.unblock()  # the answer arrives after the sweep
        await settle()
        await ran_again_at_once(world, job, calls)
    run(main)


def test_a_settle_whose_write_waits_through_the_online_event_still_makes_the_run_due() -> None:
    """The same race one step later: the answer arrived before the ``online`` event, but its
    transaction was still waiting (IndexedDB busy) when the event's sweep found the job
    running. Whether the network came back is read as the record is written, not as the
    settle began (found in review)."""
    async def main() -> None:
        world = World()
        tab, job, gate, calls = await a_run_failing_offline(world)
        store_gate = asyncio.Event()
        update_many, held = world.store.update_many, []

        async def busy(changes: Any, *args: Any, **kwargs: Any) -> Any:
            if not store_gate.is_set() and any(c.job_id == job.id for c in changes):
                held.append(job.id)
                await store_gate.wait()
            return await update_many(changes, *args, **kwargs)

        world.store.update_many = busy  # type: ignore[method-assign]
        world.online = False
        gate.set()
        await settle()
        assert held == [job.id]  # the settle's write waits
        world.online = True
        assert tab.scheduler is not None
        tab.scheduler.back_online()
        await settle()
        store_gate.set()
        await settle()
        await ran_again_at_once(world, job, calls)
    run(main)


def test_a_run_handed_off_offline_whose_failure_is_stored_once_back_online_is_due_at_once() -> None:
    """The tab never heard the ``online`` event (frozen through it, or its worker's missed it):
    a run handed off while the network was down, whose offline failure is stored once the
    network is up again, is due at once, not after the offline ladder's wait (found by the
    simulation's back-online oracle)."""
    async def main() -> None:
        world = World()
        world.online = False
        tab, job, gate, calls = await a_run_failing_offline(world)
        tab.block()  # the run's answer waits on the page
        gate.set()  # the fetch fails, the page reading navigator.onLine false
        await settle()
        world.online = True  # and no online event reaches this tab
        tab.unblock()
        await settle()
        await ran_again_at_once(world, job, calls)
    run(main)


def test_a_scheduler_that_begins_with_the_network_up_runs_a_job_left_waiting_offline() -> None:
    """A job failed offline in a tab since closed; the network came back while no tab was open
    (or before this tab's worker began), so no ``online`` event reached a scheduler. The next
    holder's first pass begins as that event does: the job runs at once, not when its ladder
    says (found by the simulation's back-online oracle)."""
    async def main() -> None:
        world = World()
        first, job, gate, calls = await a_run_failing_offline(world)
        world.online = False
        gate.set()
        await settle()
        record = await world.store.get(job.id)
        assert record is not None and record.code == "offline"
        waits = (record.next_retry_at or 0.0) - world.clock.now()
        assert waits > 20_000, waits  # the ladder at its cap
        first.crash()
        world.online = True

        async def server(method: str, path: str, body: Any) -> Response:
            calls.append(world.clock.now())
            return Response(200, {})

        world.open_tab(transport=server)
        await settle()
        await ran_again_at_once(world, job, calls)
    run(main)


def named_server(world: World, calls: list[str], name: str, *,
                 always_offline: bool = False) -> Any:
    """A transport that notes ``name`` in ``calls`` at each request and fails as fetch does
    with no network: while the world is offline, or (``always_offline``) whatever it is."""
    async def send(method: str, path: str, body: Any) -> Response:
        calls.append(name)
        if always_offline or not world.online:
            raise OSError("Failed to fetch")
        return Response(200, {})
    return send


async def offline_at_the_cap(world: World, tab: Tab, path: str) -> JobRecord:
    """``POST path``, filed on ``tab`` with the network down, fails offline; once its record says
    it was given back 8 times, it is due, and fails offline again: its next try is at the
    ladder's cap. Returns its record then."""
    world.online = False
    job = tab.queue.enqueue_fetch("POST", path)
    await settle()
    await world.store.update_many([Change(job.id, lambda cur: cur.evolve(given_back=8))])
    record = await world.store.get(job.id)
    assert record is not None and record.next_retry_at is not None
    await world.advance(record.next_retry_at - world.clock.now() + 1)
    record = await world.store.get(job.id)
    assert record is not None
    return record


@pytest.mark.parametrize("back_first", [False, True],
                         ids=["back after the takeover", "back before the takeover"])
def test_an_offline_failure_another_tab_stored_then_closed_is_due_when_the_network_is_back(
        back_first: bool) -> None:
    """Tab B stores a job's offline failure (the ladder at its 30 s cap) and closes. Tab A had
    swept already, so nothing told it a job waits: with the ``online`` event unheard, the job
    waited out the ladder, 30 s with the network back. B's news of the failure, heard with the
    network down, makes A's next pass watch for it (begun with the network down) or sweep
    (begun with it up) (found in review)."""
    async def main() -> None:
        world = World()
        calls: list[str] = []

        def server(name: str) -> Any:
            return named_server(world, calls, name)

        a = world.open_tab(transport=server("A"), page_lease=True)
        await settle()  # A's first pass, the network up: it swept
        a.freeze()
        b = world.open_tab(transport=server("B"), page_lease=True)
        await settle()
        if back_first:
            a.resume()  # awake in line behind B: it hears B's news with the network down
            await settle()
        record = await offline_at_the_cap(world, b, "/j")
        job_id = record.id
        assert record.code == "offline" and calls == ["B", "B"]
        assert (record.next_retry_at or 0.0) - world.clock.now() > 20_000  # the ladder's cap
        if back_first:
            world.online = True  # no online event reaches any tab
        b.crash()
        if a.frozen:
            a.resume()
        await settle()
        world.online = True  # no online event reaches A
        await settle()
        await world.advance(WATCH_MS + 1)
        record = await world.store.get(job_id)
        assert record is not None and record.status.value == "done", record
        assert calls == ["B", "B", "A"]
    run(main)


def test_two_tabs_whose_pages_read_the_network_down_do_not_run_a_job_back_to_back() -> None:
    """Their workers read it up, their pages down (a disagreement for good): each failure is
    stored offline, and the other tab's news of it must not make it due again at once — a first
    version of heard_of swept on that news, and the two ran the job 1,428 times with the clock
    standing still (found in review). The ladder it is."""
    async def main() -> None:
        world = World()
        calls: list[str] = []
        a, b = (world.open_tab(transport=named_server(world, calls, name, always_offline=True))
                for name in "AB")
        await settle()
        world.workers_online = True  # the workers read the network up
        world.online = False  # the pages read it down
        job = a.queue.enqueue_fetch("POST", "/j")
        for _ in range(40):
            await settle()
        record = await world.store.get(job.id)
        assert record is not None
        assert (len(calls), record.status.value, record.code) == (1, "pending", "offline")
        assert (record.next_retry_at or 0.0) > world.clock.now()
    run(main)


@pytest.mark.parametrize("page_lease", [True, False], ids=["page-held lease", "worker-held"])
def test_a_tab_frozen_idle_through_the_online_event_runs_its_offline_job_within_a_second(
        page_lease: bool) -> None:
    """The tab stored a failure with no network and went idle; it froze, the network came back
    and no ``online`` event reached it (a frozen tab's is lost; Chromium does not always fire
    it inside a dedicated worker). Idle, it was told of no revocation and runs no pass: it
    reads the network again every WATCH_MS while such a job waits, and runs the job then, not
    when the ladder says (~30 s; found by review, and by the simulation's back-online
    oracle)."""
    async def main() -> None:
        world = World()
        calls: list[float] = []

        async def server(method: str, path: str, body: Any) -> Response:
            calls.append(world.clock.now())
            if not world.online:
                raise OSError("Failed to fetch (the page is offline)")
            return Response(200, {})

        tab = world.open_tab(transport=server, page_lease=page_lease)
        await settle()
        record = await offline_at_the_cap(world, tab, "/x")
        job_id = record.id
        assert record.code == "offline" and record.next_retry_at is not None
        assert record.next_retry_at - world.clock.now() > 20_000  # the ladder at its cap
        tab.freeze()
        world.online = True  # no online event reaches the frozen tab
        tab.resume()
        await settle()
        await world.advance(WATCH_MS)
        record = await world.store.get(job_id)
        assert record is not None and record.status.value == "done", record
        assert world.online and len(calls) == 3  # two offline tries, then the one that went
    run(main)


def test_a_scheduler_stopped_as_its_settle_stores_an_offline_failure_reads_and_writes_no_more(
        ) -> None:
    """The settle under way when the scheduler stopped (a pagehide, a database upgrade) still
    stores its run's offline failure; the stopped engine must not then start watching the
    network, nor sweep the store once it is back (found in review)."""
    async def main() -> None:
        world = World()

        async def server(method: str, path: str, body: Any) -> Response:
            raise OSError("Failed to fetch (the page is offline)")

        tab = world.open_tab(transport=server)
        await settle()
        assert tab.scheduler is not None
        scheduler = tab.scheduler
        ops: list[str] = []
        stopped: list[bool] = []

        async def hook(context: Any, operation: str, phase: str, args: Any) -> None:
            if context is tab and phase == "before":
                ops.append(operation)
                if operation == "update_many" and scheduler.flights and not stopped:
                    stopped.append(True)
                    scheduler.stop()  # while the settle's transaction is under way

        world.store_hook = hook
        world.online = False
        job = tab.queue.enqueue_fetch("POST", "/x")
        await settle()
        record = await world.store.get(job.id)
        assert record is not None and record.code == "offline" and stopped
        stored = len(ops)
        await world.advance(5 * WATCH_MS)
        world.online = True
        await world.advance(5 * WATCH_MS)
        assert ops[stored:] == []
    run(main)


def test_an_engine_with_no_job_waiting_offline_does_not_watch_the_network() -> None:
    """The one-second watch runs only while a job may wait out an offline failure: an engine
    that swept (it began online) and stored none since arms no timer while it is offline and
    idle (found in review: it read the network every second for as long as it was offline)."""
    async def main() -> None:
        world = World()

        async def server(method: str, path: str, body: Any) -> Response:
            return Response(200, {})

        tab = world.open_tab(transport=server)
        await settle()
        world.online = False
        job = tab.queue.enqueue_fetch("POST", "/x")  # the server answers: nothing waits offline
        await settle()
        assert (await job.done).status == "done"
        await world.advance(60_000)  # idle and offline
        soonest = world.clock.next_timer_at()
        assert soonest is None or soonest - world.clock.now() > WATCH_MS, soonest
    run(main)


# ------------------------------------------------------------- a schedule's trouble stays its own

def test_a_schedule_whose_slot_is_already_stored_does_not_halt_the_other_jobs() -> None:
    """A ``schedules`` row restored from an older copy (or written by other code) whose latest
    due slot's occurrence is already stored: the occurrence's add raised in every look, so every
    pass failed and no job of any type ran while that slot stayed the latest due."""
    from test_periodic import MINUTE, NAME, Ticks, open_with, slot_id, to_next_slot

    async def main() -> None:
        world, ticks, server = World(), Ticks(), Server()
        tab = open_with(world, ticks, transport=server, page_lease=True)
        await settle()
        slot = await to_next_slot(world)
        assert (await world.store.get(slot_id(slot))).status.value == "done"
        older = dict(world.store.raw_schedules()[NAME], last_slot=slot - MINUTE,
                     last_job_id=slot_id(slot - MINUTE))
        world.store.put_raw_schedule(older)  # the copy from before that slot ran
        tab.scheduler.periodic.heard()
        job = tab.side.enqueue_fetch("POST", "/other", type="other")
        await world.advance(2_000)
        record = await world.store.get(job.id)
        assert (record.status.value, server.paths) == ("done", ["/other"])
        # The slot is accounted for by the occurrence already stored: not run again, and the
        # next slot is enqueued once, at its moment.
        assert world.store.raw_schedules()[NAME]["last_slot"] == slot
        assert ticks.ids() == [slot_id(slot)]
        following = await to_next_slot(world)
        assert ticks.ids() == [slot_id(slot), slot_id(following)]
    run(main)


def test_a_schedule_whose_advance_keeps_failing_is_skipped_and_the_pass_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    """Any failure of one schedule's advance (not only a stored slot) is that schedule's: logged,
    tried again later, and the pass's recovery and claims go on meanwhile."""
    from test_periodic import Ticks, open_with, to_next_slot

    async def main() -> None:
        world, ticks, server = World(), Ticks(), Server()
        tab = open_with(world, ticks, transport=server, page_lease=True)
        await settle()
        store = tab.scheduler.periodic._engine.schedules

        async def refuse(name: str, decide: Any) -> Any:
            raise StorageError(f"IndexedDB advance_schedule failed for {name}")

        store.advance_schedule = refuse  # type: ignore[method-assign]
        await to_next_slot(world)
        job = tab.side.enqueue_fetch("POST", "/other", type="other")
        await world.advance(2_000)
        assert (await world.store.get(job.id)).status.value == "done"
        assert ticks.ids() == []
        looks = tab.scheduler.looks
        await world.advance(10_000)
        assert tab.scheduler.looks - looks <= 3  # tried again later, not in a spin
        del store.advance_schedule  # the store works again: the slot is enqueued
        await world.advance(60_000)
        assert len(ticks.ids()) == 1

    with caplog.at_level(logging.WARNING, logger="pyjobq"):
        run(main)
    assert any("advance_schedule failed" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------- an answer in hand is kept

@pytest.mark.parametrize("online", [True, False])
def test_an_answer_is_stored_however_long_the_store_fails_and_never_sent_again(
        online: bool) -> None:
    """The store failing for about 1.2 s outlasted the settle's tries: a success fell back to
    ``result_not_storable`` through the same failing store, stayed running, and the next pass
    recovered it and sent it again (a ``POST /pay`` applied twice; with ``max_attempts=1``,
    ``failed page_gone`` though the server applied it)."""
    async def main() -> None:
        world = World()
        sent: list[str] = []  # the requests that reached the server

        async def server(method: str, path: str, body: Any) -> Response:
            if not world.online:
                raise OSError("Failed to fetch")
            sent.append(path)
            return Response(200, {"paid": True})

        tab = world.open_tab(transport=server)
        await settle()
        failing_until: list[float] = []

        async def outage(_tab: Tab, operation: str, phase: str, args: tuple) -> None:
            if operation != "update_many" or phase != "before":
                return
            ids = [c.job_id for c in args[0]]
            record = await world.store.get(job.id) if job.id in ids else None
            if not failing_until and record is not None and record.status.value == "running":
                failing_until.append(world.clock.now() + 5_000)
            if failing_until and world.clock.now() < failing_until[0]:
                raise StorageError("IndexedDB update_many failed: UnknownError: aborted.")

        world.store_hook = outage
        world.online = online
        job = tab.queue.enqueue_fetch("POST", "/pay", max_attempts=1)
        await settle()
        for _ in range(20):
            await world.advance(1_000)
        assert failing_until
        record = await world.store.get(job.id)
        if online:
            assert (record.status.value, record.result, record.code) == ("done", {"paid": True},
                                                                         None)
            assert sent == ["/pay"]
        else:
            assert (record.status.value, record.code, record.attempts) == ("pending", "offline", 0)
            world.online = True
            tab.scheduler.wake()
            await world.advance(60_000)
            record = await world.store.get(job.id)
            assert (record.status.value, record.attempts, sent) == ("done", 1, ["/pay"])
    run(main)


def test_a_success_whose_write_fails_once_more_than_the_tries_is_stored_whole() -> None:
    """An outage of exactly the settle's tries (three aborted transactions, about 1.1 s): the
    not-storable write came at once after the last, found the store working again, and a
    success the server applied ended ``failed result_not_storable``. Only an error that blames
    the value fails it so; the store's own trouble is waited out."""
    async def main() -> None:
        world, server = World(), Server(Response(200, {"paid": True}))
        tab = world.open_tab(transport=server)
        await settle()
        fails: list[str] = []

        async def three(_tab: Tab, operation: str, phase: str, args: tuple) -> None:
            if operation != "update_many" or phase != "before" \
                    or job.id not in [c.job_id for c in args[0]]:
                return
            found = await world.store.get(job.id)
            if found is not None and found.status.value == "running" and len(fails) < 3:
                fails.append(operation)
                raise StorageError("IndexedDB update_many failed: AbortError: aborted")

        world.store_hook = three
        job = tab.queue.enqueue_fetch("POST", "/pay", max_attempts=1)
        await settle()
        for _ in range(10):
            await world.advance(1_000)
        found = await world.store.get(job.id)
        assert (len(fails), found.status.value, found.result, server.paths) == (
            3, "done", {"paid": True}, ["/pay"])
    run(main)


# ---------------------------------------------------------------- keys: the newest lands last

def test_an_older_keyed_job_is_not_replaced_by_a_newer_one_that_no_longer_waits() -> None:
    """Tab W filed v2 of a key while v1 ran in tab H, then cancelled it, and its news never went
    out; v1 failed 503 and was deleted as replaced by a job that no longer existed: nothing of
    the key was ever sent again. The replace is decided in the transaction that deletes."""
    async def main() -> None:
        world, server = World(), Server("hold")
        holder = world.open_tab(transport=server, page_lease=True)
        await settle()
        v1 = holder.side.enqueue_fetch("PUT", "/doc", {"v": 1}, key="doc")
        await settle()
        assert server.holding == ["/doc"]
        other = world.open_tab(transport=server)
        await world.advance(1)  # filed later: the newer of the key
        v2 = other.side.enqueue_fetch("PUT", "/doc", {"v": 2}, key="doc")
        await settle()
        now = world.clock.now()
        # W's cancel is stored, and W closes before its news goes out.
        await world.store.update(Change(v2.id, lambda cur: policy.cancel(cur, now), UNFINISHED))
        other.crash()
        server.release("/doc", Response(503, {}))
        for _ in range(10):
            await world.advance(2_000)
        record = await world.store.get(v1.id)
        assert record is not None and (record.status.value, record.code) == ("done", None)
        assert [body for _, _, body in server.calls] == [{"v": 1}, {"v": 1}]
    run(main)


def test_retrying_an_older_keyed_job_after_a_newer_one_succeeded_sends_nothing() -> None:
    """"Retry failed" sent v1 of a key after v2 of it had succeeded: the server's document went
    back to v1. An older job of a key whose newer job is stored ends as replaced instead."""
    async def main() -> None:
        world = World()
        server = Server(Response(409, {"code": "stale_etag"}))
        tab = world.open_tab(transport=server, page_lease=True)
        await settle()
        v1 = tab.side.enqueue_fetch("PUT", "/doc", {"v": 1}, key="doc")
        assert (await v1.done).code == "stale_etag"
        await world.advance(1)
        v2 = tab.side.enqueue_fetch("PUT", "/doc", {"v": 2}, key="doc")
        assert (await v2.done).status == "done"
        assert await tab.side.retry_job(v1.id) is False
        assert await tab.side.retry_all() == 0
        await world.advance(10_000)
        assert [body for _, _, body in server.calls] == [{"v": 1}, {"v": 2}]
        assert await world.store.get(v1.id) is None  # replaced: its newer job landed
        assert (await world.store.get(v2.id)).status.value == "done"
    run(main)


def test_retry_all_of_two_failed_jobs_of_a_key_sends_only_the_newer() -> None:
    async def main() -> None:
        world = World()
        server = Server(Response(409, {}), Response(409, {}))
        tab = world.open_tab(transport=server, page_lease=True)
        await settle()
        v1 = tab.side.enqueue_fetch("PUT", "/doc", {"v": 1}, key="doc")
        await v1.done
        await world.advance(1)
        v2 = tab.side.enqueue_fetch("PUT", "/doc", {"v": 2}, key="doc")
        await v2.done
        await tab.side.retry_all()
        await world.advance(10_000)
        assert [body for _, _, body in server.calls] == [{"v": 1}, {"v": 2}, {"v": 2}]
        assert await world.store.get(v1.id) is None
        assert (await world.store.get(v2.id)).status.value == "done"
    run(main)


# ---------------------------------------------------------------- records other code wrote

def test_a_stored_paused_record_with_no_yield_lock_runs() -> None:
    """Paused with no yield lock (older or foreign data): nothing unparks it in the persistent
    queue (unparking needs a yield lock; resume_type is volatile jobs'; retry_job refuses
    paused), so it never ended."""
    async def main() -> None:
        world, server = World(), Server()
        stale = record("foreign", status="paused", next_retry_at=None,
                       created_at=world.clock.now() - 1_000)
        world.store.put_raw(stale.to_dict())
        world.open_tab(transport=server, page_lease=True)
        await world.advance(1_000)
        found = await world.store.get("foreign")
        assert (found.status.value, server.paths) == ("done", ["/foreign"])
    run(main)


def test_a_paused_keyed_record_behind_a_newer_done_job_of_its_key_is_replaced_not_sent() -> None:
    """Unparking returns a job to the queue as a retry does: an older job of a key, paused by
    other code, was sent over the newer job of its key that had already landed."""
    async def main() -> None:
        world, server = World(), Server()
        now = world.clock.now()
        world.store.put_raw(record("v1", status="paused", key="doc", type="save",
                                   created_at=now - 10_000, next_retry_at=None).to_dict())
        world.store.put_raw(record("v2", status="done", key="doc", type="save",
                                   created_at=now - 5_000).to_dict())
        world.open_tab(transport=server, page_lease=True)
        await world.advance(5_000)
        assert server.paths == [] and await world.store.get("v1") is None
        assert (await world.store.get("v2")).status.value == "done"
    run(main)


def test_a_done_record_stamped_in_the_future_is_swept_seven_days_after_it_was_found() -> None:
    """A done record whose ``updated_at`` is far in the future (another writer's clock) was never
    older than seven days, so never swept: its time is clamped to now when the sweep finds it."""
    async def main() -> None:
        world = World()
        year = 365 * 86_400_000.0
        ahead = record("ahead", status="done", created_at=world.clock.now() + year,
                       updated_at=world.clock.now() + year)
        world.store.put_raw(ahead.to_dict())
        world.open_tab(transport=Server(), page_lease=True)
        await settle()
        assert await world.store.get("ahead") is not None
        for _ in range(8 * 24 + 2):
            await world.advance(3_600_000)
        assert await world.store.get("ahead") is None
    run(main)
