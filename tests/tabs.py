"""Simulated tabs for CPython: several ExecutorSide + Scheduler pairs on shared fakes.

A :class:`World` is one browser origin: one MemoryStore, one LockHub, one
ChannelHub and one FakeClock. Each :class:`Tab` is a page (ExecutorSide) and
its scheduler worker, wired by ``link_pair()``, with its own ``hub.client()``
of the lock manager. A ``waiting`` tab is the browser's arrangement
(pyjobq/browser/runtime.py): the page holds the lease, in line for it from the
start; its own page scheduler (a NeverLease) answers its store requests; and its
worker has no scheduler at all until the page's first grant boots it. Nothing here reads the wall clock or sleeps for real;
``settle()`` runs the event loop until no callback is ready.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable

from pyjobq import executor as _executor
from pyjobq.core.ports import LockStolen  # noqa: F401  (re-exported for tests)
from pyjobq.executor import ExecutorSide
from pyjobq.core.messages import make
from pyjobq.lease import LeaseHolder, LinkLease, NeverLease, fake_grab
from pyjobq.memory import ChannelHub, FakeClock, LockHub, MemoryStore, link_pair
from pyjobq.scheduler import Scheduler

LOCK = "ui-job-processor"
CHANNEL = "ui-jobs"


async def settle(limit: int = 500) -> None:
    """Run the loop until nothing is ready (the fakes use no loop timers, so that is quiescence)."""
    loop = asyncio.get_running_loop()
    for _ in range(limit):
        await asyncio.sleep(0)
        if not loop._ready:  # type: ignore[attr-defined]  # CPython detail; the test-only shortcut
            return


def run_checked(main: Callable[[], Any], guard_s: float = 10) -> None:
    """``asyncio.run(main())``, failing the test on any exception the loop saw but nobody retrieved.

    ``guard_s`` is a wall-clock guard only: a hang fails instead of stalling the suite."""
    seen: list[str] = []

    async def wrapper() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: seen.append(ctx["message"]))
        await asyncio.wait_for(main(), guard_s)
        await settle()

    asyncio.run(wrapper())
    assert seen == []


class DeterministicIds:
    """Replace uuid4 ids with a counter while active, so a seed replays exactly."""

    def __init__(self, *, descending: bool = False) -> None:
        self._saved: Any = None
        self._step = -1 if descending else 1

    def __enter__(self) -> "DeterministicIds":
        counter = itertools.count(50_000, self._step)
        self._saved = _executor.new_id
        _executor.new_id = lambda: f"id{next(counter):05d}"
        return self

    def __exit__(self, *exc: object) -> None:
        _executor.new_id = self._saved


class GuardedStore:
    """One tab's view of the shared store: a write after the tab died is recorded as a violation."""

    WRITES = ("add", "update", "update_many", "put_many", "delete_many")

    def __init__(self, store: MemoryStore, tab: "Tab") -> None:
        self._store, self._tab = store, tab

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name not in self.WRITES:
            return attr

        async def guarded(*args: Any, **kw: Any) -> Any:
            hook = self._tab.world.store_hook
            if hook is not None:  # a fault just before this tab's own store operation
                await hook(self._tab, name, "before", args)
            if not self._tab.alive:
                self._tab.world.violations.append(f"dead tab {self._tab.name} wrote to the store ({name})")
            result = await attr(*args, **kw)
            if hook is not None:  # ... or just after it, before the tab acts on what it did
                await hook(self._tab, name, "after", args)
            return result

        return guarded


class _DeferrableTimer:
    inner: Any = None
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self.inner.cancel()


class FreezableClock:
    """One tab's view of the world clock: a frozen context's timers fire only once it thaws."""

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self.deferred: list[Callable[[], None]] | None = None

    def now(self) -> float:
        return self._clock.now()

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> Any:
        timer = _DeferrableTimer()

        def fire() -> None:
            if self.deferred is not None:
                self.deferred.append(lambda: timer.cancelled or callback())
            else:
                callback()

        timer.inner = self._clock.call_later(delay_ms, fire)
        return timer

    def freeze(self) -> None:
        if self.deferred is None:
            self.deferred = []

    def thaw(self) -> None:
        deferred, self.deferred = self.deferred or [], None
        for callback in deferred:
            callback()


