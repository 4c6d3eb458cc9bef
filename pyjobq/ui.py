"""Seeing what the queue is doing: the ``<bg-jobs>`` element and a notebook table.

``await pyjobq.ui.install()`` defines ``<bg-jobs>`` on the current page (call it
after :func:`pyjobq.configure`: it uses the queue). Drop ``<bg-jobs></bg-jobs>``
anywhere in the page's HTML — before or after the call — and it shows this tab's
volatile jobs and the origin's persistent ones, live, with retry and delete
buttons that ask the queue. No page JavaScript is needed.

:func:`jobs_html` renders records as an escaped HTML table, for notebooks
(``_repr_html_``) and anywhere without a DOM, such as JupyterLite's kernel.

Both draw one table: the columns, status labels and colours and every cell's value come
from :mod:`pyjobq.core.jobs_table`; ``<bg-jobs>`` receives them from Python when it connects.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .core.errors import PyjobqError
from .core.jobs_table import STATUS_LOOKS
from .notebook import jobs_html

__all__ = ["STATUSES", "install", "jobs_html", "uninstall"]

STATUSES = tuple(look.status for look in STATUS_LOOKS)
"""Every status, in the order the table's caption counts them."""

_bridge: Any = None
_installing: asyncio.Future[Any] | None = None


async def install(queue: Any = None) -> None:
    """Define ``<bg-jobs>`` on this page and connect it to ``queue``. Idempotent.

    Args:
        queue: what the table asks (``query_all``, ``on_update``, ``retry_job``,
            ``delete_job``, ``retry_all``, and ``jobs`` and ``get_job`` to read its unfinished
            rows again); default :mod:`pyjobq.queue`.

    Raises:
        PyjobqError: there is no DOM here (a worker, e.g. JupyterLite's kernel:
            display :func:`jobs_html` of ``await query_all()`` instead).
    """
    global _bridge, _installing
    if _bridge is not None:
        return
    if _installing is not None:
        await asyncio.shield(_installing)
        return
    from .browser import bg_jobs

    if not bg_jobs.has_dom():
        raise PyjobqError(
            "<bg-jobs> needs a page with a DOM; here there is none (a worker or a notebook "
            "kernel). Display pyjobq.ui.jobs_html(await pyjobq.query_all()) instead."
        )
    volatile_here: Callable[[str], bool] | None = None
    if queue is None:
        from . import queue as default_queue

        queue = default_queue
        volatile_here = default_queue._known.is_volatile_here
    _installing = asyncio.get_event_loop().create_future()
    try:
        module = await bg_jobs.load_module()
        _bridge = (bg_jobs.Bridge(module, queue) if volatile_here is None
                   else bg_jobs.Bridge(module, queue, volatile_here))
        _installing.set_result(None)
    except BaseException as exc:
        _installing.set_exception(exc)
        _installing.exception()  # retrieved: the caller below re-raises it
        raise
    finally:
        _installing = None


def uninstall() -> None:
    """Disconnect every ``<bg-jobs>`` from the queue and release the bridge's proxy.

    The element stays defined (custom elements cannot be undefined); it shows
    "waiting for the queue" until :func:`install` runs again."""
    global _bridge
    if _bridge is not None:
        bridge, _bridge = _bridge, None
        bridge.close()
