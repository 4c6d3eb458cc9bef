"""Simulated tabs on CPython: several pages and their scheduler workers on one origin's fakes.

Theory of operation. A :class:`World` is one browser origin: one
:class:`~pyjobq.memory.MemoryStore` (its IndexedDB), one :class:`~pyjobq.memory.LockHub`
(``navigator.locks``), one :class:`~pyjobq.memory.ChannelHub` (``BroadcastChannel``) and one
:class:`~pyjobq.testing.FakeClock`. Each :class:`Tab` is a page — the executor side, which owns
the public API (``tab.queue``) — and its scheduler worker, wired by a
:func:`~pyjobq.memory.link_pair`, each with its own lock context, as in Chromium.

Nothing here reads the wall clock or sleeps: time moves when the test calls
:meth:`World.advance`, and :func:`~pyjobq.testing.settle` runs the loop until it is quiet.

A tab is its own execution context. Every event that reaches it — a message on its link, a
channel message, a timer, its own start — runs inside a :mod:`contextvars` context that names
the tab, so every task its code starts is known to be the tab's (a task factory keeps the
list). That is how :meth:`Tab.crash` kills exactly the tab's work without reaching into the
engine, and how :meth:`Tab.freeze` holds what would reach a frozen page. Known limit: a task
started by a call the *test* makes directly (``tab.queue.enqueue(...)`` from the test body)
runs in the test's context, so a crash does not cancel it until the tab's own code continues
it; the runs it leads to (``run`` messages from the worker) are the tab's.

Browser arrangements (pyjobq/browser/page_main.py): by default the worker's scheduler holds the
processor lease itself; ``page_lease=True`` has the page hold it (a page with a document);
``waiting=True`` is a page in line for the lease whose worker has no scheduler until the first
grant, while the page's own request-only scheduler answers its store requests; ``worker_host=True``
is an executor side with no document (a notebook kernel, a PyScript worker): its worker's bootstrap
takes the lock itself, before its scheduler boots, and keeps it for the worker's life
(``worker.mjs``, :class:`~pyjobq.engine.lease.HostLease`) — frozen, it keeps it, until a tab in line
finds it silent and takes it (:class:`~pyjobq.engine.lease.LeaseWatch`). In both the worker boots as
``worker.mjs`` does, followed by the browser's own :class:`~pyjobq.executor.boot.Boot`
(pyjobq/testing/_boot.py): it fetches its files (failing while the world is offline), gets in line,
boots once it holds the lease, and fails or stalls as :attr:`Tab.boot_faults` says; a failed or
stalled boot lets the lease go and is retried.

pyjobq's Service Worker is a :class:`ServiceWorker` (:meth:`World.start_service_worker`, a ``sync``
event): a context with no page that runs the browser's drain (pyjobq/service_worker/drain.py) on the
world's store, locks, channel and clock until its drain returns or the browser kills it.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import weakref
from typing import Any, Awaitable, Callable, Mapping, Sequence, Union

from ..config import DEFAULT_CHANNEL_NAME, DEFAULT_LOCK_NAME, Settings
from ..core.backoff import make_backoff
from ..core.ports import Change, Lease, Message, Timer, Unsubscribe
from ..core.records import JobRecord, service_worker_source
from ..core.status import Status
from ..engine.lease import (
    HostLease,
    LeaseHolder,
    LinkLease,
    ServiceWorkerLease,
    lease_channel_name,
)
from ..engine.scheduler import Scheduler
from ..executor.boot import Boot
from ..executor.page import Page, PagePorts, assemble_page, follow_boot
from ..executor.side import ExecutorSide
from ..executor.wiring import SchedulerOptions, in_process
from ..memory import (
    ChannelHub,
    LockHub,
    MemoryChannel,
    MemoryLink,
    MemoryLocks,
    MemoryStore,
    link_pair,
)
from ..service_worker import drain as sw_drain
from ..service_worker.drain import DrainPorts, DrainQueue, DrainReport
from ._boot import BootFault, SimulatedStart
from ._clock import FakeClock
from ._grab import grab_on
from ._run import settle

__all__ = ["World", "Tab", "ServiceWorker", "GuardedStore", "FreezableClock", "FreezableChannel",
           "StoreHook", "Context", "BootFault", "LOCK", "CHANNEL"]

#: The lock electing the processing tab: pyjobq's default ``lock_name``.
LOCK = DEFAULT_LOCK_NAME
#: The channel carrying ``job-update``: pyjobq's default ``channel_name``.
CHANNEL = DEFAULT_CHANNEL_NAME
#: The channel carrying the lease's pings (:class:`~pyjobq.engine.lease.LeaseWatch`).
LEASE_CHANNEL = lease_channel_name(LOCK)

#: A context of the world that runs code: a tab (a page and its worker), or the Service Worker.
Context = Union["Tab", "ServiceWorker"]
#: ``await hook(context, operation, "before" | "after", args)`` around every store write of a tab
#: or of the Service Worker.
StoreHook = Callable[[Context, str, str, tuple[Any, ...]], Awaitable[None]]
#: ``hook(tab, message)`` as a tab's worker posts ``message`` to its page, before it is delivered:
#: where a test freezes the tab, or blocks its page, at the moment ``run`` is posted.
LinkHook = Callable[["Tab", Message], None]

#: The tab whose code is running (unset: the test's own code).
_TAB: contextvars.ContextVar["Context | None"] = contextvars.ContextVar(
    "pyjobq_testing_tab", default=None)
_FACTORY_LOOPS: "weakref.WeakSet[asyncio.AbstractEventLoop]" = weakref.WeakSet()
_ORDER = itertools.count()


def _in_tab(tab: Context, fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn(*args)`` as the tab's own code: tasks it starts belong to the tab."""
    def enter() -> Any:
        _TAB.set(tab)
        return fn(*args)

    return contextvars.copy_context().run(enter)


