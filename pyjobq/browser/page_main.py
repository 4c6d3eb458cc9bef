"""The executor side in a browser: start the scheduler worker and wire the ports.

Theory of operation
-------------------
Runs on the page only — a page's main thread, or a worker host (PyScript's ``worker``,
JupyterLite's kernel) — never in the scheduler worker it starts, whose own start is
:mod:`pyjobq.browser.worker_main`. It needs ``Worker``, ``BroadcastChannel`` and ``Blob``,
never ``window`` or the DOM.

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

**A tab that cannot process never holds the lease.** The worker is a Blob-URL module worker
(Pyodide refuses classic workers; a Blob URL cannot carry ``?query``, so the names travel in
its ``#hash``), or a served copy of its script (``configure(worker_url=...)``, for a CSP that
forbids ``blob:``). It fetches the distribution's files as bytes first, and the page gets in
line for the processor lease only once it holds them (``worker_fetched``), so a tab that
takes the lease over while offline boots from what it fetched while waiting. A boot that
fails or goes ``worker_start_timeout_ms`` without a step is handled by
:class:`pyjobq.executor.boot.Boot`: the page lets the lease go at once, and either ends this worker
and starts a new one later (offline, a stall, a dropped download: on ``online`` and on the
backoff ladder) — its jobs stay pending, its requests answered by its own scheduler — or,
when the failure is permanent (a CSP, a worker script that throws, no Pyodide where the page
says), fails every persistent request and ``done`` with :class:`~pyjobq.WorkerUnavailable`
carrying the worker's message and what to do. Either message goes to the console, whatever
the app did with Python logging.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import zipfile
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlencode

import js  # type: ignore[import-not-found]
from pyodide.ffi import JsException, to_js

from .. import loop as tasks
from ..config import Settings
from ..core.boot import BootFailure
from ..core.codes import Code
from ..core.errors import WorkerUnavailable
from ..core.ports import Clock, Link, Message, Unsubscribe
from ..engine.lease import lease_channel_name, watch_in_line
from ..executor.boot import Boot
from ..executor.page import Page, PagePorts, assemble_page, follow_boot
from ..executor.side import ExecutorSide
from ..memory import LoopClock
from . import lifecycle, proxies, worker_script
from .idb import IndexedDBStore
from .ports import BroadcastChannelPort, PortLink, WebLocks, js_object
from .storage import BrowserStorage

_worker_blob_url: str | None = None
_bundle: bytes | None = None
_record: str | None = None


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


def absolute(url: str) -> str:
    """``url`` resolved against this context's location (a Blob-URL worker host, such as
    PyScript's, can only resolve a path against its origin)."""
    try:
        return str(js.URL.new(url, js.location.href).href)
    except Exception:
        return str(js.URL.new(url, js.location.origin).href)


def _folder(url: Any) -> str | None:
    if not isinstance(url, str) or not url:
        return None
    return url if url.endswith("/") else url + "/"


def distribution(settings: Settings) -> tuple[str, str | None, str | None]:
    """``(index_url, lockfile_json, lockfile_base_url)`` for the worker's Pyodide.

    Raises:
        WorkerUnavailable: nothing says where this page's Pyodide came from.
    """
    import pyodide_js

    lock_json = base = None
    try:
        lock_json = str(js.JSON.stringify(pyodide_js.lockfile))
        base = _folder(pyodide_js.lockfileBaseUrl)
    except Exception:
        pass  # an older Pyodide: the worker reads the lock from the index URL
    index = absolute(settings.pyodide_url) if settings.pyodide_url else page_index_url() or base
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
            dist = _installed()
            if dist is not None:  # None: imported from a source tree, the files are what counts
                info = f"pyjobq-{dist.version}.dist-info"
                archive.writestr(f"{info}/METADATA", dist.read_text("METADATA") or "")
                archive.writestr(f"{info}/INSTALLER", "pyjobq-worker\n")
        _bundle = buffer.getvalue()
    return _bundle


