"""The Service Worker's drain (pyjobq/service_worker/drain.py) on the memory adapters: the same
drain the browser runs (tests/e2e/service_worker.spec.js), a tab without a page."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pyjobq.core.errors import DatabaseUpgradedError
from pyjobq.core.messages import make
from pyjobq.core.mode import OUTBOX
from pyjobq.core.ports import Change
from pyjobq.core.records import JobRecord, service_worker_source
from pyjobq.core.status import Status
from pyjobq.engine.lease import ServiceWorkerLease, lease_channel_name
from pyjobq.engine.scheduler import Scheduler
from pyjobq.memory import ChannelHub, LockHub, LoopClock, MemoryStore, link_pair
from pyjobq.service_worker import drain as sw_drain
from pyjobq.service_worker.drain import DrainPorts, DrainQueue, DrainReport
from pyjobq.testing import Response, record

LOCK = "q-lock"


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sw_drain, "LOOK_MS", 5.0)
    monkeypatch.setattr(sw_drain, "WAIT_LOOK_MS", 5.0)


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs may go on 50 ms after the drain stopped claiming before they are abandoned."""
    monkeypatch.setattr(sw_drain, "GRACE_MS", 50.0)


class Origin:
    """One origin's store, locks and channel, and the requests its transport sent."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.locks = LockHub()
        self.channels = ChannelHub()
        self.sent: list[str] = []
        self.hold: asyncio.Event | None = None  # set: requests wait for it

    @classmethod
    async def storing(cls, *jobs: JobRecord) -> Origin:
        """A new origin whose store holds ``jobs``."""
        origin = cls()
        await origin.store.add(list(jobs))
        return origin

    async def send(self, method: str, path: str, body: Any) -> Response:
        self.sent.append(path)
        if self.hold is not None:
            await self.hold.wait()
        return Response(200, {"path": path})

    def ports(self) -> DrainPorts:
        return DrainPorts(store=self.store, locks=self.locks.client(),
                          channel=lambda: self.channels.channel("q"), clock=LoopClock(),
                          is_online=lambda: True,
                          lease_channel=lambda: self.channels.channel(lease_channel_name(LOCK)))

    def queue(self, **reconstructors: Any) -> DrainQueue:
        return DrainQueue(lock_name=LOCK, source=service_worker_source(), transport=self.send,
                          reconstructors=reconstructors, yields={}, handshake_timeout_ms=10_000)

    async def drained(self, jobs: list[JobRecord], budget_ms: float = 60_000,
                      queue: DrainQueue | None = None) -> DrainReport:
        """Stores ``jobs``, then drains ``queue`` (``queue()``) to its end, within 5 s."""
        await self.store.add(jobs)
        return await asyncio.wait_for(
            sw_drain.drain(self.ports(), queue if queue is not None else self.queue(), budget_ms),
            5)

    async def draining(self, jobs: list[JobRecord]) -> asyncio.Future[DrainReport]:
        """Holds the requests, stores ``jobs`` and starts a drain; returns it once its first
        request, to ``/a``, is sent (and held)."""
        self.hold = asyncio.Event()
        await self.store.add(jobs)
        drain = asyncio.ensure_future(sw_drain.drain(self.ports(), self.queue(), 60_000))
        while self.sent != ["/a"]:
            await asyncio.sleep(0.001)
        return drain

    async def page_holds_the_lease(self) -> tuple[asyncio.Event, asyncio.Future[Any]]:
        """A page takes the lease and keeps it until the event returned is set; returns that
        event and the page's lock request."""
        holds, lets_go = asyncio.Event(), asyncio.Event()

        async def page(_lock: Any) -> None:
            holds.set()
            await lets_go.wait()

        request = asyncio.ensure_future(self.locks.client().request(LOCK, page))
        await holds.wait()
        return lets_go, request

    def ping(self, source: str) -> list[str]:
        """Posts a lease ping from ``source`` on the lease channel; returns the list of the
        types of the messages that channel hears from then on."""
        tab = self.channels.channel(lease_channel_name(LOCK))
        heard: list[str] = []
        tab.subscribe(lambda msg: heard.append(str(msg["type"])))
        tab.post(make("lease_ping", source=source))
        return heard


async def statuses(store: MemoryStore) -> dict[str, tuple[str, int, int]]:
    return {r.id: (r.status.value, r.attempts, r.given_back) for r in await store.all()}