def _track_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Install (once per loop) a task factory that files every task under the tab that made it."""
    if loop in _FACTORY_LOOPS:
        return
    previous = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> "asyncio.Future[Any]":
        context = kw.get("context")
        tab = context.get(_TAB) if context is not None else _TAB.get()
        # A message already on its way when the browser ended the Service Worker (its engine's
        # links are the drain's own: nothing closes them) starts nothing: not even eagerly.
        ended = isinstance(tab, ServiceWorker) and not tab.alive
        if ended:
            kw.pop("eager_start", None)
        task: asyncio.Future[Any]
        if previous is not None:
            task = previous(loop, coro, **kw)
        else:
            task = asyncio.Task(coro, loop=loop, **kw)
        if tab is not None:
            tab._tasks[task] = next(_ORDER)
        if ended:
            task.cancel()
        return task

    loop.set_task_factory(factory)
    _FACTORY_LOOPS.add(loop)


class GuardedStore:
    """One context's view of the shared store: a write after the context died is a violation.

    Reads pass through. Around each write (:attr:`WRITES`) the world's :attr:`World.store_hook` is
    awaited, before and after: where a test freezes or crashes the tab (or kills the Service
    Worker) in the middle of a pass. A write from a dead context is appended to
    :attr:`World.violations` (it still happens: the test then fails on it). Every claim — a
    change that makes a record ``running`` — is reported to :meth:`World.claimed` inside its
    transaction, the moment it is written: the two-processors oracle's input.
    """

    #: The store operations that write.
    WRITES = ("add", "update", "update_many", "delete_many", "delete_group", "update_by_status",
              "update_keyed", "put_schedule", "delete_schedule", "advance_schedule")

    def __init__(self, store: MemoryStore, tab: Context) -> None:
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
                self._tab.world.violations.append(
                    f"dead tab {self._tab.name} wrote to the store ({name})")
            if name == "update":
                result = await attr(self._watched(args[0]), *args[1:], **kw)
            elif name == "update_many":
                result = await attr([self._watched(c) for c in args[0]], *args[1:], **kw)
            else:
                result = await attr(*args, **kw)
            if name == "advance_schedule" and result is not None and result.job is not None:
                # Every periodic occurrence enqueued, by whom: the once-per-slot oracle's input.
                self._tab.world.occurrences.append(
                    (result.schedule.name, result.slot, self._tab.name))
            if hook is not None:  # ... or just after it, before the tab acts on what it did
                await hook(self._tab, name, "after", args)
            return result

        return guarded

    def _watched(self, change: Change) -> Change:
        """``change``, telling the world when it claims (a record that becomes running)."""
        def apply(current: JobRecord) -> JobRecord | None:
            new = change.apply(current)
            if new is not None and new.status is Status.RUNNING \
                    and current.status is not Status.RUNNING:
                self._tab.world.claimed(self._tab, new.id)
            return new

        return change._replace(apply=apply)


class _DeferrableTimer:
    def __init__(self) -> None:
        self.inner: Timer | None = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if self.inner is not None:
            self.inner.cancel()


class FreezableClock:
    """One tab's view of the world's clock: a frozen tab's timers fire only once it thaws.

    Its callbacks run as the tab's own code (``tab`` given) — tasks they start die with it.
    """

    def __init__(self, clock: FakeClock, tab: Context | None = None) -> None:
        self._clock = clock
        self._tab = tab
        #: Timer callbacks that came due while frozen; None when not frozen.
        self.deferred: list[Callable[[], None]] | None = None

    def now(self) -> float:
        """The world's time, in ms since the epoch (frozen tabs read it too when they thaw)."""
        return self._clock.now()

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> _DeferrableTimer:
        """Call ``callback`` once the world's clock passes ``delay_ms`` from now
        (later if frozen)."""
        timer = _DeferrableTimer()

        def call() -> None:
            if not timer.cancelled:
                if self._tab is not None:
                    if not self._tab.alive:
                        return  # a closed tab runs nothing more
                    _in_tab(self._tab, callback)
                else:
                    callback()

        def fire() -> None:
            if self.deferred is not None:
                self.deferred.append(call)
            else:
                call()

        timer.inner = self._clock.call_later(delay_ms, fire)
        return timer

    def freeze(self) -> None:
        """Hold timers that come due, until :meth:`thaw`."""
        if self.deferred is None:
            self.deferred = []

    def thaw(self) -> None:
        """Fire the held timers, in the order they came due."""
        deferred, self.deferred = self.deferred or [], None
        for callback in deferred:
            callback()


