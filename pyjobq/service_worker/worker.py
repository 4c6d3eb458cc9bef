"""The queue's drain inside pyjobq's Service Worker, with the browser's ports: :func:`drain`.

Runs only in the Service Worker (``service_worker.mjs`` calls :func:`drain` inside a ``sync``
event's ``waitUntil``), in a Pyodide of its own, with the pyjobq files, the app's transport
package and its tasks' packages that a page left in Cache Storage
(:mod:`pyjobq.service_worker.page`). The drain itself — when it holds the lease, when it stops,
what it runs — is :mod:`pyjobq.service_worker.drain`, on ports: here IndexedDB, ``navigator.locks``
and BroadcastChannel.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable

import js  # type: ignore[import-not-found]

from ..browser.idb import IndexedDBStore
from ..browser.ports import BroadcastChannelPort, WebLocks
from ..config import import_transport, settings
from ..core.records import service_worker_source
from ..engine.lease import ServiceWorkerLease, lease_channel_name
from ..memory import LoopClock
from . import ServiceWorkerConfig
from .drain import DrainPorts, DrainQueue, DrainReport
from .drain import drain as drain_on

log = logging.getLogger("pyjobq")


async def drain(config_json: str, budget_ms: float) -> str:
    """Run the due jobs of the queue ``config_json`` names, if no page processes it.

    Returns the :class:`~pyjobq.service_worker.drain.DrainReport` as JSON (``left``: jobs due and
    still pending)."""
    config = ServiceWorkerConfig.from_json(config_json)
    report = DrainReport()
    lease = ServiceWorkerLease()

    def upgraded(_reason: str) -> None:
        report.stopped = "upgraded"
        lease.revoke()

    ports = DrainPorts(
        store=IndexedDBStore(config.db_name, on_upgraded=upgraded), locks=WebLocks(),
        channel=lambda: BroadcastChannelPort(config.channel_name), clock=LoopClock(),
        is_online=lambda: bool(js.navigator.onLine),
        lease_channel=lambda: BroadcastChannelPort(lease_channel_name(config.lock_name)))
    queue = DrainQueue(
        lock_name=config.lock_name, source=service_worker_source(),
        transport=import_transport(config.transport), reconstructors=_tasks(config),
        yields=config.yields, handshake_timeout_ms=config.handshake_timeout_ms)
    await drain_on(ports, queue, budget_ms, report=report, lease=lease)
    return report.to_json()


def _tasks(config: ServiceWorkerConfig) -> dict[str, Callable[[Any], Any]]:
    """The reconstructors of the page's persistent tasks and periodic functions whose modules
    import here (declaring one registers it in the settings: pyjobq.tasks, pyjobq.tasks.periodic);
    one that does not import waits for a page."""
    for module in sorted(set(config.tasks.values())):
        try:
            importlib.import_module(module)
        except Exception:
            log.warning("pyjobq service worker: importing %s failed; its tasks wait for a page",
                        module, exc_info=True)
    registered = settings().reconstructors
    return {name: registered[name] for name in config.tasks if name in registered}