def record_digest() -> str:
    """The sha256 of the installed pyjobq's ``RECORD`` (every file with its own sha256), or ""
    for pyjobq imported from a source tree: a preloaded worker runs the pyjobq it installed
    itself only when its digest is this one (``worker.mjs``)."""
    global _record
    if _record is None:
        text = ""
        dist = _installed()
        try:
            imported = Path(str(resources.files("pyjobq").joinpath("__init__.py"))).resolve()
            # Only when the pyjobq this page imported is that distribution's (not a source tree
            # on sys.path ahead of an installed wheel): else the page sends its own files.
            if dist is not None and \
                    Path(str(dist.locate_file("pyjobq/__init__.py"))).resolve() == imported:
                text = dist.read_text("RECORD") or ""
        except (OSError, TypeError):
            text = ""
        _record = hashlib.sha256(text.encode()).hexdigest() if text else ""
    return _record


def _installed() -> metadata.Distribution | None:
    """The installed pyjobq distribution, or None for pyjobq imported from a source tree."""
    try:
        return metadata.distribution("pyjobq")
    except metadata.PackageNotFoundError:
        return None


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
        base = absolute(settings.worker_url).split("#", 1)[0]
    else:
        if _worker_blob_url is None:
            code = worker_script.source()
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
        "keep_done_ms": str(settings.mode.retention_ms),
        "keep_failed_ms": "" if settings.mode.failed_retention_ms is None
        else str(settings.mode.failed_retention_ms),
        "index": index,
        # Another distribution than the page's: the worker fetches its lock with its files.
        "own_lock": "1" if settings.pyodide_url else "",
        # A page can be frozen: it holds the processor lease for its worker
        # (pyjobq/engine/lease.py).
        "lease": "page" if lifecycle.has_document() else "worker",
    }
    if settings.worker_packages is not None:
        # A wheel's URL is resolved here: a Blob-URL worker cannot resolve a path itself.
        params["packages"] = json.dumps([
            absolute(p) if "/" in p or p.endswith(".whl") else p for p in settings.worker_packages])
    return base + "#" + urlencode(params)


def console_error(error: WorkerUnavailable) -> None:
    """The worker's failure reaches DevTools' console even when no Python logging is set up."""
    try:
        js.console.error(str(error))
    except Exception:
        pass


class _NoWorker:
    """The link of a page whose worker could not even be constructed: nothing answers."""

    def send(self, message: Message) -> None:
        pass

    def subscribe(self, callback: Callable[[Message], None]) -> Unsubscribe:
        return lambda: None


def _unavailable(settings: Settings, source: str, error: WorkerUnavailable) -> ExecutorSide:
    """An executor side with no worker at all: persistent calls raise ``error``, volatile run."""
    side = _page(settings, source, _NoWorker()).side
    side.on_unavailable = console_error  # no worker, so never in line for the lease
    side.scheduler_unavailable(error)
    return side


def _page(settings: Settings, source: str, link: Link) -> Page:
    """The page's queue on the browser's ports: the worker behind ``link``, and this page's own
    request scheduler on the same IndexedDB adapter as the worker's
    (:func:`pyjobq.executor.page.assemble_page`)."""
    page: Page | None = None

    def upgraded(reason: str) -> None:
        if page is not None:
            page.requests.stop()
            page.side.scheduler_unavailable(WorkerUnavailable(
                f"persistent jobs stopped on this page: {reason}", code=Code.WORKER_STOPPED,
                worker_message=reason))

    store = IndexedDBStore(settings.db_name, on_upgraded=upgraded)
    page = assemble_page(PagePorts(
        link=link, store=store, schedules=store,
        channel=BroadcastChannelPort(settings.channel_name),
        # Its own channel object: the worker, in this tab, hears its news there too.
        requests_channel=BroadcastChannelPort(settings.channel_name),
        locks=WebLocks(), clock=LoopClock(),
        # read when an attempt fails: the page's reading, not the worker's
        is_online=lambda: bool(js.navigator.onLine),
        # One Python context, the page's: its messages are handed over as made, no JSON copy
        # of each (a burst's enqueue was one dumps and one loads of every job), as the
        # volatile engine's are.
        copy=False), settings, source)
    return page