class FreezableChannel:
    """One context's ``BroadcastChannel``: what arrives while it is frozen is delivered on thaw.

    Its listeners run as the tab's own code (``tab`` given).
    """

    def __init__(self, channel: MemoryChannel, tab: Context | None = None) -> None:
        self._channel = channel
        self._tab = tab
        #: (listener, message) pairs that arrived while frozen; None when not frozen.
        self.held: list[tuple[Callable[[Message], None], Message]] | None = None

    def post(self, message: Message) -> None:
        """Post to every other channel of this name (see :class:`~pyjobq.memory.MemoryChannel`)."""
        self._channel.post(message)

    def ignore_source(self, source: str) -> None:
        """Drop ``job-update``s that ``source`` sent."""
        self._channel.ignore_source(source)

    def subscribe(self, callback: Callable[[Message], None]) -> Unsubscribe:
        """Call ``callback`` with each message that arrives (held while frozen)."""
        def receive(message: Message) -> None:
            if self.held is not None:
                self.held.append((callback, message))
            elif self._tab is not None:
                _in_tab(self._tab, callback, message)
            else:
                callback(message)

        return self._channel.subscribe(receive)

    def close(self) -> None:
        """Close the channel: nothing more arrives."""
        self._channel.close()

    def crash(self) -> None:
        """The context died: close, and drop what it posted that is still in flight."""
        self._channel.crash()

    def freeze(self) -> None:
        """Hold what arrives, until :meth:`thaw`."""
        if self.held is None:
            self.held = []

    def thaw(self) -> None:
        """Deliver what was held, in order."""
        held, self.held = self.held or [], None
        for callback, message in held:
            if self._tab is not None:
                _in_tab(self._tab, callback, message)
            else:
                callback(message)


class _TabLink:
    """One end of a page ↔ worker link whose listeners run as the tab's own code.

    The worker's end calls the world's :attr:`World.link_hook` as it posts; the page's end holds
    what the page posts while the page is blocked (:meth:`Tab.block`: a page running nothing
    sends nothing), and posts it, in order, when it is unblocked.
    """

    def __init__(self, end: MemoryLink, tab: "Tab", *, page: bool = False) -> None:
        self.end, self._tab, self._page = end, tab, page

    def send(self, message: Message) -> None:
        tab = self._tab
        if self._page:
            if tab.blocked_sends is not None:
                tab.blocked_sends.append((self.end, message))
                return
        elif tab.world.link_hook is not None and tab.alive:
            tab.world.link_hook(tab, message)
        self.end.send(message)

    def subscribe(self, callback: Callable[[Message], None]) -> Unsubscribe:
        return self.end.subscribe(lambda message: _in_tab(self._tab, callback, message))


