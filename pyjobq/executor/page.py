"""One page's queue, assembled from its host's ports: :func:`assemble_page`, :func:`follow_boot`.

A page (a browser tab, or a worker host such as a notebook kernel) runs two engines' clients:
the scheduler worker's, behind a link, and its own request scheduler, which stores this tab's
enqueues, answers its queries and broadcasts their news under a lease it never gets
(:class:`~pyjobq.engine.lease.NeverLease`), so a tab whose worker waits in line or cannot
boot for now still answers at once. The worker's start is followed by a
:class:`~pyjobq.executor.boot.Boot`.

The browser (:func:`pyjobq.browser.page_main.start_browser`) and the simulation's tabs
(:mod:`pyjobq.testing`) build their ports — the browser's IndexedDB, Web Locks and
BroadcastChannels, or the simulation's freezable in-memory ones — and call these two functions:
the soak proves the wiring pages ship.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..config import Settings
from ..core.backoff import make_backoff
from ..core.codes import Code
from ..core.errors import WorkerUnavailable
from ..core.ports import Channel, Clock, Link, LockManager, ScheduleStore, Store
from ..engine.lease import NeverLease
from ..engine.scheduler import Scheduler
from ..memory import MemoryLink
from .boot import Boot, WorkerStart
from .side import ExecutorSide, HostResources
from .wiring import SchedulerOptions, in_process


def requests_source(source: str) -> str:
    """The ``source`` of the request scheduler of the page whose worker is ``source``."""
    return source + ":page"


def _as_is(end: MemoryLink) -> Link:
    return end


@dataclass(frozen=True)
class PagePorts:
    """What a page's queue runs on, built by its host."""

    #: The page's end of its link to the scheduler worker.
    link: Link
    #: The request scheduler's store (the worker's store, opened by this page).
    store: Store
    schedules: ScheduleStore
    #: The page's ``job-update`` channel, and the request scheduler's own one (two objects:
    #: each hears the other's news, as the worker's hears both).
    channel: Channel
    requests_channel: Channel
    #: The page's lock context (its side's, and its request scheduler's).
    locks: LockManager
    #: The page's timers.
    clock: Clock
    #: ``navigator.onLine`` as the page reads it (when an attempt it ran fails).
    is_online: Callable[[], bool]
    #: Structured-copy the request scheduler's messages; False: one Python context hands them
    #: over as made.
    copy: bool = False
    #: The request scheduler's link, when the host made it (a simulated tab freezes its ends).
    requests_ends: tuple[MemoryLink, MemoryLink] | None = None
    #: Wraps each end of the request scheduler's link before use.
    wrap: Callable[[MemoryLink], Link] = _as_is
    #: The rest of the request scheduler's keywords (a simulation's random draws).
    options: SchedulerOptions = field(default_factory=lambda: SchedulerOptions())


@dataclass(frozen=True)
class Page:
    """A page's queue: its executor side, and its request scheduler."""

    side: ExecutorSide
    requests: Scheduler


def assemble_page(ports: PagePorts, settings: Settings, source: str) -> Page:
    """The executor side of the page whose worker is ``source``, with its request scheduler
    started on ``ports.store``."""
    page_source = requests_source(source)
    options: SchedulerOptions = {"yields": settings.yields, "mode": settings.mode,
                                 "handshake_timeout_ms": settings.handshake_timeout_ms,
                                 "schedules": ports.schedules, **ports.options,
                                 "lease": NeverLease()}
    requests = in_process(
        store=ports.store, source=page_source, clock=ports.clock,
        lock_name=settings.lock_name, locks=ports.locks, channel=ports.requests_channel,
        start=False, copy=ports.copy, ends=ports.requests_ends,
        wrap=ports.wrap, **options)
    side = ExecutorSide(
        link=ports.link, requests=requests.link, requests_source=page_source,
        channel=ports.channel, source=source, reconstructors=settings.reconstructors,
        transport=settings.transport, locks=ports.locks, yields=settings.yields,
        is_online=ports.is_online, clock=ports.clock, timeout_s=settings.timeout_s)
    side.resources = HostResources(requests=requests.scheduler)
    requests.scheduler.start()
    return Page(side, requests.scheduler)


def follow_boot(page: Page, start: WorkerStart, settings: Settings,
                say: Callable[[WorkerUnavailable], None],
                backoff: Callable[[int], float] | None = None) -> Boot:
    """Follow the worker ``start`` starts with a :class:`Boot` (``backoff``: its retry ladder;
    None: the default). Once the worker is unavailable for good, ``say`` tells the developer,
    the page lets the lease go (a tab that can process takes it instead of waiting behind this
    one for its whole life), and a worker stopped by a newer page stops the requests too."""
    side = page.side
    boot = Boot(side.persistent, start, side.clock, stall_ms=settings.worker_start_timeout_ms,
                backoff=backoff if backoff is not None else make_backoff())

    def unavailable(error: WorkerUnavailable) -> None:
        say(error)
        start.let_lease_go()
        if error.code == Code.WORKER_STOPPED:
            page.requests.stop()

    side.on_unavailable = unavailable
    side.resources.boot = boot
    return boot
