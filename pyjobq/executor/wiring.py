"""One way to wire an engine that runs in this Python process: :func:`in_process`.

pyjobq runs a :class:`~pyjobq.engine.scheduler.Scheduler` in the page's own Python in five places:
the in-process queue on CPython (:func:`pyjobq.hosts.start_memory`), every tab's volatile
engine, the outbox, a browser page's request scheduler (the one that stores and answers at
once while the worker waits for the lease), and each tab of the simulated world
(:mod:`pyjobq.testing`). Each is the same: a pair of linked ends, a started scheduler on one,
and the page's :class:`~pyjobq.executor.client.EngineClient` (inside an
:class:`~pyjobq.executor.side.ExecutorSide`, or the volatile one) on the other. :func:`in_process`
makes the pair and the scheduler once; the caller subscribes its client to
:attr:`InProcess.link` in the same step (messages arrive in a later task, so none is missed).

Runs on the page only (or in a CPython process standing in for one); the scheduler worker
builds its own scheduler (:mod:`pyjobq.browser.worker_main`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, TypedDict, Unpack

from ..core.mode import Mode
from ..core.ports import Channel, Clock, Lease, Link, LockManager, ScheduleStore, Store
from ..engine.scheduler import Scheduler
from ..memory import ChannelHub, LockHub, MemoryLink, link_pair


class SchedulerOptions(TypedDict, total=False):
    """The :class:`~pyjobq.engine.scheduler.Scheduler` keywords :func:`in_process` hands on as
    they are; one left out takes the scheduler's default. Named here, not ``**Any``: a keyword
    the scheduler renames or drops is a type error at every caller."""

    yields: Mapping[str, str] | None
    handshake_timeout_ms: float
    random: Callable[[], float]
    is_online: Callable[[], bool]
    mode: Mode
    backoff: Callable[[int], float] | None
    lease: Lease | None
    schedules: ScheduleStore | None


@dataclass(frozen=True)
class InProcess:
    """An engine in this process: the scheduler and the page's end of its link."""

    scheduler: Scheduler
    link: Link


def in_process(
    *,
    store: Store,
    source: str,
    clock: Clock,
    lock_name: str,
    locks: LockManager | None = None,
    channel: Channel | None = None,
    copy: bool = True,
    ends: tuple[MemoryLink, MemoryLink] | None = None,
    wrap: Callable[[MemoryLink], Link] = lambda end: end,
    start: bool = True,
    **options: Unpack[SchedulerOptions],
) -> InProcess:
    """A scheduler on ``store`` in this process, linked to the page.

    Args:
        store, source, clock, lock_name: the scheduler's (``options`` take the rest of
            :class:`~pyjobq.engine.scheduler.Scheduler`'s keywords: ``mode``, ``lease``,
            ``yields`` …).
        locks, channel: the scheduler's; default private ones (no other engine hears them).
        copy: structured-copy every message, as ``postMessage`` does; False hands messages
            over as they are (both ends in one Python context, e.g. the volatile engine).
        ends: an existing (page, engine) pair, when the page's end must exist before the
            engine does (a simulated tab whose worker boots on its first lease grant).
        wrap: wraps each end before use (the simulation's tabs freeze theirs).
        start: start the scheduler now (it says ``ready`` in a later task).
    """
    page_end, engine_end = ends if ends is not None else link_pair(copy=copy)
    scheduler = Scheduler(
        store=store, source=source, clock=clock, lock_name=lock_name,
        locks=locks if locks is not None else LockHub().client(),
        channel=channel if channel is not None else ChannelHub().channel(source),
        link=wrap(engine_end), **options)
    if start:
        scheduler.start()
    return InProcess(scheduler, wrap(page_end))
