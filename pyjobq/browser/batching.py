"""One browser task for a run of ready callbacks, in the scheduler's own worker.

Theory of operation
-------------------
Pyodide's event loop (``pyodide.webloop.WebLoop``) gives every ``call_soon`` a browser
task of its own: each step of each coroutine — a future resolving, a task resuming
after an ``await`` — waits behind whatever else the worker's event loop holds, and
pays a scheduling round trip. The profile of the scheduler worker showed about twenty
such tasks per job, most of them chained (a settle's transaction completes, its
awaiter resumes, publishes, resumes the pass, which claims...), so a job's latency
was a queue of browser tasks rather than work.

:func:`install` makes the loop run the callbacks that are ready *together*, as
CPython's own loop does in one iteration: ``call_soon`` appends to a queue, and one
browser task drains it — including what the drained callbacks make ready — until it
is empty or :data:`BUDGET_MS` has passed, when the rest goes on in the next task, so
the worker still answers messages, IndexedDB events and lock grants between batches.
Timers (``call_later`` with a delay) are the loop's own, unchanged.

Nothing about ordering changes: callbacks run first in, first out, as asyncio
promises. IndexedDB is unaffected too: pyjobq issues a transaction's requests
synchronously and awaits only its completion (pyjobq/browser/idb.py), so running
more Python in one task can never find a transaction inactive.

Only the scheduler's worker is changed — pyjobq owns that Pyodide. The page's loop is
the application's and is left exactly as Pyodide made it.

*In the event that delivers it.* A browser event pyjobq handles in the worker — a message
from the page, a transaction's end (pyjobq/browser/idb.py), a lock's grant — runs its
handler inside :func:`event`: what the handler makes ready asks no browser task of its own
(one would only find the queue empty), and runs as the handler returns, in the same
browser task, instead of in a task of its own queued behind the worker's other events (the trace,
``bench.mjs --trace``, showed about a third of a job's worker time in such waits). It is the
same first-in, first-out run of the same queue, only sooner, as a browser's microtask
checkpoint runs promise callbacks at the end of each event; inside a running batch it does
nothing, and outside the worker (no batching installed) it does nothing either.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import time
from typing import Any, Callable, Iterator

#: A batch gives the browser its turn after this long, so messages and events still come in.
BUDGET_MS = 8.0


def install(loop: Any, *, schedule: Callable[[Callable[[], None]], None] | None = None) -> None:
    """Make ``loop.call_soon`` batch ready callbacks into one browser task per run.

    ``schedule`` posts a callback as a new browser task; by default Pyodide's own
    ``scheduleCallback`` (what ``WebLoop`` uses for ``setTimeout(…, 0)``).
    """
    if getattr(loop, "_pyjobq_drain", False):
        return
    batching = _Batching(loop, schedule if schedule is not None else _browser_task)
    loop.call_soon = batching.call_soon
    loop.call_soon_threadsafe = batching.call_soon
    loop._pyjobq_drain = True
    loop._pyjobq_run_ready = batching.run_now
    loop._pyjobq_hold = (batching.hold, batching.let_go)


class _Batching:
    """One loop's ready callbacks, run together (:func:`install`)."""

    def __init__(self, loop: Any, schedule: Callable[[Callable[[], None]], None]) -> None:
        self.loop = loop
        self.schedule = schedule
        self.ready: collections.deque[asyncio.Handle] = collections.deque()
        #: A browser task is asked for, to run :meth:`drain`.
        self.scheduled = False
        self.running = False
        #: How many of pyjobq's event handlers are under way (:func:`event`): what they make
        #: ready runs as the outermost ends, so it asks no browser task of its own.
        self.holding = 0

    def drain(self) -> None:
        if self.running:  # a batch is under way further up this stack: it runs what is ready
            return
        self.running = True
        loop = self.loop
        install_running = getattr(loop, "_install_running_loop", None)
        if install_running is not None:
            install_running()
            loop._install_asyncgen_hooks()
        deadline = time.monotonic() + BUDGET_MS / 1000
        ready = self.ready
        try:
            while ready:
                handle = ready.popleft()
                if not handle.cancelled():
                    handle._run()
                if time.monotonic() >= deadline:
                    break
        finally:
            self.running = False
            self.scheduled = False
            if ready:
                self.scheduled = True
                self.schedule(self.drain)

    def run_now(self) -> None:
        if self.ready and not self.running:
            self.drain()  # a browser task already queued for these finds the queue empty

    def hold(self) -> None:
        self.holding += 1

    def let_go(self) -> None:
        self.holding -= 1
        if self.holding == 0:
            self.run_now()  # what is left past the budget gets its browser task (drain's end)

    def call_soon(self, callback: Callable[..., Any], *args: Any,
                  context: contextvars.Context | None = None) -> asyncio.Handle:
        handle = asyncio.Handle(callback, args, self.loop, context=context)
        self.ready.append(handle)
        # A running batch, or a handler of pyjobq's that will run it as it ends, takes it:
        # no browser task is asked for only to find the queue empty.
        if not self.scheduled and not self.running and not self.holding:
            self.scheduled = True
            self.schedule(self.drain)
        return handle


@contextlib.contextmanager
def event() -> Iterator[None]:
    """Around a browser event's handler of pyjobq's (a message, a transaction's end, a lock's
    grant): what it makes ready runs as it returns, in this event, where batching is installed
    (the scheduler worker); elsewhere, nothing changes."""
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:
        yield
        return
    hooks = getattr(loop, "_pyjobq_hold", None)
    if hooks is None:
        yield
        return
    hold, let_go = hooks
    hold()
    try:
        yield
    finally:
        let_go()


def run_ready() -> None:
    """Run what is ready now, at the end of a browser event pyjobq handled, where batching is
    installed (the scheduler worker); elsewhere, nothing."""
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:
        return
    run_now = getattr(loop, "_pyjobq_run_ready", None)
    if run_now is not None:
        run_now()


def _browser_task(callback: Callable[[], None]) -> None:
    from pyodide.ffi import create_once_callable
    from pyodide_js._api import scheduleCallback  # type: ignore[import-not-found]

    scheduleCallback(create_once_callable(callback, _may_syncify=True), 0)
