"""A simulated tab's scheduler worker booting as ``worker.mjs`` does, and the platform's part of
its boot: the same :class:`~pyjobq.executor.boot.Boot` the browser runs follows it.

Theory of operation. In a browser a tab's scheduler worker boots in steps, each reported on
its link (pyjobq/browser/worker.mjs): ``worker_alive``, then the distribution's files are
fetched as bytes (``worker_fetched``), then — once its tab holds the processor lease (a page
holds it for its worker and posts the boot message on its first grant; a worker host's
bootstrap takes the lock itself) — ``worker_booting`` as Pyodide starts from those bytes, and
the scheduler's ``ready``; or ``worker_error`` at a stage. :class:`SimulatedWorker` takes
the same steps in a :class:`~pyjobq.testing.Tab`, on loop turns rather than seconds, and
:class:`SimulatedStart` is its :class:`~pyjobq.executor.boot.WorkerStart`, as
``pyjobq.browser.page_main._BrowserWorker`` is the browser's: it ends a worker (its lock
context dies with it, its words are heard no more) and starts a new one on the same link.

What may go wrong is what goes wrong in a browser, no more and no less:

- the world offline as a worker fetches its files: ``worker_error`` at ``fetch``, seen
  offline (Chromium: "Failed to fetch dynamically imported module …"), as long as it lasts;
  a worker that fetched its files already boots offline from them;
- a :class:`BootFault` on the tab (:attr:`Tab.boot_faults <pyjobq.testing.Tab.boot_faults>`),
  one per worker started: a download that fails online (a dropped connection), one that
  neither answers nor fails (a stall at ``fetch``), ``loadPyodide`` hanging with the lease held
  (a refused ``pyodide.asm.wasm``: a stall at ``load``), or a load that fails (permanent).

A frozen tab's worker takes no step until it thaws; a busy page's worker runs on.
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Callable, Literal, Protocol

from ..config import DEFAULT_LOCK_NAME
from ..core.messages import make
from ..core.ports import Channel, Clock, Lease, Message
from ..engine.lease import HostLease, LeaseHolder, LinkLease, watch_in_line
from ..engine.scheduler import Scheduler
from ..executor.boot import Boot
from ..executor.side import ExecutorSide
from ..memory import LockHub, MemoryLink, MemoryLocks
from ._grab import grab_on

__all__ = ["BootFault", "SimulatedWorker", "SimulatedStart", "SimulatedTab", "INDEX_URL"]

#: Where the simulated tabs' Pyodide distribution is served from (only ever named in messages).
INDEX_URL = "https://cdn.example/pyodide/"

#: The message a page posts to its worker on its first grant (``worker.mjs`` waits for it).
BOOT_MESSAGE: Message = {"pyjobq_boot": 1}


@dataclass(frozen=True)
class BootFault:
    """One simulated worker's boot that goes wrong (:attr:`pyjobq.testing.Tab.boot_faults`).

    Attributes:
        stage: ``"fetch"``: the distribution's files, before the tab gets in line for the lease;
            ``"load"``: Pyodide starting from them, with the lease held.
        stall: the worker goes quiet there instead of reporting an error — a download neither
            answered nor refused, ``loadPyodide`` hanging on a refused ``pyodide.asm.wasm``.
            Without it the worker reports ``worker_error`` at ``stage``: at ``fetch`` a dropped
            download (retried), at ``load`` a distribution that does not load (permanent:
            :class:`~pyjobq.WorkerUnavailable`).
        for_ms: how long a stall lasts before the worker goes on (a download that finishes
            late); None: until the worker is ended.
    """

    stage: Literal["fetch", "load"] = "fetch"
    stall: bool = False
    for_ms: float | None = None

    def __post_init__(self) -> None:
        if self.stage not in ("fetch", "load"):
            raise ValueError(f"a boot fault's stage is 'fetch' or 'load', not {self.stage!r}")
        if self.for_ms is not None and (not self.stall or not self.for_ms >= 0):
            raise ValueError("for_ms is how long a stall lasts (stall=True, a number >= 0),"
                             f" got {self.for_ms!r}")

    def __str__(self) -> str:
        what = "stall" if self.stall else "fail"
        return f"{what}@{self.stage}" + (f" {self.for_ms:g} ms" if self.for_ms is not None else "")


class Origin(Protocol):
    """What a simulated worker reads of its :class:`~pyjobq.testing.World`."""

    @property
    def online(self) -> bool:
        """``navigator.onLine``."""

    @property
    def locks(self) -> LockHub:
        """The origin's lock manager (a new worker is a new client of it)."""