class FreezableChannel:
    """One context's BroadcastChannel: what arrives while it is frozen is delivered on thaw."""

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        self.held: list[Any] | None = None

    def post(self, message: Any) -> None:
        self._channel.post(message)

    def ignore_source(self, source: str) -> None:
        self._channel.ignore_source(source)

    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        def receive(message: Any) -> None:
            if self.held is not None:
                self.held.append((callback, message))
            else:
                callback(message)

        return self._channel.subscribe(receive)

    def close(self) -> None:
        self._channel.close()

    def crash(self) -> None:
        self._channel.crash()

    def freeze(self) -> None:
        if self.held is None:
            self.held = []

    def thaw(self) -> None:
        held, self.held = self.held or [], None
        for callback, message in held:
            callback(message)


class Tab:
    def __init__(self, world: "World", name: str, *, transport: Any, reconstructors: dict | None,
                 handshake_timeout_ms: float, yields: dict | None, page_lease: bool = False,
                 waiting: bool = False) -> None:
        self.world, self.name, self.alive, self.frozen = world, name, True, False
        self._thaw_waiters: list[asyncio.Future[None]] = []
        self.page_link, self.worker_link = link_pair()
        self.locks = world.locks.client()
        self.page_locks = world.locks.client()  # the page's own navigator.locks
        self.clock = FreezableClock(world.clock)
        self.page_channel = FreezableChannel(world.channels.channel(CHANNEL))
        self.worker_channel = FreezableChannel(world.channels.channel(CHANNEL))
        self._worker_args = dict(yields=yields, handshake_timeout_ms=handshake_timeout_ms)
        self.scheduler: Scheduler | None = None
        self.requests: Scheduler | None = None
        self._requests_link: Any = None
        self.request_channel: FreezableChannel | None = None
        requests_end = None
        if waiting:
            requests_end, self._requests_link = link_pair()
            self.request_channel = FreezableChannel(world.channels.channel(CHANNEL))
        self.side = ExecutorSide(link=self.page_link, channel=self.page_channel, source=name,
                                 reconstructors=reconstructors, transport=transport,
                                 requests=requests_end, requests_source=f"{name}:page" if waiting else None,
                                 is_online=lambda: world.online, clock=self.clock)
        if waiting:
            self.requests = Scheduler(
                store=GuardedStore(world.store, self), locks=self.page_locks, channel=self.request_channel,
                link=self._requests_link, clock=self.clock, lock_name=LOCK, source=f"{name}:page",
                random=world.random, is_online=lambda: world.online, lease=NeverLease(), **self._worker_args,
            )
            self.requests.start()
            # Its worker's script runs (no Pyodide yet): the page sends what it holds.
            self.worker_link.send(make("worker_alive"))
            self.side.lease_holder = LeaseHolder(self.page_link, fake_grab(self.page_locks), LOCK,
                                                 eager=True, on_first_grant=self._boot)
        elif page_lease:
            # The browser's arrangement for a page with a document: the page holds the lease.
            self.side.lease_holder = LeaseHolder(self.page_link, fake_grab(self.page_locks), LOCK)
            self._boot()
        else:
            self._boot()

    def _boot(self) -> None:
        """The worker's scheduler starts: at once, or (waiting) on the page's first grant."""
        lease = LinkLease(self.worker_link) if self.side.lease_holder is not None else None
        self.scheduler = Scheduler(
            store=GuardedStore(self.world.store, self), locks=self.locks, channel=self.worker_channel,
            link=self.worker_link, clock=self.clock, lock_name=LOCK, source=self.name,
            random=self.world.random, is_online=lambda: self.world.online, lease=lease, **self._worker_args,
        )
        self.scheduler.start()

    async def thawed(self) -> None:
        """Wait while this tab is frozen (code that was mid-way when it froze resumes after)."""
        while self.frozen and self.alive:
            waiter = asyncio.get_running_loop().create_future()
            self._thaw_waiters.append(waiter)
            await waiter

    def wake(self) -> None:
        """The ``online`` event or a ``wake()`` call: reaches the worker once it has a scheduler."""
        if self.scheduler is not None:
            self.scheduler.wake()

    @property
    def booted(self) -> bool:
        return self.scheduler is not None

    def freeze(self) -> None:
        """``freeze`` (or ``pagehide`` into the back/forward cache): the page's handler runs, then
        the page and its worker stop — no message, timer or channel message reaches them."""
        self.frozen = True
        if self.side.lease_holder is not None:
            self.side.lease_holder.freeze()
        for part in (self.page_link, self.worker_link, self.clock, self.page_channel, self.worker_channel,
                     self.request_channel, self._requests_link):
            if part is not None:
                part.freeze()

    def resume(self) -> None:
        """``resume`` / ``pageshow``: the page's handler runs first, then what waited is delivered."""
        self.frozen = False
        if self.side.lease_holder is not None:
            self.side.lease_holder.resume()
        for part in (self.worker_link, self.page_link, self._requests_link, self.clock, self.worker_channel,
                     self.page_channel, self.request_channel):
            if part is not None:
                part.thaw()
        waiters, self._thaw_waiters = self._thaw_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def crash(self) -> None:
        """The tab is gone: its worker stops, its tasks die, its locks are released, its ports close."""
        self.alive = False
        side = self.side
        schedulers = [s for s in (self.scheduler, self.requests) if s is not None]
        for sched in schedulers:
            sched.stop()
        for job_id in sorted(side._running):
            side._abandon(job_id, at_once=True)
        tasks = []
        for sched in schedulers:
            tasks += list(sched._tasks)
            if sched._pass_task is not None:
                tasks.append(sched._pass_task)
        for task in sorted(tasks, key=_creation_order):
            task.cancel()
        self.locks.crash()
        self.page_locks.crash()
        self.page_link.close()
        self.worker_link.close()
        if self._requests_link is not None:
            self._requests_link.close()
            side._requests_link.close()
        for channel in (side._channel, *(sched._channel for sched in schedulers)):
            channel.crash()  # what any of them posted and is not yet delivered dies with the tab
        side.stop()
        for sched in schedulers:
            sched._channel.close()
        self.frozen = False
        for waiter in getattr(self, "_thaw_waiters", []):
            waiter.cancel()


