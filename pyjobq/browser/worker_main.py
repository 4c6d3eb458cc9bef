"""Entry point of the scheduler worker: build the browser ports and start the scheduler."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

import js  # type: ignore[import-not-found]

from ..core import messages
from ..core.mode import JOB_QUEUE, RETENTION_MS
from ..core.router import Router
from ..engine.lease import HostLease, LinkLease, lease_channel_name
from ..engine.scheduler import Scheduler
from ..memory import LoopClock
from . import batching, proxies
from .idb import IndexedDBStore
from .ports import BroadcastChannelPort, PortLink, WebLocks, web_grab

log = logging.getLogger("pyjobq")

#: The running scheduler, for debugging from the worker's console.
scheduler: Scheduler | None = None
#: A worker host's lease (None on a page, which holds the lease for this worker).
_host: HostLease | None = None


class ConsoleHandler(logging.Handler):
    """The worker is pyjobq's own context, with no application code to configure logging:
    its warnings and errors go to DevTools' console (the library logger is otherwise silent)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = "pyjobq worker: " + self.format(record)
            if record.levelno >= logging.ERROR:
                js.console.error(text)
            else:
                js.console.warn(text)
        except Exception:  # logging must never take the scheduler down
            self.handleError(record)


_unlisten_online: Callable[[], None] | None = None


def start(params_json: str, early: Any) -> None:
    """Called once by ``worker.mjs`` with the URL's parameters and the buffered messages."""
    global scheduler, _unlisten_online
    if not any(isinstance(h, ConsoleHandler) for h in log.handlers):
        log.addHandler(ConsoleHandler(logging.WARNING))
    params = json.loads(params_json)
    # This Pyodide is pyjobq's own: ready callbacks run together, one browser task per batch
    # (pyjobq/browser/batching.py has why).
    batching.install(asyncio.get_event_loop())
    link = PortLink(js.self)
    # Beside the scheduler on the same link: it logs what is not one of ours.
    link.subscribe(Router("pyjobq worker", {"debug_counts": lambda msg: _debug_counts(link, msg)},
                          quiet=True))
    store = IndexedDBStore(params["db"], on_upgraded=lambda reason: _upgraded(link, reason))
    scheduler = Scheduler(
        store=store,
        schedules=store,
        locks=WebLocks(),
        channel=BroadcastChannelPort(params["channel"]),
        link=link,
        clock=LoopClock(),
        lock_name=params["lock"],
        source=params["source"],
        yields=json.loads(params.get("yields") or "{}"),
        handshake_timeout_ms=float(params.get("handshake_ms") or 10_000),
        mode=JOB_QUEUE.with_retention(float(params.get("keep_done_ms") or RETENTION_MS),
                                      float(params["keep_failed_ms"])
                                      if params.get("keep_failed_ms") else None),
        is_online=lambda: bool(js.navigator.onLine),
        # A page with a document holds the lease for us and lets go when frozen; in a worker
        # host worker.mjs took the lock before loading Pyodide and holds it while this worker
        # lives, unless a tab in line takes it from this worker, silent while frozen
        # (pyjobq/engine/lease.py).
        lease=LinkLease(link) if params.get("lease") == "page" else _host_lease(params),
    )
    scheduler.start()
    _unlisten_online = proxies.listen(
        js.self, "online", lambda _event: scheduler.back_online() if scheduler else None)
    for data in early:
        link.deliver(data)
    early.destroy() if hasattr(early, "destroy") else None


def _host_lease(params: dict[str, str]) -> HostLease:
    """The worker host's lease, taken over from ``worker.mjs``: it holds the lock unless a steal
    took it before Pyodide loaded (``pyjobqLeaseStolen``); ``pyjobq-lease-stolen`` says a steal
    of the bootstrap's lock happened later."""
    global _host
    release = getattr(js.self, "pyjobqReleaseLease", None)
    let_go = (lambda: release()) if release is not None else (lambda: None)
    _host = HostLease(web_grab, params["lock"],
                      BroadcastChannelPort(lease_channel_name(params["lock"])), LoopClock(),
                      params["source"], held=not getattr(js.self, "pyjobqLeaseStolen", False),
                      release_bootstrap=let_go)
    proxies.listen(js.self, "pyjobq-lease-stolen", lambda _event: _host.stolen() if _host else None)
    return _host


def _upgraded(link: PortLink, reason: str) -> None:
    """Another tab upgraded the database: stop processing for good and tell the page why."""
    log.error("pyjobq: the scheduler stopped: %s", reason)
    if scheduler is not None:
        # Ends the pass; the lease goes (the page lets go of it when told, a worker host's
        # bootstrap here), so a tab with the newer code takes over.
        scheduler.stop()
    if _host is not None:
        _host.close()
    link.send(messages.make("stopped", reason=reason))


def _debug_counts(link: PortLink, msg: dict[str, Any]) -> None:
    """Answer ``debug_counts``: this worker's live proxies and listeners (tests, DevTools)."""
    if msg.get("trace"):
        proxies.trace_pyodide_proxies()
    link.send(messages.make("reply", request_id=msg["request_id"], ok=True, value=proxies.counts()))
