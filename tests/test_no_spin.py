"""No spin: a holder with due work it cannot start waits for what will let it start, and does
not look at the queue again and again while nothing changes.

Each test sets up one way due work cannot start — its lane's predecessor running in a frozen
tab, an abandoned run of its type still ending, its run lock taken ahead by another page — then
moves time in 100 ms steps (a browser's timers fire as often) and counts the holder's looks
(:attr:`pyjobq.engine.scheduler.Scheduler.looks`). A wake armed in the past fires at every step, and
each firing is a look: hundreds a minute. Then the thing it waited for announces itself and the
work runs, with no timer to prompt it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import Server, reconstructor, serving
from pyjobq import AbortSignal
from pyjobq.core.lanes import run_lock
from pyjobq.core.mode import JOB_QUEUE
from pyjobq.engine.scheduler import Scheduler
from pyjobq.testing import LOCK, Tab, World, run, settle

STEP_MS = 100.0
#: A holder that waits on events looks a handful of times a minute at most; one that spins
#: looks at every step (600 a minute).
MOST_LOOKS_A_MINUTE = 5


async def looks_while_time_runs(world: World, scheduler: Scheduler, ms: float) -> int:
    """How many looks ``scheduler`` takes while the clock moves ``ms`` in :data:`STEP_MS` steps."""
    before = scheduler.looks
    for _ in range(int(ms / STEP_MS)):
        await world.advance(STEP_MS)
    return scheduler.looks - before


def worker(tab: Tab) -> Scheduler:
    assert tab.scheduler is not None
    return tab.scheduler


async def held_by_another_page(
        world: World, job_id: str,
        **options: Any) -> tuple[asyncio.Future[None], asyncio.Future[Any]]:
    """Another page asks for the run lock of ``upload`` job ``job_id`` (``options`` go to the
    lock request) and keeps it until the first future returned is resolved; the second is that
    page's request. Returns once the world has settled."""
    let_go: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def hold(_lock: Any) -> None:
        await let_go

    other = asyncio.ensure_future(world.locks.client().request(
        run_lock(LOCK, "upload", job_id), hold, **options))
    await settle()
    return let_go, other


def test_a_lane_whose_predecessor_runs_in_a_frozen_tab_is_waited_for_not_polled() -> None:
    async def main() -> None:
        server_a, server_b = Server("hold"), Server()
        world = World()
        a = world.open_tab(transport=server_a, page_lease=True)
        b = world.open_tab(transport=server_b, page_lease=True)
        first = a.side.enqueue_fetch("POST", "/upload-1", type="upload")
        await settle()
        assert server_a.holding == ["/upload-1"]
        a.freeze()  # its run keeps its run lock; B takes the lease
        await settle()
        second = b.side.enqueue_fetch("POST", "/upload-2", type="upload")
        await settle()
        assert world.locks.held()[LOCK] == "exclusive" and not a.side.lease_holder.lent
        assert (await world.store.get(second.id)).status == "pending"

        assert await looks_while_time_runs(world, worker(b), 60_000.0) <= MOST_LOOKS_A_MINUTE
        assert server_b.paths == []

        # The frozen tab thaws and finishes: its run lock's release is what starts the next run.
        a.resume()
        await settle()
        server_a.release("/upload-1")
        await settle()
        assert (await first.done).status == "done" and (await second.done).status == "done"
        assert sorted(server_a.paths + server_b.paths) == ["/upload-1", "/upload-2"]
    run(main)