def test_it_runs_every_due_job_once_and_stops_when_nothing_is_due() -> None:
    async def main() -> None:
        origin = Origin()
        report = await origin.drained([record("a", type="x"), record("b", type="x"),
                                       record("c", type="y"), record("later", next_retry_at=9e15)])
        # "later" is pending, not due: counted as left, so the browser fires the sync again.
        assert (report.stopped, report.ended, report.left) == ("done", 3, 1)
        assert await origin.locks.client().held() == {}  # the lease went back
        assert sorted(origin.sent) == ["/a", "/b", "/c"]
        assert (await statuses(origin.store))["later"] == ("pending", 0, 0)
        assert {k: v for k, v in (await statuses(origin.store)).items() if k != "later"} == {
            "a": ("done", 1, 0), "b": ("done", 1, 0), "c": ("done", 1, 0)}
    asyncio.run(main())


def test_it_runs_nothing_while_a_page_holds_the_lease_and_leaves_the_work_said() -> None:
    # The page holds the lease for the whole budget: nothing is sent from here, and the job
    # still unfinished is counted, so the event fails and the browser fires it again.
    async def main() -> None:
        origin = Origin()
        page_done, page_task = await origin.page_holds_the_lease()
        report = await origin.drained([record("a")], 50)
        assert report.to_json() == ('{"stopped": "lease_held", "ended": 0, "left": 1, '
                                    '"for_pages": 0}')
        assert origin.sent == [] and (await statuses(origin.store))["a"] == ("pending", 0, 0)
        page_done.set()
        await page_task
    asyncio.run(main())