def _creation_order(task: asyncio.Future[Any]) -> int:
    name = task.get_name() if isinstance(task, asyncio.Task) else ""
    return int(name.rsplit("-", 1)[-1]) if name.rsplit("-", 1)[-1].isdigit() else 0


class World:
    def __init__(self, random: Callable[[], float] = lambda: 0.0) -> None:
        self.clock = FakeClock()
        self.store = MemoryStore(clock=self.clock)
        self.locks = LockHub()
        self.channels = ChannelHub()
        self.random = random
        self.online = True
        self.tabs: list[Tab] = []
        self.violations: list[str] = []
        #: ``await hook(tab, operation, "before"|"after", args)`` around every store operation of a
        #: tab's scheduler: where the simulation freezes or crashes a tab in the middle of a pass.
        self.store_hook: Callable[[Any, str, str, tuple], Any] | None = None
        self._names = itertools.count(1)

    def open_tab(self, *, transport: Any = None, reconstructors: dict | None = None,
                 handshake_timeout_ms: float = 10_000.0, yields: dict | None = None,
                 page_lease: bool = False, waiting: bool = False) -> Tab:
        tab = Tab(self, f"tab{next(self._names)}", transport=transport, reconstructors=reconstructors,
                  handshake_timeout_ms=handshake_timeout_ms, yields=yields, page_lease=page_lease,
                  waiting=waiting)
        self.tabs.append(tab)
        return tab

    @property
    def live(self) -> list[Tab]:
        return [t for t in self.tabs if t.alive]

    @property
    def awake(self) -> list[Tab]:
        """Live tabs that are not frozen: only these run code."""
        return [t for t in self.tabs if t.alive and not t.frozen]

    async def advance(self, ms: float) -> None:
        """Move the clock, firing timers, and let everything they start run."""
        self.clock.advance(ms)
        await settle()
