"""The executor side in a browser: start the scheduler worker and wire the ports.

Theory of operation
-------------------
Works on a page's main thread and inside a worker (PyScript's ``worker``, JupyterLite's
kernel): it needs ``Worker``, ``BroadcastChannel`` and ``Blob``, never ``window`` or the DOM.

**The worker runs the pyjobq the page runs.** pyjobq reaches a page in many ways —
``loadPackage`` from a lock that lists it, ``micropip.install`` from PyPI or a wheel URL,
PyScript's ``packages``, JupyterLite's piplite — and most distributions' locks do not list it,
so the worker cannot ask its lock for pyjobq. Instead the page hands the worker the very files
it imported (:func:`pyjobq_bundle`, a zip of the package read through ``importlib.resources``)
in the first message, and the worker unpacks them beside its stdlib: same version, same code,
no network, whatever installed it. (micropip records the wheel's URL in the dist-info
``PYODIDE_URL``, but a PyPI or ``emfs:`` install would send the worker back to an index or a
file it cannot reach; the files themselves can always travel.) ``configure(worker_packages=...)``
installs named packages or wheel URLs instead, for a self-hosted wheel.

**Same Pyodide distribution.** The worker loads Pyodide from where the page's came from (any
origin: CDNs send CORS headers), with the page's own lock (public ``pyodide.lockfile`` and
``lockfileBaseUrl``). Pyodide has no public API for the index URL itself, so
:func:`page_index_url` reads it privately — the one private read, tested in
``tests/browser/test_hosts_runtime.py`` so a Pyodide release that moves it fails a test.
``configure(pyodide_url=...)`` overrides it.

**No silent hangs.** The worker is a Blob-URL module worker (Pyodide refuses classic workers;
a Blob URL cannot carry ``?query``, so the names travel in its ``#hash``), or a served copy of
its script (``configure(worker_url=...)``, for a CSP that forbids ``blob:``). If the worker
cannot be constructed, fires ``error`` before it is ready, reports ``worker_error`` (at which
stage), or says nothing within ``worker_start_timeout_ms``, every persistent request and
``done`` fails with :class:`~pyjobq.WorkerUnavailable` carrying the worker's message and what
to do — and that message goes to the console, whatever the app did with Python logging.
"""

from __future__ import annotations

import io
import json
import zipfile
from importlib import metadata, resources
from typing import Any
from urllib.parse import urlencode

import js  # type: ignore[import-not-found]
from pyodide.ffi import JsException, to_js  # type: ignore[import-not-found]

from ..config import Settings
from ..errors import WorkerUnavailable
from ..executor import ExecutorSide
from . import lifecycle, proxies
from .ports import BroadcastChannelPort, PortLink, WebLocks, js_object

_worker_blob_url: str | None = None
_bundle: bytes | None = None


def page_index_url() -> str | None:
    """The folder this page's Pyodide was loaded from (its ``indexURL``), or None.

    PRIVATE READ, isolated here on purpose: Pyodide 314 keeps the index URL only in
    ``pyodide._api.config.indexURL``; its public API has the lock's base URL
    (``lockfileBaseUrl``), which differs when a page passed ``packageBaseUrl`` or
    ``lockFileURL``. tests/browser/test_hosts_runtime.py pins this read.
    """
    try:
        import pyodide_js  # type: ignore[import-not-found]

        url = pyodide_js._api.config.indexURL
    except Exception:
        return None
    return _folder(url)


def _folder(url: Any) -> str | None:
    if not isinstance(url, str) or not url:
        return None
    return url if url.endswith("/") else url + "/"


def distribution(settings: Settings) -> tuple[str, str | None, str | None]:
    """``(index_url, lockfile_json, lockfile_base_url)`` for the worker's Pyodide.

    Raises:
        WorkerUnavailable: nothing says where this page's Pyodide came from.
    """
    import pyodide_js  # type: ignore[import-not-found]

    lock_json = base = None
    try:
        lock_json = str(js.JSON.stringify(pyodide_js.lockfile))
        base = _folder(pyodide_js.lockfileBaseUrl)
    except Exception:
        pass  # an older Pyodide: the worker reads the lock from the index URL
    index = settings.pyodide_url or page_index_url() or base
    if index is None:
        raise WorkerUnavailable.not_started(
            "import", "could not tell where this page's Pyodide distribution was loaded from")
    if settings.pyodide_url:
        lock_json = base = None  # another distribution: its own lock, next to it
    return index, lock_json, base


def pyjobq_bundle() -> bytes:
    """The pyjobq package this page imported, as a zip the worker unpacks (built once)."""
    global _bundle
    if _bundle is None:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
            _add_tree(archive, resources.files("pyjobq"), "pyjobq")
            try:
                dist = metadata.distribution("pyjobq")
                info = f"pyjobq-{dist.version}.dist-info"
                archive.writestr(f"{info}/METADATA", dist.read_text("METADATA") or "")
                archive.writestr(f"{info}/INSTALLER", "pyjobq-worker\n")
            except metadata.PackageNotFoundError:
                pass  # imported from a source tree: the files are what counts
        _bundle = buffer.getvalue()
    return _bundle


