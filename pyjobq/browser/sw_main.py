"""The queue's drain inside pyjobq's Service Worker: :func:`drain`.

Theory of operation
-------------------
Runs only in the Service Worker (``service_worker.mjs`` calls :func:`drain` inside a ``sync``
event's ``waitUntil``), in a Pyodide of its own, with the pyjobq files and the app's transport
package a page left in Cache Storage (:mod:`pyjobq.browser.sw_page`). A Service Worker is a tab
without a page: it holds the processor lease like any tab, and it runs the engine the pages
run — the scheduler and the executor side linked in this one context, on the same IndexedDB
store, Web Locks and channel — so the retry policy, lanes, run locks, the attempt ceiling and
the ``job-update`` news are the pages' own. What differs is only when it holds the lease:

* **Only if no page holds it.** It asks for the lock with ``ifAvailable``: a page that holds
  it is processing, and the Service Worker has nothing to do.
* **Never against a page.** While it holds the lease it looks every :data:`LOOK_MS` at the
  origin's lock requests; one waiting for the lease is a page that opened, and the Service
  Worker lets the lease go to it — it stops claiming at once and its runs finish under their run
  locks (pyjobq/engine/lease.py: a run lock keeps a run from being recovered or doubled), then
  it releases the lock, so there is exactly one processor throughout.
* **Before the browser's limit.** A sync event may run about 3 minutes. At ``budget_ms`` it
  stops claiming; runs still going :data:`GRACE_MS` later are abandoned as interrupted (their
  attempts given back, the jobs pending for the next sync): nothing lost, no attempt spent
  for being cut short. A Service Worker terminated anyway (its run locks go with it) leaves
  its running records to the next holder's recovery, as a crashed tab does.
* **Only what it can run.** It runs ``fetch`` jobs through the app's transport, imported by
  name (``configure(transport="app.transport:send")``). A job of a kind it has no
  reconstructor for is given back at once (interrupted, no attempt spent) and ends the drain:
  it waits for a page, which has the reconstructor — it is never failed as orphaned here.

It returns how many jobs are still due, so the script can make the event fail and the
browser fire it again later (Background Sync's retries).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import js  # type: ignore[import-not-found]
from pyodide.ffi import create_once_callable

from ..config import import_transport, settings
from ..core.errors import Interrupted
from ..core.records import service_worker_source
from ..core.status import TERMINAL, Status
from ..engine.scheduler import Scheduler
from ..executor.side import ExecutorSide
from ..executor.wiring import in_process
from ..memory import LoopClock
from ..service_worker import ServiceWorkerConfig
from .idb import IndexedDBStore
from .ports import BroadcastChannelPort, WebLocks, js_object

log = logging.getLogger("pyjobq")

#: How often the holder looks for a page waiting for the lease, and whether it is done.
LOOK_MS = 250.0
#: How long runs may go on after the drain stopped claiming before they are abandoned.
GRACE_MS = 20_000.0


class ServiceWorkerLease:
    """The lease as the Service Worker holds it: taken before the scheduler starts
    (``ifAvailable``), revoked when a page asks for it, when the budget ends or when the drain
    is done. Once revoked it is never held again by this drain."""

    def __init__(self) -> None:
        self.revoked = False
        self._on_revoked: Callable[[], None] | None = None
        self._never: asyncio.Future[None] = asyncio.get_event_loop().create_future()

    async def hold(self, callback: Callable[[], Awaitable[None]],
                   on_revoked: Callable[[], None]) -> bool:
        if self.revoked:
            await asyncio.shield(self._never)  # the drain stops this scheduler
            return False
        self._on_revoked = on_revoked
        try:
            await callback()
        finally:
            self._on_revoked = None
        return not self.revoked

    def revoke(self) -> None:
        if not self.revoked:
            self.revoked = True
            if self._on_revoked is not None:
                self._on_revoked()


async def take_if_free(lock_name: str) -> Callable[[], None] | None:
    """Hold the Web Lock ``lock_name`` if no one holds or waits for it; the function that lets
    it go, or None."""
    loop = asyncio.get_event_loop()
    got: asyncio.Future[Callable[[], None] | None] = loop.create_future()

    def granted(lock: Any) -> Any:
        if lock is None:
            got.set_result(None)
            return None

        def hold(resolve: Any, _reject: Any) -> None:
            got.set_result(lambda: resolve())

        return js.Promise.new(create_once_callable(hold))

    js.navigator.locks.request(lock_name, js_object({"ifAvailable": True}),
                               create_once_callable(granted))
    return await got


async def page_waits(lock_name: str) -> bool:
    """Whether some context of the origin waits for the lock ``lock_name`` (a page that opened)."""
    state = await js.navigator.locks.query()
    return any(getattr(request, "name", None) == lock_name for request in state.pending)


def _not_here(name: str) -> Callable[[Any], Callable[[Any], Awaitable[Any]]]:
    """The factory of a kind this Service Worker cannot run: its run is given back."""
    def factory(_params: Any) -> Callable[[Any], Awaitable[Any]]:
        async def run(_signal: Any) -> Any:
            raise Interrupted(f"the Service Worker has no reconstructor {name!r}: left for a page")
        return run
    return factory


@dataclass
class DrainReport:
    """How a drain went (``self.pyjobqDrains`` in the Service Worker's console lists them)."""

    #: Why it stopped: ``lease_held`` (a page processes), ``done`` (nothing due), ``page`` (a
    #: page asked for the lease), ``budget`` (the event's time was spent), ``refused`` (a job
    #: of a kind only pages can run), ``upgraded`` (another tab upgraded the database).
    stopped: str = "done"
    #: Jobs that reached an end (done, failed, cancelled) during the drain.
    ended: int = 0
    #: Jobs due and still pending when it stopped: the sync is fired again later.
    left: int = 0

    def to_json(self) -> str:
        return json.dumps({"stopped": self.stopped, "ended": self.ended, "left": self.left})


async def drain(config_json: str, budget_ms: float) -> str:
    """Run the due jobs of the queue ``config_json`` names, if no page processes it.

    Returns the :class:`DrainReport` as JSON (``left``: jobs due and still pending).
    """
    config = ServiceWorkerConfig.from_json(config_json)
    report = DrainReport()
    release = await take_if_free(config.lock_name)
    if release is None:
        log.info("pyjobq service worker: a page holds the processor lease; nothing to do")
        report.stopped = "lease_held"
        return report.to_json()
    try:
        await _drain(config, budget_ms, report)
    finally:
        release()
    return report.to_json()


async def _drain(config: ServiceWorkerConfig, budget_ms: float, report: DrainReport) -> None:
    clock = LoopClock()
    started = clock.now()
    lease = ServiceWorkerLease()
    source = service_worker_source()

    def upgraded(_reason: str) -> None:
        report.stopped = "upgraded"
        lease.revoke()

    store = IndexedDBStore(config.db_name, on_upgraded=upgraded)
    engine = in_process(
        store=store, source=source, clock=clock, lock_name=config.lock_name, locks=WebLocks(),
        channel=BroadcastChannelPort(config.channel_name), yields=config.yields,
        handshake_timeout_ms=config.handshake_timeout_ms,
        is_online=lambda: bool(js.navigator.onLine), lease=lease)
    refused: list[str] = []

    def unknown_kind(name: str) -> Callable[[Any], Any]:
        refused.append(name)
        if not lease.revoked:
            report.stopped = "refused"
        lease.revoke()  # claims nothing more: the pages have the reconstructors
        return _not_here(name)

    side = ExecutorSide(link=engine.link, engine=engine.scheduler,
                        channel=BroadcastChannelPort(config.channel_name), source=source,
                        transport=import_transport(config.transport), locks=WebLocks(),
                        yields=config.yields, reconstructors=_tasks(config),
                        unknown_kind=unknown_kind)
    scheduler = engine.scheduler

    def heard(update: Any) -> None:
        if update.get("status") in TERMINAL and not update.get("deleted"):
            report.ended += 1

    side.on_update(heard)
    try:
        await _hold(lease, scheduler, store, config.lock_name, clock, started + budget_ms, report)
        ending = clock.now()
        while scheduler.in_flight and clock.now() - ending < GRACE_MS:
            await asyncio.sleep(LOOK_MS / 1000)
    finally:
        scheduler.stop()
        side.stop()
    # The abandoned runs' answers (interrupted) are stored before the lock goes.
    ending = clock.now()
    while scheduler.flights.ending and clock.now() - ending < GRACE_MS:
        await asyncio.sleep(LOOK_MS / 1000)
    if refused:
        log.warning("pyjobq service worker: left jobs of kind(s) %s for a page",
                    ", ".join(sorted(set(refused))))
    report.left = len(await _due(store, clock.now()))


def _tasks(config: ServiceWorkerConfig) -> dict[str, Callable[[Any], Any]]:
    """The reconstructors of the page's persistent tasks and periodic functions whose modules
    import here (declaring one registers it in the settings: pyjobq.tasks, pyjobq.scheduling);
    one that does not import waits for a page."""
    for module in sorted(set(config.tasks.values())):
        try:
            importlib.import_module(module)
        except Exception:
            log.warning("pyjobq service worker: importing %s failed; its tasks wait for a page",
                        module, exc_info=True)
    registered = settings().reconstructors
    return {name: registered[name] for name in config.tasks if name in registered}


async def _hold(lease: ServiceWorkerLease, scheduler: Scheduler, store: IndexedDBStore,
                lock_name: str, clock: LoopClock, budget_end: float, report: DrainReport) -> None:
    """Hold the lease until a page asks for it, the budget ends, or nothing is due and running."""
    while not lease.revoked:
        await asyncio.sleep(LOOK_MS / 1000)
        if await page_waits(lock_name):
            log.info("pyjobq service worker: a page asks for the lease; letting it go")
            report.stopped = "page"
            lease.revoke()
        elif clock.now() >= budget_end:
            log.info("pyjobq service worker: the budget is spent; stopping")
            report.stopped = "budget"
            lease.revoke()
        elif not scheduler.in_flight and not await _due(store, clock.now()):
            lease.revoke()  # done for now


async def _due(store: IndexedDBStore, now: float) -> list[Any]:
    """The pending jobs due by ``now``."""
    return [r for r in await store.by_status(Status.PENDING.value)
            if (r.next_retry_at or 0) <= now]