class _StartWatch:
    """Turns the browser's signs that a worker's script will never run into one failure:
    a ``securitypolicyviolation`` naming its URL (the page's CSP refused it: the only event
    that says so) or an ``error`` event before ``ready`` (blocked, missing, or it threw).
    Listens from before the worker is constructed until it says ``ready`` or is ended."""

    def __init__(self, url: str, on_failure: Callable[[str, bool], None]) -> None:
        self._url = url.split("#", 1)[0]
        self._on_failure = on_failure
        self._attached = False
        self._early: tuple[str, bool] | None = None
        self._unlisten = [proxies.listen(js.globalThis, "securitypolicyviolation",
                                         self._on_violation)]

    def attach(self, worker: Any, link: PortLink) -> None:
        self._attached = True
        self._unlisten.append(proxies.listen(worker, "error", self._on_error))
        self._unlisten.append(link.subscribe(self._on_message))
        if self._early is not None:
            self._fail(*self._early)

    def _on_message(self, data: Any) -> None:
        if isinstance(data, dict) and data.get("type") in ("ready", "worker_error"):
            self.close()

    def _on_violation(self, event: Any) -> None:
        blocked = str(getattr(event, "blockedURI", "") or "")
        if not blocked or not (self._url.startswith(blocked) or blocked == "blob"):
            return
        self._fail(
            f"the page's Content Security Policy refused the worker script {blocked} "
            f"({getattr(event, 'effectiveDirective', '')}: "
            f"\"{getattr(event, 'originalPolicy', '')}\")", True)

    def _on_error(self, event: Any) -> None:
        # The browser gives no details for a script it refused to load; a CSP violation, if
        # that is why, is reported by its own event, which may come a moment later.
        detail = str(getattr(event, "message", "") or "") or (
            "the worker script failed to load or raised before it could report why "
            "(the browser gives no details: see the console and the Network panel)")
        asyncio.get_event_loop().call_later(0.2, lambda: self._fail(detail, False))

    def _fail(self, message: str, refused: bool) -> None:
        if not self._attached:
            self._early = self._early or (message, refused)
            return
        if self._unlisten:  # closed: this worker was ended, or it said ready
            self.close()
            self._on_failure(message, refused)

    def close(self) -> None:
        for unlisten in self._unlisten:
            unlisten()
        self._unlisten.clear()


class _BrowserWorker:
    """The browser's part of the worker's boot (:class:`pyjobq.executor.boot.WorkerStart`): one
    scheduler worker at a time behind the page's link, and — on a page — the lease it holds
    for it, asked for once the worker holds its files."""

    def __init__(self, settings: Settings, url: str, side: ExecutorSide, link: PortLink,
                 boot_message: Callable[[], tuple[Any, Any]]) -> None:
        self._settings = settings
        self._url = url
        self._side = side
        self._link = link
        self._boot_message = boot_message
        self._on_page = lifecycle.has_document()
        #: The scheduler's Worker now (a new one after each failed boot); None once ended.
        self.worker: Any = None
        self._watch: _StartWatch | None = None
        self._unhold: Callable[[], None] | None = None
        self._unwatch: Callable[[], None] | None = None  # a worker host's watch while in line
        #: Set once the boot follows this worker.
        self.boot: Boot | None = None

    def adopt(self, worker: Any, watch: _StartWatch) -> None:
        """Take ``worker`` (just constructed, watched by ``watch``) as the scheduler's worker."""
        self.worker, self._watch = worker, watch
        self._link.retarget(worker)
        watch.attach(worker, self._link)
        if not self._on_page:
            self._post_boot()  # a worker host's worker takes the lease itself, then boots

    def _watch_failed(self, message: str, refused: bool) -> None:
        if self.boot is not None:
            self.boot.failed(BootFailure(stage="script", message=message, online=self.is_online(),
                                         refused=refused))

    def watch(self) -> _StartWatch:
        return _StartWatch(self._url, self._watch_failed)

    def _post_boot(self) -> None:
        """Let the worker start Pyodide: it holds the lease now (or takes it itself)."""
        if self.worker is not None:
            message, transfer = self._boot_message()
            self.worker.postMessage(message, transfer)

    # ------------------------------------------------------------ WorkerStart

    def start(self) -> None:
        watch = self.watch()
        try:
            worker = js.Worker.new(self._url, js_object({"type": "module"}))
        except JsException as exc:
            watch.close()
            if self.boot is not None:
                self.boot.failed(BootFailure(stage="script", message=str(exc),
                                             online=self.is_online()))
            return
        self.adopt(worker, watch)

    def end(self) -> None:
        """End the worker, whatever it was doing (it never booted: it has no run to finish)."""
        self.let_lease_go()
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.terminate()

    def get_in_line(self) -> None:
        if self._on_page and self._unhold is None:
            # The page holds the lease for its worker (it can be frozen) and boots the worker's
            # Pyodide only once it has it: a tab waiting in line costs no second Pyodide.
            self._unhold = lifecycle.hold_lease_on_page(
                self._side, self._link, self._settings.lock_name,
                on_first_grant=self._post_boot)
        elif not self._on_page and self._unwatch is None:
            # A worker host's bootstrap waits in line with no Pyodide to ping the holder: this
            # side watches it, and tells the bootstrap to take the lock from a silent one.
            channel = BroadcastChannelPort(lease_channel_name(self._settings.lock_name))
            stop = watch_in_line(self._link, channel, LoopClock(), self._side.source)

            def unwatch() -> None:
                stop()
                channel.close()

            self._unwatch = unwatch

    def let_lease_go(self) -> None:
        unwatch, self._unwatch = self._unwatch, None
        if unwatch is not None:
            unwatch()
        unhold, self._unhold = self._unhold, None
        if unhold is not None:
            unhold()  # and the side's lease_holder is None again (lifecycle.hold_lease_on_page)
        # In a worker host the worker holds the lock: it lets go as its boot fails, or as it ends.

    def is_online(self) -> bool:
        return bool(js.navigator.onLine)

    def warn(self, text: str) -> None:
        try:
            js.console.warn(text)
        except Exception:
            pass


