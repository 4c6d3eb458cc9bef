"""The executor side in a browser: start the scheduler worker and wire the ports.

Works on a page's main thread and inside a worker (PyScript, JupyterLite's
kernel): it needs ``Worker``, ``BroadcastChannel`` and ``Blob``, never
``window`` or the DOM. The worker is a Blob-URL module worker (Pyodide refuses
classic workers); a Blob URL cannot carry ``?query``, so the names travel in
its ``#hash``.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import js  # type: ignore[import-not-found]

from ..config import Settings
from ..executor import ExecutorSide
from pyodide.ffi import to_js  # type: ignore[import-not-found]

from . import proxies
from . import lifecycle
from .ports import BroadcastChannelPort, PortLink, WebLocks, js_object

_worker_blob_url: str | None = None


def index_url() -> str:
    """Where this page's Pyodide came from; the worker loads the same distribution."""
    try:
        import pyodide_js  # type: ignore[import-not-found]

        url = str(pyodide_js._api.config.indexURL)
        if url:
            return url if url.endswith("/") else url + "/"
    except Exception:
        pass
    return str(js.URL.new("/pyodide/", js.location.href).href)


def worker_url(settings: Settings, source: str) -> str:
    global _worker_blob_url
    if _worker_blob_url is None:
        code = resources.files("pyjobq.browser").joinpath("worker.mjs").read_text()
        blob = js.Blob.new(to_js([code]), js_object({"type": "text/javascript"}))
        _worker_blob_url = str(js.URL.createObjectURL(blob))
    return _worker_blob_url + "#" + urlencode({
        "db": settings.db_name,
        "lock": settings.lock_name,
        "channel": settings.channel_name,
        "yields": json.dumps(dict(settings.yields)),
        "source": source,
        "handshake_ms": str(settings.handshake_timeout_ms),
        "index": index_url(),
        # A page can be frozen: it holds the processor lease for its worker (pyjobq/lease.py).
        "lease": "page" if lifecycle.has_document() else "worker",
    })


def start_browser(settings: Settings, source: str) -> ExecutorSide:
    worker: Any = js.Worker.new(worker_url(settings, source), js_object({"type": "module"}))
    side = ExecutorSide(
        link=PortLink(worker),
        channel=BroadcastChannelPort(settings.channel_name),
        source=source,
        reconstructors=settings.reconstructors,
        transport=settings.transport,
        locks=WebLocks(),
        yields=settings.yields,
    )
    side.worker = worker  # type: ignore[attr-defined]
    if lifecycle.has_document():
        side.unhold_lease = lifecycle.hold_lease_on_page(  # type: ignore[attr-defined]
            side, side._link, settings.lock_name)  # type: ignore[arg-type]
    # Chromium does not always fire `online` inside a dedicated worker when the page's
    # network comes back (seen under DevTools' offline emulation); the page's own event
    # is forwarded so the scheduler runs jobs that were waiting out the disconnection.
    side.unlisten_online = proxies.listen(  # type: ignore[attr-defined]
        js.globalThis, "online", lambda _event: side.back_online())
    return side
