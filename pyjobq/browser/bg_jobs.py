"""The bridge between the page's queue and ``<bg-jobs>`` (see ``bg_jobs.mjs``).

The element's module ships in this package and is imported from a Blob URL, so
a page needs nothing served beyond Pyodide and pyjobq's wheel. JavaScript reaches
Python through one proxy, ``call(op, arg, resolve, reject)``, which runs a queue
operation as a task and settles the JS promise with JSON text: no Python future
ever crosses to JS (DESIGN.md: the PyodideFuture crash). Python reaches the
element through ``bridge.emit(text)`` for every ``job-update``. The bridge asks
the queue for everything (``retry_job``, ``delete_job``, ``retry_all``); it
never opens the database itself.

What the element draws is Python's too (:mod:`pyjobq.core.jobs_table`, the notebook
table's definition): the bridge carries the table's definition as JSON, and a second
proxy, ``cells(records, now)``, answers synchronously with every column's value for
the rows the element is about to draw — JSON text in, JSON text out, no Python object
crosses. The element keeps no status list, heading or wording of its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
from importlib import resources
from typing import Any, Callable, Mapping

import js  # type: ignore[import-not-found]
from pyodide.code import run_js
from pyodide.ffi import to_js

from ..core import jobs_table
from ..core.errors import PyjobqError
from . import proxies
from .ports import js_object

log = logging.getLogger("pyjobq")


def _rows(records: Any) -> list[dict[str, Any]]:
    # What the table reads, each field of its kind (never _params: large, the caller's data).
    return [row for row in map(jobs_table.row, records) if row is not None]


def _by_id(value: Any, what: str) -> dict[str, Mapping[str, Any] | None]:
    if not isinstance(value, dict) or not all(
            isinstance(v, dict) or v is None for v in value.values()):
        raise PyjobqError(f"<bg-jobs> asked to read again something other than {what}")
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str)


def cells_json(records_text: str, now: float) -> str:
    """``<bg-jobs>``' synchronous ask: the cells (:func:`~pyjobq.core.jobs_table.cells`) of a
    JSON list of records, read at ``now`` (``Date.now()``), as a JSON list in the same order."""
    return _dumps([jobs_table.cells(record, float(now)) for record in json.loads(records_text)])


async def load_module() -> Any:
    """Import ``bg_jobs.mjs`` from a Blob URL; returns the JS module namespace."""
    code = resources.files("pyjobq.browser").joinpath("bg_jobs.mjs").read_text()
    blob = js.Blob.new(to_js([code]), js_object({"type": "text/javascript"}))
    url = js.URL.createObjectURL(blob)
    try:
        return await run_js("(u) => import(u)")(url)
    finally:
        # The module is evaluated once imported; the URL is no longer needed.
        js.URL.revokeObjectURL(url)


class Bridge:
    """One page's link from ``<bg-jobs>`` to ``queue``. :meth:`close` releases everything it
    made."""

    def __init__(self, module: Any, queue: Any,
                 volatile_here: Callable[[str], bool] = lambda job_id: False) -> None:
        self._module = module
        self._queue = queue
        #: Whether an id is one of this tab's volatile jobs (:func:`jobs_table.read_for_table`).
        self._volatile_here = volatile_here
        self._tasks: set[asyncio.Task[Any]] = set()
        self._call = proxies.create(self._on_call)
        self._cells = proxies.create(cells_json)
        self.js = module.makeBridge(self._call, self._cells, _dumps(jobs_table.definition()))
        self._unsubscribe = queue.on_update(self._on_update)
        module.install(self.js)

    def _on_update(self, update: Any) -> None:
        news = jobs_table.row(update)
        if news is not None:  # news is any script's word: the element asks the store of ends
            self.js.emit(_dumps(news))

    def _on_call(self, op: str, arg: Any, resolve: Any, reject: Any) -> None:
        task = asyncio.ensure_future(self._do(str(op), arg))
        self._tasks.add(task)

        def settle(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if t.cancelled():
                reject(f"{op} was cancelled")
            elif t.exception() is not None:
                exc = t.exception()
                reject(js.Error.new(str(exc) or type(exc).__name__))
            else:
                resolve(t.result())

        task.add_done_callback(settle)

    async def _do(self, op: str, arg: Any) -> str:
        q = self._queue
        if op == "snapshot":
            return _dumps(_rows(await q.query_all()))
        if op == "recheck":  # {shown: its rows of them, asked: what news asked about}
            request = json.loads(str(arg))
            if not isinstance(request, dict):
                raise PyjobqError("<bg-jobs> asked to read again something other than its rows")
            shown = {job_id: row for job_id, row in
                     _by_id(request.get("shown"), "its rows").items() if row is not None}
            asked = _by_id(request.get("asked"), "what news asked about")
            return _dumps(await jobs_table.read_for_table(q, shown, asked, self._volatile_here))
        if op == "retry":
            return _dumps(await q.retry_job(str(arg)))
        if op == "remove":
            return _dumps(await q.delete_job(str(arg)))
        if op == "retry_all":
            return _dumps(await q.retry_all())
        raise PyjobqError(f"<bg-jobs> asked for an unknown operation {op!r}")

    def close(self) -> None:
        self._unsubscribe()
        self._module.uninstall(self.js)
        for task in list(self._tasks):
            task.cancel()
        proxies.destroy(self._call)
        proxies.destroy(self._cells)


def has_dom() -> bool:
    return hasattr(js, "customElements") and hasattr(js, "document")