#: How long a preloaded worker may take to answer the page's ``pyjobq_attach``: its script was
#: asked for as the page began loading, seconds ago, so only a worker that will never run
#: (a wrong path in the preload line) is this late.
ATTACH_MS = 5_000.0


def take_preloaded(settings: Settings) -> Any:
    """The worker a plain page's preload line started (``globalThis.pyjobqWorker``), taken once;
    None where there is none, or on a worker host (a notebook kernel runs no preload line)."""
    if not lifecycle.has_document():
        return None
    worker = getattr(js.globalThis, "pyjobqWorker", None)
    if worker is None or not hasattr(worker, "postMessage"):
        return None
    js.globalThis.pyjobqWorker = None  # a second queue (after stop()) starts its own
    if settings.worker_packages is not None:
        # It installs the distribution's pyjobq; this page names its own packages (a
        # self-hosted wheel), which loadPackage would not load over it.
        worker.terminate()
        return None
    return worker


class Preloaded:
    """Adopts a preloaded worker once it says it loads this page's distribution.

    The preload line starts ``pyjobq-worker.mjs#preload&index=...`` before the page's Pyodide,
    so the worker's own Pyodide loads beside it (``worker.mjs``). It says nothing until the page
    attaches; its first word is ``worker_attached`` with the index it loads from. Another
    distribution than the page's (a preload line left behind by an upgrade), or no word within
    :data:`ATTACH_MS` (a preload path that does not exist): the boot starts a worker of its own
    in its place, and the console says why.
    """

    def __init__(self, link: PortLink, boot: Boot, index: str, clock: Clock) -> None:
        self._boot = boot
        self._index = index
        #: The digest of the pyjobq the worker installed itself (``worker_preinstalled``), if any.
        self.record: str | None = None
        self._unsubscribe = link.subscribe(self._on_message)
        self._deadline = clock.call_later(ATTACH_MS, lambda: self._replace(
            f"the preloaded worker (globalThis.pyjobqWorker) did not answer within "
            f"{ATTACH_MS / 1000:g} s: check the path in the preload line"))

    def attach(self, worker: Any) -> None:
        worker.postMessage(js_object({"pyjobq_attach": 1}))

    def _on_message(self, data: Any) -> None:
        if not isinstance(data, dict):
            return
        if data.get("type") == "worker_preinstalled" and isinstance(data.get("record"), str):
            self.record = data["record"]
            self._unsubscribe()
        if data.get("type") != "worker_attached":
            return
        self._deadline.cancel()
        if data.get("index") != self._index:
            self._replace(
                f"the preloaded worker loads Pyodide from {data.get('index')!r} but this page "
                f"loaded it from {self._index!r}: make the preload line's index= the page's")

    def _done(self) -> None:
        self._deadline.cancel()
        self._unsubscribe()

    def _replace(self, reason: str) -> None:
        self._done()
        self._boot.replace(reason)