def _add_tree(archive: zipfile.ZipFile, folder: Any, prefix: str) -> None:
    for entry in folder.iterdir():
        name = f"{prefix}/{entry.name}"
        if entry.is_dir():
            if entry.name != "__pycache__":
                _add_tree(archive, entry, name)
        elif not entry.name.endswith((".pyc", ".pyo")):
            archive.writestr(name, entry.read_bytes())


def worker_url(settings: Settings, source: str, index: str) -> str:
    global _worker_blob_url
    if settings.worker_url is not None:
        base = str(js.URL.new(settings.worker_url, js.location.href).href).split("#", 1)[0]
    else:
        if _worker_blob_url is None:
            code = resources.files("pyjobq.browser").joinpath("worker.mjs").read_text()
            blob = js.Blob.new(to_js([code]), js_object({"type": "text/javascript"}))
            _worker_blob_url = str(js.URL.createObjectURL(blob))
        base = _worker_blob_url
    params = {
        "db": settings.db_name,
        "lock": settings.lock_name,
        "channel": settings.channel_name,
        "yields": json.dumps(dict(settings.yields)),
        "source": source,
        "handshake_ms": str(settings.handshake_timeout_ms),
        "index": index,
        # A page can be frozen: it holds the processor lease for its worker (pyjobq/lease.py).
        "lease": "page" if lifecycle.has_document() else "worker",
    }
    if settings.worker_packages is not None:
        params["packages"] = json.dumps(list(settings.worker_packages))
    return base + "#" + urlencode(params)


def console_error(error: WorkerUnavailable) -> None:
    """The worker's failure reaches DevTools' console even when no Python logging is set up."""
    try:
        js.console.error(str(error))
    except Exception:
        pass


class _NoWorker:
    """The link of a page whose worker could not even be constructed: nothing answers."""

    def send(self, message: Any) -> None:
        pass

    def subscribe(self, callback: Any) -> Any:
        return lambda: None


def _side(settings: Settings, source: str, link: Any) -> ExecutorSide:
    side = ExecutorSide(
        link=link,
        channel=BroadcastChannelPort(settings.channel_name),
        source=source,
        reconstructors=settings.reconstructors,
        transport=settings.transport,
        locks=WebLocks(),
        yields=settings.yields,
    )
    side.on_unavailable = console_error
    return side


def start_browser(settings: Settings, source: str) -> ExecutorSide:
    try:
        index, lock_json, lock_base = distribution(settings)
        worker: Any = js.Worker.new(worker_url(settings, source, index), js_object({"type": "module"}))
    except (JsException, WorkerUnavailable) as exc:
        # A CSP that forbids the worker's URL throws right here (SecurityError).
        side = _side(settings, source, _NoWorker())
        side.scheduler_unavailable(exc if isinstance(exc, WorkerUnavailable)
                                   else WorkerUnavailable.not_started("script", str(exc)))
        return side
    side = _side(settings, source, PortLink(worker))
    side.worker = worker  # type: ignore[attr-defined]

    def on_error(event: Any) -> None:
        # Before `ready` an error event means the script itself failed (blocked, 404, syntax);
        # the browser gives no details for a script it refused to load.
        message = str(getattr(event, "message", "") or "") or (
            "the worker script failed to load or raised before it could report why "
            "(the browser gives no details: see the console and the Network panel)")
        if side.worker_ready:
            js.console.error("pyjobq worker: " + message)
        else:
            side.scheduler_unavailable(WorkerUnavailable.not_started("script", message))

    side.unlisten_error = proxies.listen(worker, "error", on_error)  # type: ignore[attr-defined]
    side.expect_ready(settings.worker_start_timeout_ms)
    boot: dict[str, Any] = {"pyjobq_boot": 1, "lockfile": lock_json, "lockfile_base": lock_base}
    transfer = []
    if settings.worker_packages is None:
        data = to_js(pyjobq_bundle())  # a Uint8Array copy; its buffer moves to the worker
        boot["bundle"] = data.buffer
        transfer.append(data.buffer)
    worker.postMessage(js_object(boot), to_js(transfer))
    if lifecycle.has_document():
        side.unhold_lease = lifecycle.hold_lease_on_page(  # type: ignore[attr-defined]
            side, side._link, settings.lock_name)  # type: ignore[arg-type]
    # Chromium does not always fire `online` inside a dedicated worker when the page's
    # network comes back (seen under DevTools' offline emulation); the page's own event
    # is forwarded so the scheduler runs jobs that were waiting out the disconnection.
    side.unlisten_online = proxies.listen(  # type: ignore[attr-defined]
        js.globalThis, "online", lambda _event: side.back_online())
    return side