class SimulatedTab(Protocol):
    """What a simulated worker and its start use of their :class:`~pyjobq.testing.Tab`, and no
    more: the tab's module imports this one, never the other way round."""

    #: The worker's ``navigator.locks``: a new worker is a new lock context.
    locks: MemoryLocks
    #: A worker host's lease, once its scheduler booted.
    host_lease: HostLease | None

    @property
    def name(self) -> str: ...
    @property
    def world(self) -> Origin: ...
    @property
    def alive(self) -> bool: ...
    @property
    def frozen(self) -> bool: ...
    @property
    def queue(self) -> ExecutorSide: ...
    @property
    def scheduler(self) -> Scheduler | None: ...
    @property
    def requests(self) -> Scheduler | None: ...
    @property
    def boot_faults(self) -> list[BootFault]: ...
    @property
    def boot_log(self) -> list[str]: ...
    @property
    def page_link(self) -> MemoryLink: ...
    @property
    def worker_link(self) -> MemoryLink: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def page_clock(self) -> Clock: ...
    @property
    def page_lease_channel(self) -> Channel: ...
    @property
    def worker_lease_channel(self) -> Channel: ...

    async def thawed(self) -> None:
        """Return once the tab is not frozen."""

    def _boot(self, lease: Lease | None = None) -> None:
        """Start the worker's scheduler under ``lease``."""

    def _lease_holder(self, *, eager: bool, on_first_grant: Callable[[], None]) -> LeaseHolder:
        """The page's lease holder for its worker."""


