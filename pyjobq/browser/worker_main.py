"""Entry point of the scheduler worker: build the browser ports and start the scheduler."""

from __future__ import annotations

import json
import logging
from typing import Any

import js  # type: ignore[import-not-found]
from pyodide.ffi import create_proxy  # type: ignore[import-not-found]

from ..memory import LoopClock
from ..scheduler import Scheduler
from .idb import IndexedDBStore
from .ports import BroadcastChannelPort, PortLink, WebLocks

log = logging.getLogger("pyjobq")

#: The running scheduler, for debugging from the worker's console.
scheduler: Scheduler | None = None
_online_proxy: Any = None


def start(params_json: str, early: Any) -> None:
    """Called once by ``worker.mjs`` with the URL's parameters and the buffered messages."""
    global scheduler, _online_proxy
    params = json.loads(params_json)
    link = PortLink(js.self)
    scheduler = Scheduler(
        store=IndexedDBStore(params["db"]),
        locks=WebLocks(),
        channel=BroadcastChannelPort(params["channel"]),
        link=link,
        clock=LoopClock(),
        lock_name=params["lock"],
        source=params["source"],
        yields=json.loads(params.get("yields") or "{}"),
        handshake_timeout_ms=float(params.get("handshake_ms") or 10_000),
        is_online=lambda: bool(js.navigator.onLine),
    )
    scheduler.start()
    _online_proxy = create_proxy(lambda _event: scheduler.back_online() if scheduler else None)
    js.self.addEventListener("online", _online_proxy)
    for data in early:
        link.deliver(data)
    early.destroy() if hasattr(early, "destroy") else None
