"""The page-held processor lease (pyjobq/engine/lease.py) and frozen tabs, on the memory fakes.

A frozen tab (``freeze``, or ``pagehide`` into the back/forward cache) lets the lease go in
its handler; then neither its page nor its worker runs until it resumes. Another tab must
take over, must not run the frozen tab's job a second time, and the frozen job must finish
once when its tab resumes (or be recovered once if the frozen tab is discarded).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from helpers import Server, holding, serving
from pyjobq.core.lanes import run_lock
from pyjobq.core.messages import make
from pyjobq.engine.lease import LeaseHolder
from pyjobq.handle import Job
from pyjobq.memory import LockHub, link_pair
from pyjobq.testing import LOCK, Response, Tab, World, run, settle
from pyjobq.testing._grab import grab_on


def holder_and_worker(
        hub: LockHub, **options: Any) -> tuple[LeaseHolder, Any, list[dict[str, Any]]]:
    """A page's lease holder on ``hub``, the worker's end of its link, and what the worker hears."""
    page, worker = link_pair()
    heard: list[dict[str, Any]] = []
    worker.subscribe(heard.append)
    return LeaseHolder(page, grab_on(hub.client()), LOCK, **options), worker, heard


def another_tab_processes(hub: LockHub) -> Callable[[], Awaitable[None]]:
    """Another tab takes the lock on ``hub`` now; awaiting what comes back closes that tab."""
    let_go = asyncio.get_running_loop().create_future()

    async def hold(_lock: Any) -> None:
        await let_go

    task = asyncio.ensure_future(hub.client().request(LOCK, hold))

    async def close() -> None:
        let_go.set_result(None)
        await task
    return close


def two_tabs(first: Server, second: Server) -> tuple[World, Tab, Tab]:
    """A world and two tabs holding the lease in the page, opened in this order."""
    world = World()
    return (world, world.open_tab(transport=first, page_lease=True),
            world.open_tab(transport=second, page_lease=True))


async def a_decoding() -> tuple[World, Tab, Tab, Server, Server, Job]:
    """:func:`two_tabs`, the first one's server holding its requests, and that tab's
    ``POST /decode`` (type ``upload``) on the wire."""
    server_a, server_b = Server("hold"), Server()
    world, a, b = two_tabs(server_a, server_b)
    job = a.side.enqueue_fetch("POST", "/decode", type="upload")
    await settle()
    return world, a, b, server_a, server_b, job


def test_the_holder_grants_keeps_between_drains_and_lets_go_when_frozen() -> None:
    async def main() -> None:
        hub = LockHub()
        holder, worker, heard = holder_and_worker(hub)

        worker.send(make("lease_request"))
        await settle()
        assert heard == [make("lease_granted", epoch=1)] and hub.held() == {LOCK: "exclusive"}
        worker.send(make("lease_released", epoch=1))
        await settle()
        # Kept for the tab's life: a lease back in the queue would wake a waiting tab's Pyodide.
        assert hub.held() == {LOCK: "exclusive"} and holder.holding

        worker.send(make("lease_request"))
        await settle()
        assert heard[-1] == make("lease_granted", epoch=2)
        holder.freeze()
        await settle()
        assert heard[-1] == make("lease_revoked", epoch=2)
        # released in the handler; runs refused until acked
        assert hub.held() == {} and holder.refusing
        worker.send(make("lease_released", epoch=2))
        worker.send(make("lease_request"))
        await settle()
        assert not holder.refusing and hub.held() == {}  # frozen: the request waits for resume
        holder.resume()
        await settle()
        assert heard[-1] == make("lease_granted", epoch=3) and hub.held() == {LOCK: "exclusive"}
    run(main)


def test_an_eager_holder_takes_the_lock_at_once_and_boots_its_worker_on_the_first_grant() -> None:
    async def main() -> None:
        hub = LockHub()
        close_other = another_tab_processes(hub)
        await settle()
        boots: list[int] = []
        holder, worker, heard = holder_and_worker(
            hub, eager=True, on_first_grant=lambda: boots.append(len(heard)))
        await settle()
        assert boots == [] and heard == [] and not holder.holding  # waiting in line, no boot

        await close_other()  # the processing tab closes
        await settle()
        # Booted before the grant is posted, so the worker's first drain finds it waiting.
        assert boots == [0] and heard == [make("lease_granted", epoch=1)]
        worker.send(make("lease_released", epoch=1))
        await settle()
        holder.freeze()  # between drains: nothing lent, so nothing to revoke
        await settle()
        assert hub.held() == {} and heard == [make("lease_granted", epoch=1)]
        holder.resume()  # in line again without being asked: this tab has the queue
        await settle()
        assert hub.held() == {LOCK: "exclusive"} and boots == [0]
        assert heard[-1] == make("lease_granted", epoch=2)
    run(main)


def test_a_queued_request_is_dropped_on_freeze_and_made_again_on_resume() -> None:
    async def main() -> None:
        hub = LockHub()
        close_other = another_tab_processes(hub)
        holder, worker, heard = holder_and_worker(hub)
        worker.send(make("lease_request"))
        await settle()
        holder.freeze()
        await close_other()
        await settle()
        # Granted to nobody while frozen: a frozen page holding it would stop every tab.
        assert heard == [] and hub.held() == {}
        holder.resume()
        await settle()
        assert heard == [make("lease_granted", epoch=1)] and hub.held() == {LOCK: "exclusive"}
    run(main)


def test_a_frozen_tab_hands_the_queue_over_and_finishes_its_own_run_once() -> None:
    async def main() -> None:
        world, a, b, server_a, server_b, long_job = await a_decoding()
        assert server_a.holding == ["/decode"]
        assert world.locks.held()[run_lock(LOCK, "upload", long_job.id)] == "exclusive"

        a.freeze()
        await settle()
        # B's enqueues: another type runs on B at once; a second upload waits for A's lane.
        quick = b.side.enqueue_fetch("POST", "/save", type="save")
        later_upload = b.side.enqueue_fetch("POST", "/upload-2", type="upload")
        await settle()
        assert (await quick.done).status == "done"
        assert server_b.paths == ["/save"]  # not /decode, not /upload-2
        record = await world.store.get(long_job.id)
        assert (record.status, record.owner, record.attempts) == ("running", a.name, 1)
        await world.advance(120_000)  # however long A stays frozen, B never recovers its run
        assert (await world.store.get(long_job.id)).status == "running"
        assert server_b.paths == ["/save"]

        a.resume()
        await settle()
        server_a.release("/decode")
        await settle()
        assert (await long_job.done).status == "done"
        assert (await later_upload.done).status == "done"
        record = await world.store.get(long_job.id)
        assert (record.status, record.attempts) == ("done", 1)
        calls = server_a.paths + server_b.paths
        assert sorted(calls) == ["/decode", "/save", "/upload-2"]  # each exactly once
        assert {k for k in world.locks.held() if ":run:" in k} == set()
    run(main)


def test_a_run_claimed_after_the_freeze_is_given_back_unspent() -> None:
    async def main() -> None:
        world, server, a = serving(page_lease=True)
        await settle()
        holder = a.side.lease_holder
        # The worker claims and posts `run` while the page is letting the lease go: the
        # page refuses the run, the worker gives the attempt back and asks for the lease again.
        refused: list[str] = []

        def heard(msg: dict[str, Any]) -> None:  # what the worker hears from its page
            if msg.get("type") == "run_result" and msg.get("code") == "lease_revoked":
                refused.append(msg["job_id"])

        a.worker_link.subscribe(heard)
        froze: list[str] = []

        async def hook(tab: Any, operation: str, phase: str, args: tuple) -> None:
            # The worker is storing its claim (it drains under the grant): the page lets go now.
            if operation == "update_many" and phase == "before" and not froze and holder.lent:
                froze.append(operation)
                holder.freeze()
                holder.resume()  # a pagehide/pageshow pair, the worker never frozen

        world.store_hook = hook
        job = a.side.enqueue_fetch("POST", "/late")
        await settle()
        assert (await job.done).status == "done"
        record = await world.store.get(job.id)
        assert record.attempts == 1 and server.paths == ["/late"]
        assert refused == [job.id] and record.given_back == 1
    run(main)


def test_a_frozen_tab_that_is_discarded_has_its_run_recovered_once() -> None:
    async def main() -> None:
        world, a, b, server_a, server_b, job = await a_decoding()
        a.freeze()
        await settle()
        # B woke on A's update, took the lease A let go and skipped the run A's lock guards;
        # the browser then discards the frozen page, its locks going with it: B is woken by that.
        a.crash()
        await settle()
        record = await world.store.get(job.id)
        assert (record.status, record.attempts) == ("done", 2)  # the dead run spent one
        assert server_b.paths == ["/decode"]
        assert server_a.cancelled == ["/decode"]
    run(main)


def test_a_resumed_tab_waits_in_line_while_the_tab_that_took_over_holds_the_lease() -> None:
    async def main() -> None:
        server_a, server_b = Server(), Server()
        world, a, b = two_tabs(server_a, server_b)
        await settle()
        a.freeze()
        await settle()
        job = b.side.enqueue_fetch("POST", "/x")
        await settle()
        assert (await job.done).status == "done"
        a.resume()
        await settle()
        # B took the lease while A was frozen and keeps it for its life: A's job runs on B.
        after = a.side.enqueue_fetch("POST", "/y")
        await settle()
        assert (await after.done).status == "done"
        assert server_a.paths == [] and server_b.paths == ["/x", "/y"]
        assert world.locks.held() == {LOCK: "exclusive"}
        assert b.side.lease_holder.holding and not a.side.lease_holder.holding
        # When B closes, A — in line since it resumed — takes over.
        b.crash()
        await settle()
        last = a.side.enqueue_fetch("POST", "/z")
        await settle()
        assert (await last.done).status == "done" and server_a.paths == ["/z"]
        assert a.side.lease_holder.holding
    run(main)


def test_stale_and_foreign_lease_messages_change_nothing() -> None:
    async def main() -> None:
        world = World()
        a = world.open_tab(transport=Server(), page_lease=True)
        await settle()
        a.worker_link.send(make("lease_released", epoch=99))  # never granted
        a.page_link.send(make("lease_revoked", epoch=99))  # not the grant held
        a.page_link.send({"v": 1, "type": "lease_granted", "epoch": "1"})  # malformed: ignored
        await settle()
        job = a.side.enqueue_fetch("POST", "/z")
        await settle()
        assert (await job.done).status == "done" and world.locks.held() == {LOCK: "exclusive"}
        assert a.side.lease_holder.holding
    run(main)


def test_without_a_page_lease_the_worker_holds_the_lock_as_before() -> None:
    async def main() -> None:
        world, server, a, job = await holding("/w")
        assert world.locks.held() == {LOCK: "exclusive",
                                      run_lock(LOCK, "default", job.id): "exclusive"}
        server.release("/w", Response(200, {}))
        await settle()
        assert (await job.done).status == "done" and world.locks.held() == {}
    run(main)


def test_a_scheduler_under_a_lease_it_never_gets_hears_no_channel_news() -> None:
    """The page's request scheduler (``NeverLease``) has no pass to keep current, no run to drop
    and no line to queue in: it takes no listener on the channel, so no tab's news — its own
    worker's included, a job-update a job — costs the page an event and a parse. It still
    tells the other tabs what it stores."""
    from pyjobq.engine.lease import NeverLease
    from pyjobq.executor.wiring import in_process
    from pyjobq.memory import ChannelHub, MemoryStore
    from pyjobq.testing import FakeClock, record

    async def main() -> None:
        hub = ChannelHub()
        other = hub.channel("news")
        heard: list[Any] = []
        other.subscribe(heard.append)
        for lease, listeners in ((NeverLease(), 0), (None, 1)):
            channel = hub.channel("news")
            engine = in_process(store=MemoryStore(), source="tab:page", clock=FakeClock(),
                                lock_name=LOCK, channel=channel,
                                **({"lease": lease} if lease is not None else {}))
            await settle()
            assert len(channel._listeners) == listeners
            engine.scheduler.publish_many([record(f"j{listeners}")])
            await settle()
            engine.scheduler.stop()
            channel.close()
        assert [j["id"] for m in heard for j in m["jobs"]] == ["j0", "j1"]
    run(main)