#: The one proxy of :func:`~pyjobq.loop.run_soon`, made as this page's first queue
#: starts and kept for the page's life.
_run_soon_proxy: Any = None


def wake_at_end_of_event() -> None:
    """pyjobq's own follow-ups on this page (:func:`~pyjobq.loop.soon`: the volatile
    engine's in-tab messages, the done-callbacks of jobs that just ended) run at the end of the
    event that made them, as a microtask, not in a browser task each behind whatever the page
    queued. The application's own event loop is left as it is."""
    global _run_soon_proxy
    if _run_soon_proxy is None:
        _run_soon_proxy = proxy = proxies.create(tasks.run_soon)
        tasks.use_waker(lambda: js.queueMicrotask(proxy))


#: What starts the page's part of the Service Worker drain once the worker started
#: (:func:`pyjobq.service_worker.page.start`, given by :mod:`pyjobq.hosts`): the settings, the
#: side, the script's absolute URL and the pyjobq bundle's maker; returns what the side keeps.
StartServiceWorker = Callable[[Settings, ExecutorSide, str, Callable[[], bytes]], Any]


def start_browser(settings: Settings, source: str,
                  start_service_worker: StartServiceWorker | None = None) -> ExecutorSide:
    wake_at_end_of_event()
    try:
        index, lock_json, lock_base = distribution(settings)
        url = worker_url(settings, source, index)
    except WorkerUnavailable as exc:
        return _unavailable(settings, source, exc)

    def boot_message() -> tuple[Any, Any]:
        # params: the names and the rest, for a preloaded worker, whose URL carries only its
        # distribution (a Blob-URL worker has them in its own URL already: the same values).
        message: dict[str, Any] = {"pyjobq_boot": 1, "lockfile": lock_json,
                                   "lockfile_base": lock_base, "params": url.split("#", 1)[1],
                                   "record": record_digest()}
        transfer = []
        # No files only for the preloaded worker that said it installed these very ones: a
        # worker started in its place (a retried boot) needs them.
        if settings.worker_packages is None and not (
                preload is not None and start.worker is preloaded
                and preload.record == message["record"] != ""):
            data = to_js(pyjobq_bundle())  # a Uint8Array copy; its buffer moves to the worker
            message["bundle"] = data.buffer
            transfer.append(data.buffer)
        return js_object(message), to_js(transfer)

    watch = _StartWatch(url, lambda message, refused: start._watch_failed(message, refused))
    preloaded = take_preloaded(settings)
    preload: Preloaded | None = None
    try:
        worker: Any = preloaded or js.Worker.new(url, js_object({"type": "module"}))
    except JsException as exc:
        # A worker_url on another origin, or a malformed one, throws right here.
        watch.close()
        return _unavailable(settings, source, WorkerUnavailable.not_started("script", str(exc)))
    link = PortLink(worker)
    page = _page(settings, source, link)
    side = page.side
    start = _BrowserWorker(settings, url, side, link, boot_message)
    boot = start.boot = follow_boot(page, start, settings, console_error)
    start.adopt(worker, watch)
    if preloaded is not None:
        preload = Preloaded(link, boot, index, side.clock)
        preload.attach(worker)

    def online(_event: Any) -> None:
        # Chromium does not always fire `online` inside a dedicated worker when the page's
        # network comes back (seen under DevTools' offline emulation); the page's own event
        # is forwarded so the scheduler runs jobs that were waiting out the disconnection.
        side.back_online()
        boot.online()  # and a worker that could not boot offline is started again now

    side.resources.unlisten_online = proxies.listen(js.globalThis, "online", online)
    side.resources.storage = storage = BrowserStorage(ask=settings.persist_storage)
    storage.start(side)
    if settings.service_worker is not None and start_service_worker is not None:
        side.resources.service_worker = start_service_worker(
            settings, side, absolute(settings.service_worker), pyjobq_bundle)
    return side