class Tab:
    """One simulated page and its scheduler worker, in a :class:`World`.

    Open one with :meth:`World.open_tab`. Use :attr:`queue` as your app uses ``pyjobq``
    (``enqueue_fetch``, ``enqueue``, ``job``, ``query_all``, ``on_update`` …); make the tab
    fail or pause with :meth:`crash`, :meth:`freeze` and :meth:`resume`.
    """

    #: The page's end of its link to the worker (:class:`~pyjobq.memory.MemoryLink`).
    page_link: MemoryLink
    #: The worker's end of that link.
    worker_link: MemoryLink
    #: The worker's ``navigator.locks``.
    locks: MemoryLocks
    #: The page's own ``navigator.locks`` (a page and its worker are two lock contexts).
    page_locks: MemoryLocks
    #: This tab's view of the world's clock (its worker's timers).
    clock: FreezableClock
    #: The page's own timers: a blocked page (:meth:`block`) fires none, its worker's run on.
    page_clock: FreezableClock
    #: The page's job-update channel.
    page_channel: FreezableChannel
    #: The worker's job-update channel.
    worker_channel: FreezableChannel
    #: The page's lease channel (pings: :class:`~pyjobq.engine.lease.LeaseWatch`).
    page_lease_channel: FreezableChannel
    #: The worker's lease channel.
    worker_lease_channel: FreezableChannel

    def __init__(self, world: "World", name: str, *, transport: Any = None,
                 reconstructors: Mapping[str, Callable[[Any], Any]] | None = None,
                 handshake_timeout_ms: float = 10_000.0, yields: Mapping[str, str] | None = None,
                 page_lease: bool = False, waiting: bool = False, worker_host: bool = False,
                 boot_faults: Sequence[BootFault] = (),
                 worker_start_timeout_ms: float = Settings().worker_start_timeout_ms,
                 keep_done_days: float = Settings().keep_done_days,
                 keep_failed_days: float | None = None) -> None:
        _track_tasks(asyncio.get_running_loop())
        #: The world this tab is in.
        self.world = world
        #: The tab's name, also its scheduler's ``source`` (``tab1``, ``tab2`` …).
        self.name = name
        #: False once :meth:`crash`\\ ed.
        self.alive = True
        #: True between :meth:`freeze` and :meth:`resume`.
        self.frozen = False
        #: What the page posted while blocked (:meth:`block`), in order; None when not blocked.
        self.blocked_sends: list[tuple[MemoryLink, Message]] | None = None
        #: Every job's fields as last published to this page (a done volatile job is forgotten by
        #: its engine once published: this is where its last state is read).
        self.published: dict[str, dict[str, Any]] = {}
        self._tasks: "weakref.WeakKeyDictionary[asyncio.Future[Any], int]" = (
            weakref.WeakKeyDictionary())
        self._thaw_waiters: list[asyncio.Future[None]] = []
        self._unblock_waiters: list[asyncio.Future[None]] = []
        self._open_ports(world)
        #: A worker host's lease, once its scheduler booted
        #: (:class:`~pyjobq.engine.lease.HostLease`).
        self.host_lease: HostLease | None = None
        #: The worker's scheduler; None while a ``waiting`` tab has not been granted the lease.
        self.scheduler: Scheduler | None = None
        #: A ``waiting`` tab's request-only page scheduler; None otherwise.
        self.requests: Scheduler | None = None
        self._requests_link: MemoryLink | None = None
        self._requests_end: MemoryLink | None = None
        self.request_channel: FreezableChannel | None = None
        self._schedulers: list[Scheduler] = []
        #: How the next workers' boots go wrong, one fault per worker started, in order (a
        #: ``waiting`` tab or a worker host; pyjobq/testing/_boot.py). Append to it at any time.
        self.boot_faults: list[BootFault] = list(boot_faults)
        #: What this tab's workers did on the way (failures, stalls, the console's warnings).
        self.boot_log: list[str] = []
        #: The worker's boot, followed and retried (the browser's
        #: :class:`~pyjobq.executor.boot.Boot`), in a ``waiting`` tab or a worker host; None where
        #: the worker boots at once.
        self.boot: Boot | None = None
        self._start: SimulatedStart | None = None
        #: What this tab's page was configured with (the simulation's names).
        self._settings = Settings(
            lock_name=LOCK, channel_name=CHANNEL, yields=dict(yields or {}),
            reconstructors=dict(reconstructors or {}), transport=transport,
            handshake_timeout_ms=handshake_timeout_ms,
            worker_start_timeout_ms=worker_start_timeout_ms, keep_done_days=keep_done_days,
            keep_failed_days=keep_failed_days)
        self._worker_args: SchedulerOptions = {
            "yields": yields, "handshake_timeout_ms": handshake_timeout_ms,
            "mode": self._settings.mode}
        _in_tab(self, self._open, transport, reconstructors, yields, page_lease,
                waiting or worker_host, worker_host)

    def _open_ports(self, world: "World") -> None:
        """The page's and the worker's links, lock contexts, clocks and channels."""
        self.page_link, self.worker_link = link_pair()
        # A frozen page and its worker are granted the locks they wait for, and run the
        # callbacks once they thaw.
        self.locks = world.locks.client(thawed=self.thawed)
        self.page_locks = world.locks.client(thawed=self.thawed)
        self.clock = FreezableClock(world.clock, self)
        self.page_clock = FreezableClock(world.clock, self)
        self.page_channel = FreezableChannel(world.channels.channel(CHANNEL), self)
        self.worker_channel = FreezableChannel(world.channels.channel(CHANNEL), self)
        self.page_lease_channel = FreezableChannel(world.channels.channel(LEASE_CHANNEL), self)
        self.worker_lease_channel = FreezableChannel(world.channels.channel(LEASE_CHANNEL), self)

    def _open(self, transport: Any, reconstructors: Mapping[str, Callable[[Any], Any]] | None,
              yields: Mapping[str, str] | None, page_lease: bool, waiting: bool,
              worker_host: bool) -> None:
        world = self.world
        if waiting:
            # The browser's page, on this tab's ports (pyjobq.executor.page.assemble_page).
            self._requests_end, self._requests_link = link_pair(copy=False)
            self.request_channel = FreezableChannel(world.channels.channel(CHANNEL), self)
            store = GuardedStore(world.store, self)
            page = assemble_page(PagePorts(
                link=_TabLink(self.page_link, self, page=True), store=store, schedules=store,
                channel=self.page_channel, requests_channel=self.request_channel,
                locks=self.page_locks, clock=self.page_clock, is_online=lambda: world.online,
                requests_ends=(self._requests_end, self._requests_link),
                wrap=lambda end: _TabLink(end, self, page=True),
                options={"random": world.random, "is_online": world.worker_reads_online}),
                self._settings, self.name)
            #: The page's queue: the object behind ``pyjobq``'s module functions in this tab.
            self.queue = page.side
            self.requests = page.requests
            self._schedulers.append(page.requests)
            self.queue.on_update(self._heard)
            self._start_booting(page, worker_host)
            return
        self.queue = ExecutorSide(
            link=_TabLink(self.page_link, self, page=True), channel=self.page_channel,
            source=self.name, reconstructors=dict(reconstructors or {}), transport=transport,
            is_online=lambda: world.online, clock=self.page_clock, locks=self.page_locks,
            yields=yields)
        self.queue.on_update(self._heard)
        if page_lease:
            self.queue.lease_holder = self._lease_holder()
        self._boot()

    @property
    def side(self) -> ExecutorSide:
        """The same object as :attr:`queue` (pyjobq's name for it: the executor side)."""
        return self.queue

    def _scheduler(self, ends: tuple[MemoryLink, MemoryLink], locks: MemoryLocks,
                   channel: FreezableChannel, source: str, lease: Lease | None) -> Scheduler:
        """The worker's scheduler."""
        world = self.world
        store = GuardedStore(world.store, self)
        options: SchedulerOptions = {**self._worker_args, "random": world.random,
                                     "is_online": world.worker_reads_online, "lease": lease,
                                     "schedules": store}
        scheduler = in_process(
            store=store, source=source, clock=self.clock,
            lock_name=LOCK, locks=locks, channel=channel, ends=ends,
            wrap=lambda end: _TabLink(end, self),
            **options).scheduler
        self._schedulers.append(scheduler)
        return scheduler

    def _boot(self, lease: Lease | None = None) -> None:
        """The worker's scheduler starts: at once, or (waiting) on the page's first grant."""
        if lease is None and self.queue.lease_holder is not None:
            lease = LinkLease(self.worker_link)
        self.scheduler = _in_tab(self, self._scheduler, (self.page_link, self.worker_link),
                                 self.locks, self.worker_channel, self.name, lease)

    def _lease_holder(self, **options: Any) -> LeaseHolder:
        """The page's lease holder: it answers pings while it holds the lock and watches the
        holder while in line; a busy or frozen page hears that its lock was taken only once it
        runs again."""
        return LeaseHolder(self.page_link, grab_on(self.page_locks, thawed=self._page_runs), LOCK,
                           channel=self.page_lease_channel, clock=self.page_clock, source=self.name,
                           **options)

    async def _page_runs(self) -> None:
        """Wait while the page cannot run: frozen, or busy (:meth:`block`)."""
        while self.alive and (self.frozen or self.blocked):
            waiter = asyncio.get_running_loop().create_future()
            (self._thaw_waiters if self.frozen else self._unblock_waiters).append(waiter)
            await waiter

    def _start_booting(self, page: Page, worker_host: bool) -> None:
        """Start the worker and follow its boot, as ``pyjobq.browser.page_main.start_browser``
        does (:func:`pyjobq.executor.page.follow_boot`): the worker gets in line for the lease
        once it holds its files (a worker host's takes the lock itself and keeps it for its
        life), boots on the first grant, and a boot that fails or stalls is ended and retried."""
        start = self._start = SimulatedStart(self, worker_host=worker_host)
        self.boot = start.boot = follow_boot(
            page, start, self._settings,
            lambda error: self.boot_log.append(f"{self.name}: unavailable: {error}"),
            backoff=make_backoff(self.world.random))
        start.start()

    def _heard(self, update: Any) -> None:
        if not update.get("progress_only"):
            self.published[update["id"]] = {**self.published.get(update["id"], {}), **dict(update)}

    @property
    def booted(self) -> bool:
        """Whether the worker has a scheduler (a ``waiting`` tab: not before its first grant)."""
        return self.scheduler is not None

    def wake(self) -> None:
        """A ``wake()`` call: reaches the worker once it has a scheduler."""
        if self.scheduler is not None:
            _in_tab(self, self.scheduler.wake)

    def online(self) -> None:
        """The browser's ``online`` event (set :attr:`World.online` first), as the browser
        runtime wires it: the page forwards it to its engines (jobs waiting out an offline
        failure are due now), and a boot that failed starts a new worker now."""
        _in_tab(self, self.queue.back_online)
        if self.boot is not None:
            _in_tab(self, self.boot.online)

    @property
    def workers_started(self) -> int:
        """How many workers this tab's boot started (1, then one more for each retry); 0 where
        the worker boots at once, with no :attr:`boot`."""
        return self._start.started if self._start is not None else 0

    @property
    def holds_lease(self) -> bool:
        """Whether this tab holds the processor lease (its page for its worker, or the worker)."""
        return self.page_locks.holds(LOCK) or self.locks.holds(LOCK)

    async def thawed(self) -> None:
        """Wait while this tab is frozen (code that was mid-way when it froze resumes after)."""
        while self.frozen and self.alive:
            waiter = asyncio.get_running_loop().create_future()
            self._thaw_waiters.append(waiter)
            await waiter

    def freeze(self) -> None:
        """``freeze`` (or ``pagehide`` into the back/forward cache): the page's handler runs, then
        the page and its worker stop — no message, timer or channel message reaches them. A
        frozen tab keeps its locks, as in Chromium."""
        self.frozen = True
        if self.queue.lease_holder is not None:
            _in_tab(self, self.queue.lease_holder.freeze)  # the page's handler: the tab's code
        for part in (self.page_link, self.worker_link, self.clock, self.page_clock,
                     self.page_channel, self.worker_channel, self.request_channel,
                     self._requests_link, self._requests_end, self.page_lease_channel,
                     self.worker_lease_channel):
            if part is not None:
                part.freeze()

    def resume(self) -> None:
        """``resume`` / ``pageshow``: the page's handler runs first,
        then what waited is delivered."""
        self.frozen = False
        if self.queue.lease_holder is not None:
            # The page's handler is the tab's own code: what it starts dies with the tab (a lease
            # request it made, filed under the test instead, outlived a crash and held the lease
            # for the dead tab for ever).
            _in_tab(self, self.queue.lease_holder.resume)
        page = (self.page_link, self._requests_link, self._requests_end, self.page_clock,
                self.page_channel, self.request_channel, self.page_lease_channel)
        for part in (self.worker_link, self.page_link, self._requests_link, self._requests_end,
                     self.clock, self.page_clock, self.worker_channel, self.page_channel,
                     self.request_channel, self.worker_lease_channel, self.page_lease_channel):
            if part is not None and not (self.blocked and part in page):
                part.thaw()  # a page still blocked stays so: unblock() delivers what waits for it
        waiters, self._thaw_waiters = self._thaw_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    @property
    def blocked(self) -> bool:
        """True between :meth:`block` and :meth:`unblock`."""
        return self.blocked_sends is not None

    def block(self) -> None:
        """The page's event loop is blocked (a notebook cell computing, long synchronous Python):
        nothing reaches the page — its worker's messages, its timers, the channel — and what it
        posts waits, while its worker runs on. Unlike :meth:`freeze`, no handler runs and the
        page lets no lock go: a busy page is not a frozen one. (Known limit: a task of the page
        already under way, such as a transport's call, still runs; only what it posts waits.)"""
        if self.blocked_sends is not None or not self.alive:
            return
        self.blocked_sends = []
        for part in (self.page_link, self.page_clock, self.page_channel, self.request_channel,
                     self._requests_link, self._requests_end, self.page_lease_channel):
            if part is not None:
                part.freeze()

    def unblock(self) -> None:
        """The page's loop runs again: what it posted goes out, then what waited for it arrives."""
        sends, self.blocked_sends = self.blocked_sends, None
        if sends is None or not self.alive:
            return
        for end, message in sends:
            end.send(message)
        waiters, self._unblock_waiters = self._unblock_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        if self.frozen:
            return  # frozen meanwhile: resume() delivers the rest
        for part in (self.page_link, self._requests_link, self._requests_end, self.page_clock,
                     self.page_channel, self.request_channel, self.page_lease_channel):
            if part is not None:
                part.thaw()

    def crash(self) -> None:
        """The tab is gone (closed, killed, out of memory): its worker stops, every task its code
        started is cancelled, its locks are released and its ports close. What it posted and is
        not yet delivered dies with it. Its records stay in the store as they were."""
        self.alive = False
        if self.boot is not None:
            self.boot.close()
        for scheduler in self._schedulers:
            scheduler.stop()
        for task in sorted(self._tasks, key=self._tasks.__getitem__):
            task.cancel()
        self.locks.crash()
        self.page_locks.crash()
        for link in (self.page_link, self.worker_link, self._requests_link, self._requests_end):
            if link is not None:
                link.close()
        for channel in (self.page_channel, self.worker_channel, self.request_channel,
                        self.page_lease_channel, self.worker_lease_channel):
            if channel is not None:
                channel.crash()
        self.queue.crash()
        self.frozen = False
        self.blocked_sends = None
        for waiter in self._thaw_waiters + self._unblock_waiters:
            waiter.cancel()