def test_a_lane_whose_abandoned_run_is_still_ending_is_waited_for_not_polled() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        release: dict[str, asyncio.Future[None]] = {}
        paths: list[str] = []

        async def upload(params: Any, signal: AbortSignal) -> Any:
            paths.append(params)
            signal.heeded = True  # says it stops by itself: the page waits out its grace
            await release.setdefault(params, loop.create_future())  # and it does not stop
            return None

        world = World()
        tab = world.open_tab(reconstructors={"upload": reconstructor(upload)})
        first = tab.side.enqueue_persistent("upload", "/upload-1", type="upload")
        await settle()
        assert paths == ["/upload-1"]
        await tab.side.delete_job(first.id)  # abandoned: its type stays busy until the run ends
        second = tab.side.enqueue_persistent("upload", "/upload-2", type="upload")
        await settle()
        assert worker(tab).flights.ending and paths == ["/upload-1"]

        assert await looks_while_time_runs(world, worker(tab), 20_000.0) <= MOST_LOOKS_A_MINUTE
        assert paths == ["/upload-1"]

        # The page's grace runs out and it says the run ended: the lane goes on at that word.
        await world.advance(15_000.0)
        assert not worker(tab).flights.ending
        assert paths == ["/upload-1", "/upload-2"]
        release["/upload-2"].set_result(None)
        await settle()
        assert (await second.done).status == "done"
    run(main)


def test_a_run_lock_taken_ahead_by_another_page_is_waited_for_not_polled() -> None:
    async def main() -> None:
        world, server, tab = serving("hold", "hold")
        first = tab.side.enqueue_fetch("POST", "/upload-1", type="upload")
        second = tab.side.enqueue_fetch("POST", "/upload-2", type="upload")
        # Another page holds the second job's run lock (it took it ahead, then lost the lease).
        let_go, other = await held_by_another_page(world, second.id)
        # A page holding a run lock of the type may be starting it (a holder whose silent lease
        # was taken, before it hears: pyjobq/engine/lease.py), so the whole lane waits — watched.
        assert server.holding == []
        assert await looks_while_time_runs(world, worker(tab), 60_000.0) <= MOST_LOOKS_A_MINUTE
        assert server.paths == []

        let_go.set_result(None)  # the other page lets go: the watch on the lock starts the lane
        await other
        await settle()
        assert server.holding == ["/upload-1"]
        server.release("/upload-1")
        await settle()
        assert server.holding == ["/upload-2"]
        server.release("/upload-2")
        await settle()
        assert (await first.done).status == "done" and (await second.done).status == "done"
    run(main)


def test_a_watch_granted_while_a_lane_runs_lets_go_before_it_wakes_the_pass() -> None:
    """The watch on a run lock another page held is granted the moment that page lets go; the
    pass it wakes then takes that run lock. Woken from inside the grant, it found the watch
    itself holding the lock, watched again, was granted at once: round and round, no time moving."""
    async def main() -> None:
        world, server, tab = serving("hold", "hold")
        # keeps the pass waiting
        other_lane = tab.side.enqueue_fetch("POST", "/decode", type="decode")
        upload = tab.side.enqueue_fetch("POST", "/upload", type="upload")
        let_go, other = await held_by_another_page(world, upload.id)
        assert server.holding == ["/decode"]
        assert (await world.store.get(upload.id)).status == "pending"

        before = worker(tab).looks
        let_go.set_result(None)
        await other
        await settle()
        assert worker(tab).looks - before <= 3
        assert server.holding == ["/decode", "/upload"]
        server.release("/decode")
        server.release("/upload")
        await settle()
        assert (await other_lane.done).status == "done" and (await upload.done).status == "done"
    run(main)


def test_a_run_lock_a_frozen_page_holds_shared_is_looked_at_again_within_the_bound() -> None:
    """Another page's watch on the run lock, granted just as that page froze, holds it shared
    for the whole freeze. A shared watch of ours would be granted at once beside it, wake a
    pass that still cannot take the lock, and go round with no time moving. Nothing announces
    the thaw to us, so the holder looks again within the bounded re-look (Mode.recheck_ms)."""
    async def main() -> None:
        world, server, tab = serving()
        job = tab.side.enqueue_fetch("POST", "/upload", type="upload")
        # the frozen page's watch, held shared until it thaws
        thawed, other = await held_by_another_page(world, job.id, mode="shared")
        assert await looks_while_time_runs(world, worker(tab), 60_000.0) <= MOST_LOOKS_A_MINUTE
        assert server.paths == [] and (await world.store.get(job.id)).status == "pending"

        # the page thaws, its watch lets go; the next re-look starts the run
        thawed.set_result(None)
        await other
        await world.advance(JOB_QUEUE.recheck_ms or 0.0)
        assert (await job.done).status == "done" and server.paths == ["/upload"]
    run(main)


