"""The event-loop helpers: background tasks kept alive until they finish (their failures
logged), futures, callbacks run soon, sleeps on a clock, lock requests.

Every engine's (in the scheduler worker and in the page), and the outbox's own.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
import weakref
from typing import Any, Awaitable, Callable, Coroutine, Iterator, TypeVar

from ..core.ports import Clock, LockManager, Release

_T = TypeVar("_T")


#: Arranges for :func:`run_soon` to be called at the end of the current event: the browser
#: page's runtime sets it (pyjobq/browser/page_main.py, a microtask); None: each loop's
#: ``call_soon``.
_waker: Callable[[], None] | None = None


def use_waker(waker: Callable[[], None] | None) -> None:
    """How :func:`soon` wakes from now on in this Python context: ``waker()`` must arrange for
    :func:`run_soon` to be called soon, without waiting for the event loop's next task
    (None: each event loop's own ``call_soon``)."""
    global _waker
    _waker = waker


class _SoonQueue:
    """What :func:`soon` was given on one event loop, run together at its wake, each call in
    the context it was given in (as ``call_soon`` would)."""

    __slots__ = ("loop", "calls")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.calls: list[tuple[Callable[[], object], contextvars.Context]] = []

    def post(self, fn: Callable[[], object], context: contextvars.Context) -> None:
        self.calls.append((fn, context))
        if len(self.calls) == 1:
            if _waker is None:
                self.loop.call_soon(self.run)
            else:
                _waker()

    def run(self) -> None:
        calls, self.calls = self.calls, []  # what comes while these run wakes again
        for fn, context in calls:
            try:
                context.run(fn)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # as asyncio reports an exception in a callback
                self.loop.call_exception_handler({
                    "message": f"Exception in pyjobq's callback {fn!r}", "exception": exc})


_soon_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _SoonQueue] = (
    weakref.WeakKeyDictionary())


def run_soon() -> None:
    """Run what :func:`soon` was given, on every event loop (the waker's callback)."""
    for queue in list(_soon_queues.values()):
        if queue.calls:
            queue.run()


def soon(fn: Callable[[], object], loop: asyncio.AbstractEventLoop | None = None, *,
         context: contextvars.Context | None = None) -> None:
    """Run ``fn()`` soon, after the current step, with whatever else pyjobq gave here meanwhile,
    in order: on a browser page at the end of the current event (a microtask: no browser task
    of its own, where the page's ``call_soon`` is one each), elsewhere in one ``call_soon``.

    For pyjobq's own follow-ups on a page — a message of the volatile engine's in-tab link, the
    done-callbacks of its completions (``job.done``: ``gather``'s, the application's) — never
    for the application's tasks, which keep their event loop's order. ``fn`` runs in the
    context it was given in (or ``context``), on ``loop`` (by default the current one).
    Anything it raises is reported to the loop's exception handler.
    """
    if loop is None:
        loop = asyncio.get_event_loop()
    queue = _soon_queues.get(loop)
    if queue is None:
        queue = _soon_queues[loop] = _SoonQueue(loop)
    queue.post(fn, context if context is not None else contextvars.copy_context())