def test_a_page_that_asks_for_the_lease_gets_it_after_the_run_and_no_job_runs_twice(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The run outlives the grace: still not abandoned (only the event's end does that), so its
    # request is never sent twice.
    monkeypatch.setattr(sw_drain, "GRACE_MS", 20.0)

    async def main() -> None:
        origin = Origin()
        drain = await origin.draining([record("a", type="x"), record("b", type="x")])
        page_has_it = asyncio.Event()

        async def page(_lock: Any) -> None:  # a page opens: it waits in line for the lease
            page_has_it.set()
            assert not drain.done() or drain.result().stopped == "page"

        page_task = asyncio.ensure_future(origin.locks.client().request(LOCK, page))
        for _ in range(20):  # the Service Worker notices, and keeps the lock while "a" runs
            await asyncio.sleep(0.005)
        assert not page_has_it.is_set()
        origin.hold.set()
        report = await drain
        await page_task
        assert (report.stopped, report.ended, report.left) == ("page", 1, 1)
        assert origin.sent == ["/a"]  # "b" is the page's to run
        assert (await statuses(origin.store)) == {"a": ("done", 1, 0), "b": ("pending", 0, 0)}
    asyncio.run(main())


def test_a_page_closed_mid_run_a_moment_after_saving_is_taken_over_within_the_budget() -> None:
    # The save's sync fired while the page held the lease and ran the job; the user closed the
    # tab mid-run. The Service Worker keeps looking while a job is unfinished, takes the lease
    # once the page is gone, recovers the run (the page's attempt is spent) and sends it.
    async def main() -> None:
        origin = await Origin.storing(
            record("a", status=Status.RUNNING, attempts=1, owner="page-1"))
        page_closes, page_task = await origin.page_holds_the_lease()
        drain = asyncio.ensure_future(sw_drain.drain(origin.ports(), origin.queue(), 60_000))
        await asyncio.sleep(0.05)
        assert not drain.done() and origin.sent == []
        page_closes.set()  # the tab is closed: its lock goes
        await page_task
        report = await drain
        assert (report.stopped, report.ended, report.left) == ("done", 1, 0)
        assert origin.sent == ["/a"]
        assert (await statuses(origin.store))["a"] == ("done", 2, 0)
    asyncio.run(main())


def test_a_page_that_finishes_the_work_itself_ends_the_wait() -> None:
    async def main() -> None:
        origin = await Origin.storing(record("a"))
        page_closes, page_task = await origin.page_holds_the_lease()
        drain = asyncio.ensure_future(sw_drain.drain(origin.ports(), origin.queue(), 60_000))
        await asyncio.sleep(0.03)
        assert not drain.done()
        # The page ran it.
        await origin.store.update(Change("a", lambda r: r.evolve(status=Status.DONE)))
        report = await drain
        assert (report.stopped, report.ended, report.left) == ("lease_held", 0, 0)
        assert origin.sent == []
        page_closes.set()
        await page_task
    asyncio.run(main())


def test_a_page_that_pings_from_the_line_is_heard_at_once_and_answered() -> None:
    # The page only pings (no lock request the drain's look could see): the ping alone stops
    # the claims, before the run's settle could chain the lane's next job, and gets its pong.
    async def main() -> None:
        origin = Origin()
        drain = await origin.draining([record("a", type="x"), record("b", type="x")])
        heard = origin.ping("page-1")
        while "lease_pong" not in heard:
            await asyncio.sleep(0.001)
        origin.hold.set()  # "a" settles at once: its lane's next job is not chained
        report = await drain
        assert (report.stopped, report.ended, report.left) == ("page", 1, 1)
        assert origin.sent == ["/a"]
        assert (await statuses(origin.store)) == {"a": ("done", 1, 0), "b": ("pending", 0, 0)}
    asyncio.run(main())


def test_a_kind_only_pages_have_is_given_back_untouched_and_its_lane_waits_for_a_page() -> None:
    async def main() -> None:
        origin = Origin()
        report = await origin.drained(
            [record("custom", type="x", reconstructor="resize", params={})])
        # No sync can run it, so it fails no event (``left``); the next page that opens does.
        assert (report.stopped, report.ended, report.left, report.for_pages) == (
            "refused", 0, 0, 1)
        assert (await statuses(origin.store))["custom"] == ("pending", 0, 1)  # no attempt spent
        assert origin.sent == []
    asyncio.run(main())


def test_the_other_lanes_drain_past_a_kind_only_pages_have() -> None:
    # With no tab open, a job only a page can run must not hold back every other lane: its own
    # lane waits for a page (in order: x's next job too), the others are sent, and the drain
    # ends once nothing it can run is due — not at its budget.
    async def main() -> None:
        origin = Origin()
        report = await origin.drained([
            record("custom", type="x", reconstructor="resize", params={}), record("x2", type="x"),
            record("y1", type="y"), record("z1", type="z"), record("y2", type="y")])
        assert sorted(origin.sent) == ["/y1", "/y2", "/z1"]
        assert (report.stopped, report.ended, report.left, report.for_pages) == (
            "refused", 3, 0, 2)
        assert await statuses(origin.store) == {
            "custom": ("pending", 0, 1), "x2": ("pending", 0, 0),
            "y1": ("done", 1, 0), "y2": ("done", 1, 0), "z1": ("done", 1, 0)}
        assert await origin.locks.client().held() == {}  # the lease went back
    asyncio.run(main())


def test_a_job_it_can_run_left_pending_still_fails_the_event_beside_a_lane_for_pages() -> None:
    async def main() -> None:
        origin = Origin()
        report = await origin.drained([
            record("custom", type="x", reconstructor="resize", params={}),
            record("later", type="y", next_retry_at=9e15)])
        assert (report.stopped, report.left, report.for_pages) == ("refused", 1, 1)
    asyncio.run(main())


def test_only_a_mode_with_a_lane_per_type_leaves_a_type_to_the_pages() -> None:
    # Under one lane for every type (the outbox's), leaving one type would stop them all.
    async def main() -> None:
        hub, locks = ChannelHub(), LockHub()
        scheduler = Scheduler(store=MemoryStore(), locks=locks.client(), channel=hub.channel("q"),
                              link=link_pair()[0], clock=LoopClock(), lock_name=LOCK,
                              source="s", mode=OUTBOX)
        with pytest.raises(ValueError, match="one lane for every type"):
            scheduler.left_for_pages.add("x")
    asyncio.run(main())


def test_a_reconstructor_it_was_given_runs_there() -> None:
    async def main() -> None:
        origin = Origin()
        ran: list[Any] = []

        def resize(params: Any) -> Any:
            async def run(signal: Any) -> str:
                ran.append(params)
                return "resized"
            return run

        report = await origin.drained(
            [record("custom", reconstructor="resize", params={"w": 64})],
            queue=origin.queue(resize=resize))
        assert (report.stopped, report.ended, ran) == ("done", 1, [{"w": 64}])
    asyncio.run(main())


def test_at_the_budget_it_stops_claiming_and_leaves_a_run_past_the_grace_to_recovery(
        short_grace: None) -> None:
    async def main() -> None:
        origin = Origin()
        origin.hold = asyncio.Event()  # never set: the request outlives the drain
        queue = origin.queue()
        report = await origin.drained([record("a-slow", type="x"), record("b-next", type="x")],
                                      30, queue)
        # Left for the next sync: the pending one and the abandoned run (its answer never came),
        # so the event fails and the browser fires it again (service_worker.mjs).
        assert report.stopped == "budget" and report.left == 2
        assert origin.sent == ["/a-slow"]  # the next was never claimed
        slow = await origin.store.get("a-slow")
        # Still running under the Service Worker's name: when the browser ends it, the next
        # holder recovers the run with its attempt given back (tests/core/test_policy.py).
        assert slow is not None and (slow.status, slow.owner) == (Status.RUNNING, queue.source)
        assert (await statuses(origin.store))["b-next"] == ("pending", 0, 0)
    asyncio.run(main())


def test_a_lone_abandoned_run_is_left_for_the_next_sync(short_grace: None) -> None:
    # Nothing pending, one run whose request never answered: the report must still say a job is
    # left, or the sync event succeeds and no sync comes back for it.
    async def main() -> None:
        origin = Origin()
        origin.hold = asyncio.Event()
        report = await origin.drained([record("only")], 30)
        assert (report.stopped, report.ended, report.left) == ("budget", 0, 1)
        assert (await statuses(origin.store))["only"] == ("running", 1, 0)
    asyncio.run(main())


def test_after_a_page_took_the_lease_the_drain_no_longer_answers_its_pings() -> None:
    # A page stole the lease (it found the Service Worker silent) while a run went on: the
    # pings are now the new holder's to answer, or a tab in line would never find that holder
    # silent if it froze.
    async def main() -> None:
        origin = Origin()
        drain = await origin.draining([record("a")])
        took = asyncio.Event()

        async def frozen_page(_lock: Any) -> None:
            took.set()
            await asyncio.Event().wait()

        thief = asyncio.ensure_future(origin.locks.client().request(LOCK, frozen_page, steal=True))
        await took.wait()
        heard = origin.ping("tab-3")
        for _ in range(20):
            await asyncio.sleep(0.001)
        assert heard == []  # no pong (a channel does not hear its own posts)
        origin.hold.set()
        report = await drain
        assert (report.stopped, report.ended) == ("page", 1)
        thief.cancel()
    asyncio.run(main())


def test_a_failed_attempt_leaves_its_retry_to_the_next_sync_one_try_a_sync() -> None:
    """With no tab open, an outage must not spend a job's ladder within one event: the drain
    that saw a 503 ends (the job pending, the event failed: the browser fires it again after
    its own back-off) instead of waiting out 1 s, 2 s, 4 s and 8 s; the next sync tries once
    more. A job delayed a moment is still waited for: it never failed."""
    async def main() -> None:
        origin = Origin()
        answers = [503, 503, 200]

        async def flaky(method: str, path: str, body: Any) -> Response:
            origin.sent.append(path)
            return Response(answers.pop(0) if path == "/a" else 200, {})

        now = LoopClock().now()
        await origin.store.add([record("a", max_attempts=3),
                                record("soon", type="y", next_retry_at=now + 200)])
        queue = origin.queue()
        queue = DrainQueue(lock_name=queue.lock_name, source=queue.source, transport=flaky,
                           reconstructors={}, yields={}, handshake_timeout_ms=10_000)
        report = await sw_drain.drain(origin.ports(), queue, 60_000)
        assert (report.stopped, report.ended, report.left) == ("done", 1, 1)
        assert sorted(origin.sent) == ["/a", "/soon"]  # the delayed job was waited for
        assert (await statuses(origin.store))["a"] == ("pending", 1, 0)

        async def due_now() -> None:  # the browser's back-off passed: the retry is due
            stored = await origin.store.get("a")
            assert stored is not None
            origin.store.put_raw(stored.evolve(next_retry_at=LoopClock().now()).to_dict())

        await due_now()
        report = await sw_drain.drain(origin.ports(), queue, 60_000)  # the next sync
        assert (report.stopped, report.left) == ("done", 1)
        assert (await statuses(origin.store))["a"] == ("pending", 2, 0)
        await due_now()
        report = await sw_drain.drain(origin.ports(), queue, 60_000)
        assert (report.stopped, report.ended, report.left) == ("done", 1, 0)
        assert origin.sent.count("/a") == 3
        assert (await statuses(origin.store))["a"] == ("done", 3, 0)
    asyncio.run(main())


def test_an_outside_revocation_stops_it_like_a_database_upgrade() -> None:
    async def main() -> None:
        origin = await Origin.storing(record("a"))
        lease = ServiceWorkerLease()
        report = DrainReport()
        lease.revoke()  # before it starts: claims nothing
        await sw_drain.drain(origin.ports(), origin.queue(), 60_000, report=report, lease=lease)
        assert origin.sent == [] and report.left == 1
    asyncio.run(main())


def test_a_page_that_takes_the_lease_over_gets_the_report_not_the_lock_error() -> None:
    # A page in line finds the Service Worker silent (it answers no lease pings) and steals the
    # lease while a run outlasts its wait (found by the soak): the drain, which stopped claiming
    # when the page asked, lets its run finish under its run lock and returns its report — before
    # the fix the lock manager's LockStolen escaped drain() while its engine ran on.
    async def main() -> None:
        origin = Origin()
        drain = await origin.draining([record("a", type="x"), record("b", type="x")])
        page_locks = origin.locks.client()
        in_line = asyncio.ensure_future(page_locks.request(LOCK, lambda _lock: asyncio.sleep(0)))
        for _ in range(10):  # the Service Worker sees the page in line and stops claiming
            await asyncio.sleep(0.005)
        taken = asyncio.Event()

        async def page(_lock: Any) -> None:
            taken.set()

        stolen = asyncio.ensure_future(page_locks.request(LOCK, page, steal=True))
        await taken.wait()
        await asyncio.sleep(0.02)
        assert not drain.done()  # its run goes on, under its run lock
        origin.hold.set()
        report = await drain
        assert (report.stopped, report.ended) == ("page", 1)
        assert origin.sent == ["/a"]  # nothing claimed after the page asked
        assert (await statuses(origin.store))["a"] == ("done", 1, 0)
        await stolen
        in_line.cancel()
    asyncio.run(main())


def test_a_lane_whose_page_only_job_a_page_has_run_is_left_to_the_next_sync_again() -> None:
    """A type left to the pages waits only while a job of a kind the drain cannot run is among
    its jobs: once a page has run that job, the lane's other jobs are work a sync can do, so
    they count as ``left`` (the event fails and is fired again), never as ``for_pages`` (the
    event succeeds and they wait for a page to open). Found by the simulation."""
    async def main() -> None:
        store = MemoryStore()
        await store.add([record("page-job", type="x", reconstructor="page_kind"),
                         record("after-it", type="x", created_at=2.0),
                         record("elsewhere", type="y")])
        left = await sw_drain._left(store, {"x"}, {"page_kind"})
        assert left == (1, 2)  # "elsewhere" is left; x's two wait for a page
        await store.delete_many(["page-job"])  # a page ran it (and its record went)
        assert await sw_drain._left(store, {"x"}, {"page_kind"}) == (2, 0)
    asyncio.run(main())


def test_a_drain_leaves_no_task_of_its_own_pending_when_it_returns(short_grace: None) -> None:
    # The scheduler's loop waited on the revoked lease for ever: one task left pending per sync,
    # until the collector destroyed it with "Task was destroyed but it is pending!".
    async def main() -> None:
        origin = Origin()
        origin.hold = asyncio.Event()  # the budget ends with a run in flight: the lease revoked
        report = await origin.drained([record("slow"), record("next", type="y")], 30)
        assert report.stopped == "budget"
        await asyncio.sleep(0)
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert pending == []
    asyncio.run(main())


def test_a_database_upgrade_while_a_page_holds_the_lease_ends_the_drain_with_its_report() -> None:
    # The drain looks again for a free lease while a page processes; a page with newer code
    # upgrades the database meanwhile. The store's error escaped drain() instead of a report.
    async def main() -> None:
        origin = await Origin.storing(record("a"))
        page_done, page_task = await origin.page_holds_the_lease()
        by_status, reads = origin.store.by_status, []

        async def upgraded(*args: Any, **kwargs: Any) -> Any:
            reads.append(args)
            if len(reads) > 2:  # the first look read the store; then the upgrade came
                raise DatabaseUpgradedError("the database was upgraded to version 3")
            return await by_status(*args, **kwargs)

        origin.store.by_status = upgraded  # type: ignore[method-assign]
        report = await sw_drain.drain(origin.ports(), origin.queue(), 60_000)
        assert (report.stopped, report.left, origin.sent) == ("upgraded", 0, [])
        page_done.set()
        await page_task
    asyncio.run(main())
