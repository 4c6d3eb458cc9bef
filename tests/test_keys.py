"""Keys that replace (``enqueue_fetch(..., key=)``, ``enqueue_persistent``, volatile ``enqueue``),
on simulated tabs: a waiting job of the key is replaced in the transaction that stores the new
one, a running one is followed, one job of a key runs at a time, and the replaced job's ``done``
resolves cancelled with the code ``replaced`` in every tab."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from helpers import Server, one_tab, serving
from pyjobq import Code, InvalidJobError
from pyjobq.core.codes import REPLACED_ERROR
from pyjobq.core.messages import RECHECK_MS
from pyjobq.core.status import TERMINAL, Status
from pyjobq.executor.registry import Handles, Listeners
from pyjobq.testing import FakeClock, Response, World, run, settle


def paths_of(server: Server) -> list[str]:
    return server.paths


async def statuses(world: World) -> list[tuple[str, str, str | None]]:
    """(path, status, key) of every stored record, oldest first."""
    return [(r._params["path"], r.status.value, r.key) for r in await world.store.all()]


def test_a_debounce_is_one_call_and_only_the_last_change_is_sent() -> None:
    async def main() -> None:
        world, server, tab = serving()
        jobs = []
        for n in range(3):
            jobs.append(tab.side.enqueue_fetch("PUT", f"/doc/{n}", {"n": n}, key="doc-1",
                                               delay_ms=2_000))
            await settle()
            await world.advance(500)  # each change well inside the last one's delay
        assert await statuses(world) == [("/doc/2", "pending", "doc-1")]
        for old in jobs[:2]:
            outcome = await old.done
            assert (outcome.status, outcome.code) == (Status.CANCELLED, Code.REPLACED)
            assert tab.published[old.id]["deleted"] is True
            assert tab.published[old.id]["code"] == "replaced"
        assert server.calls == []
        await world.advance(2_000)
        assert server.calls == [("PUT", "/doc/2", {"n": 2})]
        assert (await jobs[2].done).status == Status.DONE
    run(main)


def test_a_key_replaces_a_job_waiting_out_its_retry_backoff() -> None:
    async def main() -> None:
        world, server, tab = serving(Response(500, {"error": "busy"}))
        old = tab.side.enqueue_fetch("PUT", "/old", key="k")
        await settle()
        assert (await world.store.get(old.id)).status is Status.PENDING  # backing off ~1 s
        new = tab.side.enqueue_fetch("PUT", "/new", key="k")
        await settle()
        assert ((await old.done).code, (await new.done).status) == (Code.REPLACED, Status.DONE)
        assert server.paths == ["/old", "/new"]
        await world.advance(60_000)
        assert server.paths == ["/old", "/new"]  # the old one never retried
    run(main)


def test_a_running_job_of_the_key_is_followed_not_replaced() -> None:
    async def main() -> None:
        world, server, tab = serving("hold")
        old = tab.side.enqueue_fetch("PUT", "/old", key="k")
        await settle()
        assert server.holding == ["/old"]
        new = tab.side.enqueue_fetch("PUT", "/new", key="k")
        await settle()
        assert await statuses(world) == [("/old", "running", "k"), ("/new", "pending", "k")]
        server.release("/old")
        await settle()
        assert ((await old.done).status, (await new.done).status) == (Status.DONE, Status.DONE)
        assert server.paths == ["/old", "/new"]
    run(main)


def test_one_job_of_a_key_runs_at_a_time_across_lanes_and_the_next_starts_at_once() -> None:
    """The key's running job is in lane ``a``; the new one, in idle lane ``b``, waits for it and
    starts as soon as it ends — no timer, no recheck."""
    async def main() -> None:
        world, server, tab = serving("hold")
        tab.side.enqueue_fetch("PUT", "/a", key="k", type="a")
        await settle()
        new = tab.side.enqueue_fetch("PUT", "/b", key="k", type="b")
        other = tab.side.enqueue_fetch("PUT", "/other", type="b")  # lane b goes on meanwhile
        await settle()
        assert server.paths == ["/a", "/other"]
        assert (await world.store.get(new.id)).status is Status.PENDING
        server.release("/a")
        await settle()  # no clock moved
        assert server.paths == ["/a", "/other", "/b"]
        assert ((await new.done).status, (await other.done).status) == (Status.DONE, Status.DONE)
    run(main)


def test_a_keyed_run_that_falls_back_to_waiting_behind_a_newer_job_is_replaced() -> None:
    """The old save was on the wire when the new one came; it failed and would retry: the newer
    one carries the latest change, so the old one is replaced rather than sent again."""
    async def main() -> None:
        world, server, tab = serving("hold")
        old = tab.side.enqueue_fetch("PUT", "/old", key="k")
        await settle()
        new = tab.side.enqueue_fetch("PUT", "/new", key="k")
        await settle()
        server.release("/old", Response(500, {"error": "busy"}))
        await settle()
        outcome = await old.done
        assert (outcome.status, outcome.code) == (Status.CANCELLED, Code.REPLACED)
        assert (await new.done).status == Status.DONE
        await world.advance(120_000)
        assert server.paths == ["/old", "/new"]
        assert await statuses(world) == [("/new", "done", "k")]
    run(main)


def test_retry_job_of_an_old_keyed_job_behind_a_newer_one_is_replaced() -> None:
    """At most one job of a key waits: a failed one retried beside a newer waiting one is
    replaced at once, not revived (the newer carries the latest change)."""
    async def main() -> None:
        world, server, tab = serving(Response(422, {"code": "invalid"}), "hold")
        failed = tab.side.enqueue_fetch("PUT", "/failed", key="k")
        await settle()
        assert (await world.store.get(failed.id)).status is Status.FAILED
        blocker = tab.side.enqueue_fetch("PUT", "/blocker")  # holds lane default
        newer = tab.side.enqueue_fetch("PUT", "/newer", key="k", delay_ms=10_000)
        await settle()
        assert await tab.side.retry_job(failed.id) is False
        assert (await failed.done).status == Status.FAILED  # its end came before the retry
        await settle()
        keyed = [s for s in await statuses(world) if s[2] == "k"]
        assert keyed == [("/newer", "pending", "k")]
        server.release("/blocker")
        await world.advance(10_000)
        assert server.paths == ["/failed", "/blocker", "/newer"]
        assert ((await blocker.done).status, (await newer.done).status) == ("done", "done")
    run(main)


def test_a_handle_in_another_tab_resolves_replaced() -> None:
    async def main() -> None:
        world, server = World(), Server()
        a = world.open_tab(transport=server)
        b = world.open_tab(transport=server)
        old = a.side.enqueue_fetch("PUT", "/from-a", key="doc", delay_ms=5_000)
        await settle()
        new = b.side.enqueue_fetch("PUT", "/from-b", key="doc", delay_ms=5_000)
        await settle()
        outcome = await asyncio.wait_for(old.done, 1)
        assert (outcome.status, outcome.code, outcome.error) == (
            Status.CANCELLED, Code.REPLACED, "replaced by a newer job of its key")
        await world.advance(5_000)
        assert server.paths == ["/from-b"]
        assert (await new.done).status == Status.DONE
    run(main)


def test_a_handle_looked_up_after_the_news_of_a_replacement_says_replaced() -> None:
    """``queue.job(id)`` once the news of the replacement came (a handle made after the one the
    news settled, in any tab): the record is gone, and the news heard says why. Firefox delivers
    that news soon enough for this to be what a user sees."""
    async def main() -> None:
        world, server = World(), Server()
        a = world.open_tab(transport=server)
        b = world.open_tab(transport=server)
        c = world.open_tab(transport=server)
        old = a.side.enqueue_fetch("PUT", "/from-a", key="doc", delay_ms=5_000)
        await settle()
        b.side.enqueue_fetch("PUT", "/from-b", key="doc", delay_ms=5_000)
        await settle()
        assert (await asyncio.wait_for(old.done, 1)).code == Code.REPLACED
        for tab in (a, c):  # the tab that filed it, and one that never awaited it
            later = await asyncio.wait_for(tab.side.job(old.id).done, 1)
            assert (later.status, later.code) == (Status.CANCELLED, Code.REPLACED), tab.name
        never = await asyncio.wait_for(c.side.job("f" * 32).done, 1)
        assert never.code == Code.NOT_FOUND  # no news of it: not found, as before
    run(main)


def test_two_tabs_enqueueing_one_key_at_once_leave_exactly_one_waiting() -> None:
    async def main() -> None:
        world, server = World(yields=2), Server()
        tabs = [world.open_tab(transport=server) for _ in range(3)]
        jobs = [t.side.enqueue_fetch("PUT", f"/{t.name}", key="k", delay_ms=1_000)
                for t in tabs]
        await settle()
        waiting = [s for s in await statuses(world) if s[1] == "pending"]
        assert len(waiting) == 1
        outcomes = [j.done.result() for j in jobs if j.done.done()]
        assert sorted(o.code for o in outcomes) == [Code.REPLACED, Code.REPLACED]
        await world.advance(1_000)
        assert server.paths == [waiting[0][0]]
    run(main)


@pytest.mark.parametrize("turns", range(0, 30))
def test_a_replacement_racing_a_claim_sends_the_old_job_at_most_once_and_the_new_one_last(
        turns: int) -> None:
    """The new job is filed ``turns`` event-loop turns after the old one, while the store yields
    between requests as IndexedDB does: whichever wins — the claim of the old one or its
    replacement — the server hears the new one last, the old one at most once, and each handle
    says what happened."""
    async def main() -> None:
        world, server = World(yields=2), Server()
        tab = world.open_tab(transport=server)
        old = tab.side.enqueue_fetch("PUT", "/old", key="k")
        for _ in range(turns):
            await asyncio.sleep(0)
        new = tab.side.enqueue_fetch("PUT", "/new", key="k")
        await settle()
        await world.advance(60_000)
        assert server.paths in (["/new"], ["/old", "/new"])
        first = await old.done
        if server.paths == ["/new"]:
            assert (first.status, first.code) == (Status.CANCELLED, Code.REPLACED)
        else:
            assert first.status == Status.DONE
        assert (await new.done).status == Status.DONE
        assert [s for s in await statuses(world) if s[1] != "done"] == []
    run(main)


def test_both_orders_of_a_replacement_and_a_claim_happen_in_the_race() -> None:
    """The race above is a race: some turns let the claim win, others the replacement."""
    seen: set[tuple[str, ...]] = set()
    for turns in range(0, 40):
        async def main() -> None:
            world, server = World(yields=2), Server()
            tab = world.open_tab(transport=server)
            tab.side.enqueue_fetch("PUT", "/old", key="k")
            for _ in range(turns):
                await asyncio.sleep(0)
            tab.side.enqueue_fetch("PUT", "/new", key="k")
            await settle()
            seen.add(tuple(server.paths))
        run(main)
    assert seen == {("/new",), ("/old", "/new")}


def test_a_volatile_job_waiting_behind_its_lane_is_replaced_and_never_runs() -> None:
    async def main() -> None:
        world, tab = World(), None
        tab = world.open_tab()
        release = asyncio.Event()
        calls: list[str] = []

        def work(name: str, hold: bool = False) -> Any:
            async def executor(signal: Any) -> str:
                calls.append(name)
                if hold:
                    await release.wait()
                return name
            return executor

        blocker = tab.side.enqueue(work("blocker", hold=True), type="save")
        await settle()
        old = tab.side.enqueue(work("old"), type="save", key="doc")
        new = tab.side.enqueue(work("new"), type="save", key="doc")
        await settle()
        outcome = await old.done
        assert (outcome.status, outcome.code) == (Status.CANCELLED, Code.REPLACED)
        release.set()
        await settle()
        assert ((await blocker.done).result, (await new.done).result) == ("blocker", "new")
        assert calls == ["blocker", "new"]
        assert old.id not in tab.side.volatile.runner.closures
    run(main)


@pytest.mark.parametrize("key", ["", 5, b"k", ["k"]])
def test_a_key_that_is_not_a_non_empty_str_is_refused_naming_the_call(key: Any) -> None:
    async def main() -> None:
        _world, _server, tab = serving()
        for call, enqueue in [
                ("enqueue_fetch(key)", lambda: tab.side.enqueue_fetch("PUT", "/x", key=key)),
                ("enqueue_persistent(key)", lambda: tab.side.enqueue_persistent("x", key=key)),
                ("enqueue(key)", lambda: tab.side.enqueue(lambda s: asyncio.sleep(0), key=key))]:
            with pytest.raises(InvalidJobError, match=re.escape(call) + ".*non-empty str"):
                enqueue()
    run(main)


def test_delete_group_then_enqueue_still_debounces_as_the_spec_says() -> None:
    async def main() -> None:
        world, server, tab = serving()
        first = tab.side.enqueue_fetch("PUT", "/1", group="doc", delay_ms=1_000)
        await settle()
        asyncio.ensure_future(tab.side.delete_group("doc"))  # not awaited: sent at the call
        second = tab.side.enqueue_fetch("PUT", "/2", group="doc", delay_ms=1_000)
        await settle()
        assert ((await first.done).code) == Code.DELETED
        await world.advance(1_000)
        assert server.paths == ["/2"] and (await second.done).status == Status.DONE
    run(main)


def test_the_key_is_stored_shown_in_news_and_in_query_all() -> None:
    async def main() -> None:
        _world, tab = one_tab()  # never sent: no transport
        job = tab.side.enqueue_fetch("PUT", "/x", key="doc-1", delay_ms=1_000)
        await settle()
        assert tab.published[job.id]["key"] == "doc-1"
        [row] = await tab.side.query_all()
        assert row["key"] == "doc-1"
    run(main)


class HeldReads:
    """A page's store reads (:attr:`Handles.read`, and the recheck's :attr:`Handles.read_ended`
    of one job) that answer only when told: a read begun before another tab's transaction
    committed answers what was there before it."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, asyncio.Future[Any], bool]] = []

    def __call__(self, job_id: str) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.reads.append((job_id, future, False))
        return future

    def ended(self, job_ids: list[str]) -> asyncio.Future[Any]:
        [job_id] = job_ids
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.reads.append((job_id, future, True))
        return future

    def answer(self, n: int, record: dict[str, Any] | None) -> None:
        job_id, future, batch = self.reads[n]
        if not batch:
            future.set_result(record)
        elif record is None or record["status"] in TERMINAL:
            future.set_result({job_id: record})
        else:
            future.set_result({})  # the recheck's batch leaves an unfinished record out