def new_future(loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Future[Any]:
    """A future of ``loop`` (the current one by default) whose resolution costs no step of the
    event loop when nobody waits on it.

    Pyodide's ``WebLoop.create_future`` adds a done-callback of its own to every future it
    makes (its count of work in progress), so resolving one is a browser task even when no
    one awaits it: a page's burst of 10,000 jobs paid 10,000 of them for ``stored`` alone.
    pyjobq's own futures are made here instead, as plain :class:`asyncio.Future` s.
    """
    return asyncio.Future(loop=loop if loop is not None else asyncio.get_event_loop())


async def sleep(clock: Clock, ms: float) -> None:
    """Sleep ``ms`` on ``clock`` (a fake clock in tests moves only when told)."""
    woken: asyncio.Future[None] = asyncio.get_event_loop().create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    clock.call_later(ms, wake)
    await woken


async def again_doubling(clock: Clock, attempt: Callable[[], Awaitable[_T]], *, first_ms: float,
                         max_ms: float, passes: Callable[[Exception], bool],
                         said: Callable[[Exception, float], None],
                         failed: Exception | None = None) -> _T:
    """What ``await attempt()`` returns, tried until it does: each failure ``passes`` judges
    to be passing (a store's bad moment) is ``said`` with the wait before the next try,
    ``first_ms`` doubling up to ``max_ms``; any other failure is raised. ``failed``: the
    failure of a try already made, said and waited out before the first call."""
    wait = first_ms
    failure = failed
    while True:
        if failure is not None:
            if not passes(failure):
                raise failure
            said(failure, wait)
            await sleep(clock, wait)
            wait = min(wait * 2, max_ms)
        try:
            return await attempt()
        except Exception as exc:
            failure = exc


def start_now(coro: Coroutine[Any, Any, _T]) -> asyncio.Future[_T]:
    """A task whose first step runs now, in the caller's event, up to its first ``await``.

    In a browser every ``call_soon`` is a browser task of its own (a ``MessageChannel`` post),
    so an ordinary task's first step waits behind whatever the page queued: starting it now
    saves that turn. Only where the order is the caller's to decide: the step runs before the
    caller's next line. (Python 3.12 and later; on 3.11 the task starts on the next turn.)
    """
    loop = asyncio.get_running_loop()
    if sys.version_info < (3, 12):
        return loop.create_task(coro)
    factory = loop.get_task_factory()
    if factory is None:
        return asyncio.Task(coro, loop=loop, eager_start=True)
    # A host's task factory still sees the task (the simulation files each under its tab).
    try:
        return factory(loop, coro, eager_start=True)
    except TypeError:  # a factory that takes no eager_start: the task starts on the next turn
        return factory(loop, coro)


class TaskSet:
    """Fire-and-forget tasks held by strong references (asyncio keeps only weak ones), with
    an exception logged as ``message`` rather than lost as "never retrieved"."""

    def __init__(self, logger: logging.Logger, message: str) -> None:
        self._log = logger
        self._message = message
        self._tasks: dict[asyncio.Future[Any], None] = {}  # in spawn order, unlike a set

    def spawn(self, coro: Coroutine[Any, Any, Any] | asyncio.Future[Any], *,
              now: bool = False) -> asyncio.Future[Any]:
        """Run ``coro`` as a task held here until it ends. ``now``: its first step runs at once,
        in the caller's event (:func:`start_now`), where a task's first step is otherwise a
        turn of the event loop later — a browser task of its own on a page."""
        task = start_now(coro) if now and not isinstance(coro, asyncio.Future) \
            else asyncio.ensure_future(coro)
        if task.done():  # it ended in its first step, here: no turn of the event loop to reap it
            self._reap(task)
            return task
        self._tasks[task] = None
        task.add_done_callback(self._reap)
        return task

    def _reap(self, task: asyncio.Future[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            self._log.error(self._message, exc_info=task.exception())

    def __iter__(self) -> Iterator[asyncio.Future[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)


def take_by_request(locks: LockManager, name: str, *,
                    spawn: Callable[[Coroutine[Any, Any, Any]], Any],
                    ) -> "asyncio.Future[Release | None]":
    """:meth:`~pyjobq.core.ports.TakesIfAvailable.take_if_available` made of an ``ifAvailable``
    :meth:`~pyjobq.core.ports.LockManager.request` whose callback holds the lock until the
    answer's release is called: for a lock manager with no cheaper way (the in-memory one, Web
    Locks where ``locks.js`` cannot be evaluated, one of the application's own). The request
    is a task ``spawn`` starts (and keeps)."""
    answer: asyncio.Future[Release | None] = new_future()
    let_go: asyncio.Future[None] = new_future()

    def release() -> None:
        if not let_go.done():
            let_go.set_result(None)

    async def hold(lock: Any) -> None:
        if answer.done():
            return  # cancelled: nobody will release it
        if not lock:
            answer.set_result(None)
            return
        answer.set_result(release)
        await let_go

    async def ask() -> None:
        try:
            await locks.request(name, hold, if_available=True)
        except Exception as exc:
            if answer.done():
                raise
            answer.set_exception(exc)  # refused before any answer: the asker hears it

    spawn(ask())
    return answer
