"""The page's part of the Service Worker drain (``configure(service_worker=...)``): :func:`start`.

Theory of operation
-------------------
Runs on a page's main thread only (a Service Worker is registered from a document; a worker
host — a notebook kernel, a PyScript worker — says so once and goes on without one). When the
page's queue starts, it leaves in Cache Storage what the Service Worker needs to drain the
queue with no page open (:mod:`pyjobq.service_worker.worker`), then registers the script:

* ``config.json`` — the queue's names, ``yields``, the handshake bound and the transport's
  import path (:class:`pyjobq.service_worker.worker.ServiceWorkerConfig`);
* ``bundle.zip`` — the pyjobq files this page imported and the transport's top-level package,
  so the Service Worker runs the page's own pyjobq and the page's own transport.

Each is written whole with one ``cache.put`` (a Service Worker reads either the old or the
new one, never half of one). Then, whenever a persistent job of this queue is stored pending
— filed, or waiting out a failure offline — the page asks for a sync
(``registration.sync.register("pyjobq:<db>")``, at most once a second: the browser keeps one
registration per tag), which the browser fires in the Service Worker once it is online, open
tabs or not. Where Background Sync is missing or refused, the page says so once on the console;
the Service Worker then drains each time it starts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import js  # type: ignore[import-not-found]
from pyodide.ffi import to_js

from .. import config
from ..browser import lifecycle
from ..browser.ports import js_object
from ..config import Settings
from ..core.status import Status
from ..executor.side import ExecutorSide
from ..handle import JobUpdate
from ..loop import TaskSet
from . import CACHE, bundle, cache_path, config_json, sync_tag

log = logging.getLogger("pyjobq")

#: The least time between two sync requests of one page.
SYNC_EVERY_MS = 1_000.0

#: How long the page waits for the browser to answer a registration before it says so (WebKit
#: never answers one asked from Python that fails: docs/decisions.md#the-service-workers-set-up).
REGISTER_WITHIN_S = 30.0

_tasks = TaskSet(log, "pyjobq: the Service Worker's set-up failed")


class ServiceWorkerLink:
    """The page's registration of pyjobq's Service Worker and its sync requests."""

    def __init__(self, settings: Settings, side: ExecutorSide, url: str,
                 pyjobq_files: Callable[[], bytes]) -> None:
        self._settings = settings
        self._url = url
        self._pyjobq_files = pyjobq_files
        self._registration: Any = None
        self._last_sync = -SYNC_EVERY_MS
        self._sync_later: asyncio.TimerHandle | None = None
        self._refused_said = False
        self._unsubscribe: Callable[[], None] = side.on_update(self._on_update)

    async def set_up(self) -> None:
        """Leave the config and the files in Cache Storage, then register the script."""
        settings = self._settings
        assert settings.transport_path is not None and settings.service_worker is not None
        cache = await js.caches.open(CACHE)
        origin = str(js.location.origin)
        # Read now: tasks declared since the queue started are in the settings too.
        current = config.settings()
        files = to_js(bundle(self._pyjobq_files(), settings.transport_path,
                             current.reconstructor_modules.values()))
        await cache.put(origin + cache_path(settings.db_name, "bundle.zip"),
                        js.Response.new(files, js_object({"headers": {
                            "Content-Type": "application/zip"}})))
        await cache.put(origin + cache_path(settings.db_name, "config.json"),
                        js.Response.new(config_json(current), js_object({"headers": {
                            "Content-Type": "application/json"}})))
        # No sync asked for here: this page is about to process the queue itself, and a
        # Service Worker woken now could only hold the lease up while the page's worker boots.
        # The next job stored pending asks for one.
        registering = asyncio.ensure_future(js.navigator.serviceWorker.register(
            self._url, js_object({"type": "module"})))
        try:
            self._registration = await asyncio.wait_for(asyncio.shield(registering),
                                                        REGISTER_WITHIN_S)
        except TimeoutError:
            self._say_unregistered(f"the browser has not answered within {REGISTER_WITHIN_S:g} s")
            try:  # a registration that lands late is used all the same
                self._registration = await registering
            except Exception:  # already said
                pass
        except Exception as exc:  # no module Service Workers here, or the script failed
            self._say_unregistered(str(exc))

    def _say_unregistered(self, why: str) -> None:
        text = (f"pyjobq: the Service Worker {self._url} could not be registered as a module "
                f"Service Worker ({why}); open tabs send the stored jobs as always, and none "
                "are sent while every tab is closed")
        log.warning("%s", text)
        js.console.warn(text)

    def _on_update(self, update: JobUpdate) -> None:
        if update.get("volatile") or update.get("deleted"):
            return
        if update.get("status") != Status.PENDING:
            return
        self.request_sync()

    def request_sync(self) -> None:
        """Ask for a sync soon: now, or once :data:`SYNC_EVERY_MS` has passed since the last."""
        if self._registration is None:
            return
        loop = asyncio.get_event_loop()
        now = loop.time() * 1000
        if now - self._last_sync < SYNC_EVERY_MS:
            if self._sync_later is None:
                self._sync_later = loop.call_later(
                    (SYNC_EVERY_MS - (now - self._last_sync)) / 1000, self._sync_now)
            return
        self._sync_now()

    def _sync_now(self) -> None:
        self._sync_later = None
        self._last_sync = asyncio.get_event_loop().time() * 1000
        _tasks.spawn(self._register_sync())

    async def _register_sync(self) -> None:
        sync = getattr(self._registration, "sync", None)
        if sync is None:
            self._say_refused("this browser has no Background Sync")
            return
        try:
            await sync.register(sync_tag(self._settings.db_name))
        except Exception as exc:  # permission denied (DOMException NotAllowedError)
            self._say_refused(str(exc))

    def _say_refused(self, why: str) -> None:
        if not self._refused_said:
            self._refused_said = True
            text = (f"pyjobq: the Service Worker cannot be woken by Background Sync ({why}); "
                    "it sends the stored jobs each time it starts instead, and open tabs send "
                    "them as always")
            log.info("%s", text)
            js.console.info(text)

    def close(self) -> None:
        self._unsubscribe()
        if self._sync_later is not None:
            self._sync_later.cancel()


def start(settings: Settings, side: ExecutorSide, url: str,
          pyjobq_files: Callable[[], bytes]) -> ServiceWorkerLink | None:
    """Set the Service Worker up for ``settings.service_worker`` (its absolute ``url``), or say
    why it cannot be. ``pyjobq_files``: the zip of the pyjobq this page imported."""
    if settings.service_worker is None:
        return None
    why = None
    if not lifecycle.has_document() or not hasattr(js.navigator, "serviceWorker"):
        why = ("a Service Worker is registered from a page; this queue runs in a worker "
               "(a notebook kernel, PyScript's worker): configure service_worker on a page")
    elif settings.transport_path is None:
        why = ("the Service Worker imports the transport by name: configure(transport="
               "'module:function'), with the transport in a module the page imports")
    if why is not None:
        log.warning("pyjobq: service_worker=%r is not used: %s", settings.service_worker, why)
        js.console.warn(f"pyjobq: service_worker={settings.service_worker!r} is not used: {why}")
        return None
    link = ServiceWorkerLink(settings, side, url, pyjobq_files)
    _tasks.spawn(link.set_up())
    return link

