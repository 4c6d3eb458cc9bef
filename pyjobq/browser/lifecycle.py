"""The page-held processor lease in a browser page: Web Locks and the lifecycle events.

When the executor side has a document the page holds the processor lease for its worker
(:class:`pyjobq.lease.LeaseHolder`), lets go inside the ``freeze``/``pagehide`` handlers and
takes it back on ``resume``/``pageshow``: why, in :mod:`pyjobq.lease`.

The lock is requested with a JS promise whose ``resolve`` we keep, so calling it in
the ``freeze`` handler releases the lock before the page stops (a release through an
asyncio callback would run in a later macrotask, after the freeze). A queued request
is dropped with an ``AbortSignal``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import js  # type: ignore[import-not-found]
from pyodide.ffi import JsException

from ..executor import ExecutorSide
from ..lease import LeaseHolder
from . import proxies
from ..core.ports import Link
from .ports import js_object

log = logging.getLogger("pyjobq")


def has_document() -> bool:
    """A page's main thread (it can be frozen); False in a worker host such as JupyterLite's kernel."""
    return hasattr(js.globalThis, "document") and hasattr(js.globalThis, "addEventListener")


def web_grab(name: str, on_granted: Callable[[Callable[[], None]], None]) -> Callable[[], None]:
    """:data:`pyjobq.lease.Grab` on ``navigator.locks``: ``release()`` is synchronous."""
    controller = js.AbortController.new()
    state: dict[str, Any] = {"resolve": None, "settled": False}

    def release() -> None:
        resolve, state["resolve"] = state["resolve"], None
        if resolve is not None:
            resolve()

    def executor(resolve: Any, _reject: Any) -> None:
        state["resolve"] = resolve

    def granted(_lock: Any) -> Any:
        make_promise = proxies.create(executor)
        try:
            promise = js.Promise.new(make_promise)
        finally:
            proxies.destroy(make_promise)
        on_granted(release)
        return promise

    callback = proxies.create(granted)

    async def wait(request: Any) -> None:
        try:
            await request
        except JsException as exc:
            if "AbortError" not in str(exc):
                log.warning("pyjobq: the processor lease request failed: %s", exc)
        finally:
            state["settled"] = True
            proxies.destroy(callback)

    options = js_object({"mode": "exclusive", "signal": controller.signal})
    asyncio.ensure_future(wait(js.navigator.locks.request(name, options, callback)))

    def cancel() -> None:
        if not state["settled"]:
            controller.abort()

    return cancel


def hold_lease_on_page(side: ExecutorSide, link: Link, lock_name: str,
                       on_first_grant: Callable[[], None] | None = None) -> Callable[[], None]:
    """Give ``side`` a :class:`~pyjobq.lease.LeaseHolder`, in line for the lock at once, and
    wire it to the lifecycle events. ``on_first_grant`` runs when the page first holds it.

    Returns the function that removes the listeners and lets the lease go.
    """
    holder = LeaseHolder(link, web_grab, lock_name, on_first_grant=on_first_grant, eager=True)
    side.lease_holder = holder
    unlisten = [
        proxies.listen(js.document, "freeze", lambda _event: holder.freeze()),
        proxies.listen(js.document, "resume", lambda _event: holder.resume()),
        # pagehide/pageshow bracket the back/forward cache; a plain unload also lets go early.
        proxies.listen(js.window, "pagehide", lambda _event: holder.freeze()),
        proxies.listen(js.window, "pageshow", lambda _event: holder.resume()),
    ]

    def remove() -> None:
        for undo in unlisten:
            undo()
        unlisten.clear()
        holder.close()

    return remove
