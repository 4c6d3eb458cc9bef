"""The page-held processor lease in a browser page: Web Locks and the lifecycle events.

When the executor side has a document the page holds the processor lease for its worker
(:class:`pyjobq.engine.lease.LeaseHolder`), lets go inside the ``freeze``/``pagehide`` handlers and
takes it back on ``resume``/``pageshow``: why, in :mod:`pyjobq.engine.lease`.

The lock is taken with :func:`pyjobq.browser.ports.web_grab`, whose ``release()`` is
synchronous, so the ``freeze`` handler lets go before the page stops. While the page holds it,
it answers the lease channel's pings; while in line, it watches the holder
(:class:`pyjobq.engine.lease.LeaseWatch`).
"""

from __future__ import annotations

import logging
from typing import Callable

import js  # type: ignore[import-not-found]

from ..core.ports import Link
from ..engine.lease import LeaseHolder, lease_channel_name
from ..executor.side import ExecutorSide
from ..memory import LoopClock
from . import proxies
from .ports import BroadcastChannelPort, web_grab

log = logging.getLogger("pyjobq")


def has_document() -> bool:
    """A page's main thread (it can be frozen);
    False in a worker host such as JupyterLite's kernel."""
    return hasattr(js.globalThis, "document") and hasattr(js.globalThis, "addEventListener")


def hold_lease_on_page(side: ExecutorSide, link: Link, lock_name: str,
                       on_first_grant: Callable[[], None] | None = None) -> Callable[[], None]:
    """Give ``side`` a :class:`~pyjobq.engine.lease.LeaseHolder`, in line for the lock at once, and
    wire it to the lifecycle events. ``on_first_grant`` runs when the page first holds it.

    Returns the function that removes the listeners, lets the lease go and takes the holder
    back from ``side`` (its :attr:`~pyjobq.executor.side.ExecutorSide.lease_holder` is None
    again).
    """
    channel = BroadcastChannelPort(lease_channel_name(lock_name))
    holder = LeaseHolder(link, web_grab, lock_name, on_first_grant=on_first_grant, eager=True,
                         channel=channel, clock=LoopClock(), source=side.source)
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
        channel.close()
        if side.lease_holder is holder:
            side.lease_holder = None

    return remove