def _resolve(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


class SimulatedWorker:
    """One scheduler worker of a tab, from its script's start to its scheduler's ``ready``
    (``worker.mjs``). Made by :meth:`SimulatedStart.start`; :meth:`end` is ``terminate()``."""

    def __init__(self, tab: SimulatedTab, locks: MemoryLocks, fault: BootFault | None, *,
                 worker_host: bool) -> None:
        self._tab = tab
        #: This worker's ``navigator.locks``: it dies with the worker (a worker host's lease too).
        self.locks = locks
        self.fault = fault
        self._worker_host = worker_host
        #: True once ended: it says nothing more, and its locks are gone.
        self.ended = False
        #: Its scheduler, once it booted.
        self.booted = False
        self._booting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._early: list[Message] = []
        self._let_lease_go: Callable[[], None] | None = None
        #: A worker host's: its lock was taken (by a steal) before its scheduler took it over.
        self._stolen = False
        self._cancel_lease: Callable[[], None] | None = None
        self._unsubscribe: Callable[[], None] | None = tab.worker_link.subscribe(self._heard)
        self._task = asyncio.ensure_future(self._run())

    def _heard(self, message: Message) -> None:
        # Before the scheduler listens, worker.mjs keeps what arrives and replays it in order.
        if message.get("pyjobq_boot") == 1:
            if not self._booting.done():
                self._booting.set_result(None)
        else:
            if message.get("type") == "lease_steal":
                self._steal()  # worker.mjs takes the lock from a silent holder, before Pyodide
            self._early.append(message)

    def _say(self, message: Message) -> None:
        if not self.ended:
            self._tab.worker_link.send(message)

    async def _turn(self) -> None:
        """A step of the script: a later task, and none while its tab is frozen."""
        await asyncio.sleep(0)
        await self._tab.thawed()

    def _fail(self, stage: str, message: str) -> None:
        self._tab.boot_log.append(f"{self._tab.name}: worker failed at {stage}: {message}")
        self._say(make("worker_error", stage=stage, message=message, refused=False))
        if self._let_lease_go is not None:
            self._let_lease_go()  # worker.mjs: pyjobqReleaseLease()

    async def _stall(self, fault: BootFault) -> None:
        self._tab.boot_log.append(f"{self._tab.name}: worker stalled at {fault.stage}")
        resumed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if fault.for_ms is not None:
            self._tab.clock.call_later(fault.for_ms, functools.partial(_resolve, resumed))
        await resumed
        await self._turn()

    async def _run(self) -> None:
        fault = self.fault
        await self._turn()  # its script and Pyodide's loader are in
        self._say(make("worker_alive"))
        await self._turn()
        if not self._tab.world.online:
            self._fail("fetch",
                       "TypeError: Failed to fetch dynamically imported module: "
                       f"{INDEX_URL}pyodide.asm.mjs")
            return
        if fault is not None and fault.stage == "fetch":
            if not fault.stall:
                self._fail("fetch",
                           f"Error: {INDEX_URL}pyodide.asm.wasm: network error"
                           " (the connection was reset)")
                return
            await self._stall(fault)
        self._say(make("worker_progress", bytes=1))
        self._say(make("worker_fetched"))
        if self._worker_host:
            await self._take_lease()  # held for the worker's life: worker.mjs, lease "worker"
        await self._booting
        await self._turn()
        self._say(make("worker_booting"))
        if fault is not None and fault.stage == "load":
            if not fault.stall:
                self._fail("load", "RuntimeError: pyodide.asm.wasm could not be compiled")
                return
            await self._stall(fault)
        await self._turn()
        if self.ended:
            return
        # The scheduler listens from here: what waited is replayed to it, in order.
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.booted = True
        if self._worker_host:
            # pyjobq's lease takes over the lock the bootstrap holds (worker_main._host_lease).
            tab = self._tab
            tab.host_lease = HostLease(grab_on(self.locks, thawed=tab.thawed), DEFAULT_LOCK_NAME,
                                       tab.worker_lease_channel, tab.clock, tab.name,
                                       held=not self._stolen,
                                       release_bootstrap=self._let_lease_go or (lambda: None))
            tab._boot(tab.host_lease)
        else:
            self._tab._boot(LinkLease(self._tab.worker_link))
        early, self._early = self._early, []
        for message in early:
            self._tab.worker_link.deliver(message)

    async def _take_lease(self) -> None:
        """worker.mjs: in line for the lock (the page watches the holder meanwhile), and held
        for the worker's life — unless a tab in line takes it; a frozen worker hears so on thaw."""
        self._granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._grab_lease(steal=False)
        await self._granted

    def _grab_lease(self, *, steal: bool) -> None:
        def granted(release: Callable[[], None]) -> None:
            self._cancel_lease = None
            self._let_lease_go = release
            if not self._granted.done():
                self._granted.set_result(None)

        self._cancel_lease = grab_on(self.locks, thawed=self._tab.thawed)(
            DEFAULT_LOCK_NAME, granted, steal=steal, on_stolen=self._lock_taken)

    def _steal(self) -> None:
        if self._worker_host and self._cancel_lease is not None and self._let_lease_go is None:
            cancel, self._cancel_lease = self._cancel_lease, None
            cancel()
            self._grab_lease(steal=True)

    def _lock_taken(self) -> None:
        lease = self._tab.host_lease if self.booted else None
        if lease is not None:
            lease.stolen()
        else:
            self._stolen = True  # worker.mjs: pyjobqLeaseStolen, read as the scheduler starts

    def end(self) -> None:
        """``terminate()``: it stops where it is, says nothing more, and its locks are let go."""
        if self.ended:
            return
        self.ended = True
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._task.cancel()
        if self._worker_host and self.booted and self._tab.host_lease is not None:
            self._tab.host_lease.close()
        self.locks.crash()
        if self.booted and self._tab.scheduler is not None:
            self._tab.scheduler.stop()  # ended between its ready and the page hearing it


class SimulatedStart:
    """The platform's part of a simulated tab's boot (:class:`pyjobq.executor.boot.WorkerStart`), as
    ``pyjobq.browser.page_main._BrowserWorker`` is a browser page's: one worker at a time on the
    tab's link and — on a page — the lease it holds for it, asked for once the worker holds its
    files."""

    def __init__(self, tab: SimulatedTab, *, worker_host: bool) -> None:
        self._tab = tab
        self._worker_host = worker_host
        self._unhold: Callable[[], None] | None = None
        self._unwatch: Callable[[], None] | None = None  # a worker host's watch while in line
        #: The worker now (a new one after each failed boot); None once ended.
        self.worker: SimulatedWorker | None = None
        #: Workers started, the first included.
        self.started = 0
        #: Set once the boot follows these workers.
        self.boot: Boot | None = None

    def start(self) -> None:
        tab = self._tab
        if not tab.alive:
            return
        if self.started:
            tab.locks = tab.world.locks.client()  # a new worker is a new lock context
        self.started += 1
        fault = tab.boot_faults.pop(0) if tab.boot_faults else None
        if fault is not None:
            tab.boot_log.append(f"{tab.name}: worker {self.started} starts with {fault}")
        self.worker = SimulatedWorker(tab, tab.locks, fault, worker_host=self._worker_host)
        if self._worker_host:
            self._post_boot()  # a worker host's worker takes the lease itself, then boots

    def _post_boot(self) -> None:
        """Let the worker start Pyodide: it holds the lease now (or takes it itself)."""
        if self.worker is not None:
            self._tab.page_link.send(BOOT_MESSAGE)

    def end(self) -> None:
        self.let_lease_go()
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.end()

    def get_in_line(self) -> None:
        if not self._worker_host and self._unhold is None:
            # The page holds the lease for its worker and boots it only once it has it.
            side = self._tab.queue
            holder = self._tab._lease_holder(eager=True, on_first_grant=self._post_boot)
            side.lease_holder = holder
            if self._tab.frozen:
                holder.freeze()

            def unhold() -> None:
                holder.close()
                if side.lease_holder is holder:
                    side.lease_holder = None

            self._unhold = unhold
        elif self._worker_host and self._unwatch is None:
            # Its bootstrap waits in line with no Pyodide: the page watches the holder for it
            # (pyjobq.browser.page_main._BrowserWorker.get_in_line).
            tab = self._tab
            self._unwatch = watch_in_line(tab.page_link, tab.page_lease_channel, tab.page_clock,
                                          tab.name)

    def let_lease_go(self) -> None:
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()
        unhold, self._unhold = self._unhold, None
        if unhold is not None:
            unhold()
        # In a worker host the worker holds the lock: it lets go as its boot fails, or as it ends.

    def is_online(self) -> bool:
        return self._tab.world.online

    def warn(self, text: str) -> None:
        self._tab.boot_log.append(f"{self._tab.name}: console.warn: {text}")