class ServiceWorker:
    """pyjobq's Service Worker in a :class:`World`: a tab without a page, woken by a ``sync``.

    Start one with :meth:`World.start_service_worker`. It runs the browser's very drain
    (:func:`pyjobq.service_worker.drain.drain`) on the world's store (through a
    :class:`GuardedStore`), its own lock context on the world's locks, the world's channel and
    clock (its timers and listeners run as its own code, like a tab's), with its own source
    (:func:`~pyjobq.core.records.service_worker_source`), the transport and budget it was given.

    It has no page, so nothing freezes it or keeps it busy. The browser ends it:

    * at any moment, mid-run too (:meth:`kill`) — its locks, the lease and its run locks, are
      released, every task its code started is cancelled, and nothing it had not stored is
      stored, as :meth:`Tab.crash` does to a tab;
    * when its event is over (the drain returned, :attr:`report` final, :attr:`ended_at` set):
      the same end, with nothing left to cut short but a request the drain abandoned at its
      grace's end, which dies with it.
    """

    def __init__(self, world: "World", name: str, *, transport: Any, budget_ms: float,
                 reconstructors: Mapping[str, Callable[[Any], Any]] | None = None,
                 hears_pages: bool = True) -> None:
        _track_tasks(asyncio.get_running_loop())
        #: The world it drains.
        self.world = world
        #: Its name in the world (``sw1``, ``sw2`` …), as a tab's.
        self.name = name
        #: Its scheduler's source: the owner of the records it runs.
        self.source = service_worker_source()
        #: False once the browser ended it (:meth:`kill`, or its event over).
        self.alive = True
        #: True if :meth:`kill` ended it (not its event's end).
        self.killed = False
        #: The drain's budget, from the event (ms), and when the event came (the world's time).
        self.budget_ms, self.started_at = budget_ms, world.clock.now()
        #: When the drain returned; None while it runs, or if it was killed.
        self.ended_at: float | None = None
        #: The drain's report, as it goes (:class:`~pyjobq.service_worker.drain.DrainReport`).
        self.report = DrainReport()
        #: The lease as the drain holds it: revoked once it stops claiming.
        self.lease = ServiceWorkerLease()
        #: Its ``navigator.locks``: one lock context of the world's.
        self.locks = world.locks.client()
        self._clock = FreezableClock(world.clock, self)
        self._channels: list[FreezableChannel] = []
        self._tasks: "weakref.WeakKeyDictionary[asyncio.Future[Any], int]" = (
            weakref.WeakKeyDictionary())
        ports = DrainPorts(store=GuardedStore(world.store, self), locks=self.locks,
                           channel=self._channel, clock=self._clock,
                           is_online=lambda: world.online,
                           lease_channel=self._lease_channel if hears_pages else None,
                           random=world.random)
        queue = DrainQueue(lock_name=LOCK, source=self.source, transport=transport,
                           reconstructors=dict(reconstructors or {}), yields={},
                           handshake_timeout_ms=10_000.0)
        self._task: asyncio.Future[None] = _in_tab(self, asyncio.ensure_future,
                                                   self._run(ports, queue))

    def _channel(self) -> FreezableChannel:
        channel = FreezableChannel(self.world.channels.channel(CHANNEL), self)
        self._channels.append(channel)
        return channel

    def _lease_channel(self) -> FreezableChannel:
        channel = FreezableChannel(self.world.channels.channel(LEASE_CHANNEL), self)
        self._channels.append(channel)
        return channel

    async def _run(self, ports: DrainPorts, queue: DrainQueue) -> None:
        await sw_drain.drain(ports, queue, self.budget_ms, report=self.report, lease=self.lease)
        self.ended_at = self._clock.now()
        self._end()  # the event is over: the browser ends the Service Worker

    @property
    def draining(self) -> bool:
        """Whether its drain still runs (not ended, not killed)."""
        return self.alive and self.ended_at is None

    @property
    def holds_lease(self) -> bool:
        """Whether it holds the processor lease now."""
        return self.locks.holds(LOCK)

    def kill(self) -> None:
        """The browser ends it now, mid-drain or mid-run: see the class docstring."""
        if self.alive:
            self.killed = True
            self._end()

    def _end(self) -> None:
        self.alive = False
        for task in sorted(self._tasks, key=self._tasks.__getitem__):
            if task is not self._task or self.killed:
                task.cancel()
        self.locks.crash()
        for channel in self._channels:
            channel.crash()


