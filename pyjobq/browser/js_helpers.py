"""pyjobq's small JavaScript helpers (``idb_batch.js``, ``locks.js``), evaluated once per context.

Runs wherever the browser adapters run: in the scheduler worker, on the page, in the Service
Worker.

Theory of operation
-------------------
A helper makes one call of what would otherwise be a proxy per request (a transaction's
requests, a lock's request), so the decisions stay in Python and the platform glue shrinks.
Each is evaluated with ``run_js``, which a page's Content-Security-Policy without
``'unsafe-eval'`` forbids: the helper is then None, once and for good in that context, and its
adapter does what it always could from Python (one proxy per request). Every adapter asks
:meth:`Helper.get` and takes None as that answer.
"""

from __future__ import annotations

import contextlib
import logging
from importlib import resources
from typing import Any, Iterator

from pyodide.code import run_js

log = logging.getLogger("pyjobq")


class Helper:
    """One helper script of this package, evaluated on first use (:meth:`get`)."""

    def __init__(self, filename: str, without: str) -> None:
        #: The file beside this module whose evaluation is the helper's value.
        self.filename = filename
        #: What the adapter does without it, as the log line says it.
        self._without = without
        self._value: Any = None
        self._refused = False

    def get(self) -> Any:
        """The helper's value; None where it cannot be evaluated (the adapter goes without)."""
        if self._value is None and not self._refused:
            try:
                # Named, so stack traces, DevTools and CPU profiles say whose code it is.
                source = resources.files(__package__).joinpath(self.filename).read_text()
                self._value = run_js(f"{source}\n//# sourceURL=pyjobq/{self.filename}\n")
            except Exception as exc:  # EvalError under a policy without 'unsafe-eval'
                self._refused = True
                log.info("pyjobq: %s here (%s)", self._without, exc)
        return self._value

    @contextlib.contextmanager
    def refused(self) -> Iterator[None]:
        """While in it, the helper is as a refused evaluation leaves it (a test of the adapter's
        way without it); as it was afterwards."""
        saved = self._value, self._refused
        self._value, self._refused = None, True
        try:
            yield
        finally:
            self._value, self._refused = saved