async def awaited_j1() -> tuple[FakeClock, HeldReads, Handles, Any, asyncio.Future[Any]]:
    """A page's handles on a fake clock, their reads :class:`HeldReads`: the clock, the reads,
    the handles, the handle of job ``j1`` (stored) and a wait of at most 1 s for its end."""
    clock, reads = FakeClock(), HeldReads()
    handles = Handles(Listeners(), clock, reads, read_ended=reads.ended)
    job = handles.add("j1")
    job._stored.set_result(None)
    waiter = asyncio.ensure_future(asyncio.wait_for(job.done, 1))
    await asyncio.sleep(0)
    return clock, reads, handles, job, waiter


@pytest.mark.parametrize("news, last, expected", [
    # Found by the simulation: the replaced news came during a recheck's read begun before
    # the replacing transaction committed; the stale "pending" dropped the news's reason and the
    # next recheck, finding the record gone, said deleted.
    ({"status": "pending", "deleted": True, "code": "replaced", "error": REPLACED_ERROR},
     None, (Status.CANCELLED, Code.REPLACED)),
    # The same race with another tab's news of an end: it resolves at once, not a recheck later.
    ({"status": "done", "code": None}, {"status": "done", "result": 1},
     (Status.DONE, None)),
])
def test_news_heard_while_a_stale_read_is_under_way_is_checked_by_a_read_after_it(
        news: dict[str, Any], last: dict[str, Any] | None, expected: tuple[Any, Any]) -> None:
    async def main() -> None:
        clock, reads, handles, job, waiter = await awaited_j1()
        clock.advance(RECHECK_MS)  # the recheck's read begins: the record is still pending
        assert [job_id for job_id, _, _ in reads.reads] == ["j1"]
        handles.update({"id": "j1", **news}, trusted=False)  # another tab's news, mid-read
        assert len(reads.reads) == 1  # one read of a record at a time
        reads.answer(0, {"id": "j1", "status": "pending"})  # stale: begun before the commit
        await asyncio.sleep(0)
        assert not job.done.done()
        assert len(reads.reads) == 2  # read again at once, not a recheck later
        reads.answer(1, None if last is None else {"id": "j1", **last})
        outcome = await waiter
        assert (outcome.status, outcome.code) == expected
        assert handles._gone_why == {} and handles._news_since_read == set()
    run(main)


def test_a_recheck_during_a_read_begun_after_the_news_reads_once_and_news_proven_wrong_is_dropped(
) -> None:
    """A read begun after the news that finds the record still there means the news was wrong:
    its reason is dropped (a record deleted much later says deleted), and a recheck that comes
    while a read is under way starts no second read."""
    async def main() -> None:
        clock, reads, handles, job, waiter = await awaited_j1()
        handles.update({"id": "j1", "status": "pending", "deleted": True, "code": "replaced"},
                       trusted=False)
        assert len(reads.reads) == 1
        clock.advance(RECHECK_MS)  # a recheck while the news's read is under way
        assert len(reads.reads) == 1
        reads.answer(0, {"id": "j1", "status": "pending"})
        await asyncio.sleep(0)
        assert len(reads.reads) == 1 and not job.done.done()
        assert handles._gone_why == {}
        clock.advance(RECHECK_MS)
        reads.answer(1, None)
        outcome = await waiter
        assert (outcome.status, outcome.code) == (Status.CANCELLED, Code.DELETED)
    run(main)