class World:
    """One browser origin on CPython: a store, locks, a channel and a clock its tabs share.

    Args:
        random: the retry ladder's random source (``random.random``-like); default always 0,
            so backoff delays are exact.
        yields: how many event-loop turns each store call gives away before its transaction
            begins and after it commits, as IndexedDB's do (:class:`~pyjobq.memory.MemoryStore`);
            0, the default, runs each call to its end at once.

    Open tabs with :meth:`open_tab`, move time with :meth:`advance`, read what is stored with
    :meth:`record` or :attr:`store`. Create it inside the running loop (in the test's
    ``async def``), as tabs start tasks.
    """

    def __init__(self, random: Callable[[], float] = lambda: 0.0, *, yields: int = 0) -> None:
        #: The origin's clock: moves only in :meth:`advance` (or ``clock.advance``).
        self.clock = FakeClock()
        #: The origin's IndexedDB database.
        self.store = MemoryStore(clock=self.clock, yields=yields)
        #: The origin's ``navigator.locks``: ``locks.client()`` is one more lock context (a page
        #: doing foreground work, say); ``locks.held()`` what is held.
        self.locks = LockHub()
        #: The origin's ``BroadcastChannel``\\ s.
        self.channels = ChannelHub()
        #: The retry ladder's random source.
        self.random = random
        #: ``navigator.onLine`` for every tab.
        self.online = True
        #: What the tabs' scheduler workers read as ``navigator.onLine`` when it is not what
        #: their pages read (an emulation of the page's network alone); None: ``online``.
        self.workers_online: bool | None = None
        #: Every tab opened, in order, crashed ones included.
        self.tabs: list[Tab] = []
        #: What went wrong that no single tab could notice (a dead tab's write, say); a test
        #: asserts it stays empty.
        self.violations: list[str] = []
        #: Awaited around every store write of a tab (:class:`GuardedStore`): where a test freezes
        #: or crashes a tab in the middle of a pass. None: no hook.
        self.store_hook: StoreHook | None = None
        #: Every periodic occurrence a tab's store call enqueued, in order: (schedule name, slot,
        #: tab name). Each (name, slot) must appear once (once per origin).
        self.occurrences: list[tuple[str, float, str]] = []
        #: Called as a tab's worker posts a message to its page (:data:`LinkHook`): where a test
        #: freezes a tab or blocks its page at the moment ``run`` is posted. None: no hook.
        self.link_hook: LinkHook | None = None
        #: Every Service Worker started (:meth:`start_service_worker`), in order, ended ones too.
        self.service_workers: list[ServiceWorker] = []
        #: Every claim written, in order: (tab or Service Worker name, job id).
        self.claims: list[tuple[str, str]] = []
        self._names = itertools.count(1)
        self._sw_names = itertools.count(1)

    def worker_reads_online(self) -> bool:
        """``navigator.onLine`` as a scheduler worker reads it (:attr:`workers_online`)."""
        return self.online if self.workers_online is None else self.workers_online

    def open_tab(self, *, transport: Any = None,
                 reconstructors: Mapping[str, Callable[[Any], Any]] | None = None,
                 handshake_timeout_ms: float = 10_000.0, yields: Mapping[str, str] | None = None,
                 page_lease: bool = False, waiting: bool = False, worker_host: bool = False,
                 boot_faults: Sequence[BootFault] = (),
                 worker_start_timeout_ms: float = Settings().worker_start_timeout_ms,
                 keep_done_days: float = Settings().keep_done_days,
                 keep_failed_days: float | None = None) -> Tab:
        """Open a tab whose queue is configured with these settings (as ``pyjobq.configure``).

        Args:
            transport: ``async (method, path, body) -> response`` for fetch jobs; a
                :class:`~pyjobq.testing.Response` is a response.
            reconstructors: ``{name: factory}`` for persistent jobs.
            handshake_timeout_ms: how long the scheduler waits for ``run_started``.
            yields: ``{job type: lock name}`` (spec: "Yielding").
            page_lease: the page holds the processor lease (a page with a document).
            waiting: the page waits in line for the lease; its worker boots on the first grant.
            worker_host: an executor side with no document (a notebook kernel): its worker's
                bootstrap holds the lease for the worker's life, frozen or not.
            boot_faults: how the boots of a ``waiting`` tab's or a worker host's first workers
                go wrong (:class:`BootFault`, one per worker, in order; :attr:`Tab.boot_faults`).
            worker_start_timeout_ms: the longest a boot may go without a step (``configure``'s).
            keep_done_days, keep_failed_days: the retention (``configure``'s), the worker's
                and the page's request scheduler's alike.
        """
        if worker_host and (page_lease or waiting):
            raise ValueError("a worker host has no document: it holds the lease itself"
                             " (no page_lease, no waiting)")
        if boot_faults and not (waiting or worker_host):
            raise ValueError(
                "boot_faults need a worker that boots in steps: waiting=True or worker_host=True")
        tab = Tab(self, f"tab{next(self._names)}", transport=transport,
                  reconstructors=reconstructors, handshake_timeout_ms=handshake_timeout_ms,
                  yields=yields, page_lease=page_lease, waiting=waiting, worker_host=worker_host,
                  boot_faults=boot_faults, worker_start_timeout_ms=worker_start_timeout_ms,
                  keep_done_days=keep_done_days, keep_failed_days=keep_failed_days)
        self.tabs.append(tab)
        return tab

    def start_service_worker(self, *, transport: Any, budget_ms: float,
                             reconstructors: Mapping[str, Callable[[Any], Any]] | None = None,
                             hears_pages: bool = True) -> ServiceWorker:
        """The browser wakes pyjobq's Service Worker (a ``sync`` event): it drains the queue with
        ``transport`` for at most ``budget_ms`` (:class:`ServiceWorker`). ``hears_pages=False``:
        it hears no lease pings (a Service Worker too busy to answer them), so a page in line
        finds it only by its look at the lock's queue, and takes the lease from it once silent."""
        worker = ServiceWorker(self, f"sw{next(self._sw_names)}", transport=transport,
                               budget_ms=budget_ms, reconstructors=reconstructors,
                               hears_pages=hears_pages)
        self.service_workers.append(worker)
        return worker

    def claimed(self, by: Context, job_id: str) -> None:
        """A claim is being written (:class:`GuardedStore`): never two processors. The Service
        Worker claims only while it holds the lease and no page does; a page never claims while
        a Service Worker holds the lease and may still claim (a revoked one only lets its runs
        finish). A page's worker may still finish a claim it began before its page let the lease
        go (it froze mid-write, and resumes): a stale claim, which the run lock it took first
        keeps from running twice or beside its lane (pyjobq/engine/lease.py) — the transport's
        oracles check that — and not a second processor."""
        self.claims.append((by.name, job_id))
        if isinstance(by, ServiceWorker):
            pages = [t.name for t in self.live if t.holds_lease]
            if pages or not by.holds_lease:
                self.violations.append(
                    f"{by.name} claimed {job_id} holding the lease: {by.holds_lease}; pages "
                    f"holding it: {pages} (never two processors)")
            elif by.lease.revoked:
                self.violations.append(
                    f"{by.name} claimed {job_id} after its drain stopped claiming (a page asked, "
                    "its budget ended, or it was done): it stops at once")
        elif by.holds_lease:
            claiming = [w.name for w in self.service_workers
                        if w.alive and w.holds_lease and not w.lease.revoked]
            if claiming:
                self.violations.append(
                    f"{by.name} claimed {job_id} while {claiming} held the lease and claimed "
                    "(never two processors)")

    @property
    def live(self) -> list[Tab]:
        """Tabs that have not crashed."""
        return [t for t in self.tabs if t.alive]

    @property
    def awake(self) -> list[Tab]:
        """Live tabs that are not frozen: only these run code."""
        return [t for t in self.tabs if t.alive and not t.frozen]

    async def advance(self, ms: float) -> None:
        """Move the clock by ``ms``, firing the timers it passes, and let what they start run."""
        self.clock.advance(ms)
        await settle()

    async def record(self, job_id: str) -> dict[str, Any] | None:
        """The stored record of ``job_id`` as its IndexedDB value (a flat dict); None if absent."""
        record = await self.store.get(job_id)
        return None if record is None else record.to_dict()
