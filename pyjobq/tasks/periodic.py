"""``@pyjobq.periodic``: an ``async def`` run once per slot of ``every``, once per origin.

The function has the shape of a ``@pyjobq.task`` with no arguments: ``async def tidy(signal)``,
the job's :class:`~pyjobq.AbortSignal` first (pyjobq/tasks/__init__.py's "Typing" says why), so one
convention serves both decorators and ``await tidy(AbortSignal())`` is typed.

Importable before the queue, like :func:`pyjobq.configure`: importing this module or applying
the decorator neither imports :mod:`pyjobq.queue` nor reads the configured names. Applying it
registers the function as the reconstructor of its jobs as ``@pyjobq.task`` does
(:func:`pyjobq.config.add_reconstructor`, with the function's module, which the Service Worker
imports to run them). Its definition is stored (the ``schedule`` request) when the queue starts
(it registers as the ``job-queue`` service, which calls :func:`started`), or at once if it has,
whence the lease holder — in whichever tab — enqueues each due slot once
(pyjobq/engine/periodic.py; the rules: pyjobq/core/periodic.py, docs/periodic.md).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from datetime import timedelta
from typing import Any, Awaitable, Callable, Coroutine, Generic, Protocol, TypeVar

from .. import config as _config
from .. import services as _services
from ..abort import AbortSignal
from ..core.decorated import check_signal_first
from ..core.errors import InvalidJobError, PyjobqError
from ..core.periodic import MIN_EVERY_MS, ScheduleDefinition
from ..core.records import DEFAULT_MAX_ATTEMPTS

__all__ = ["Periodic", "periodic", "started"]

log = logging.getLogger("pyjobq")

_R = TypeVar("_R")


class _Queue(Protocol):
    """What a schedule uses of the running queue (an ExecutorSide)."""

    def register_reconstructor(self, name: str, factory: Callable[[Any], Any]) -> None: ...

    def schedule(self, definition: ScheduleDefinition) -> Coroutine[Any, Any, Any]: ...

    def unschedule(self, name: str) -> Coroutine[Any, Any, bool]: ...


#: The schedules this page defined, by name, in the order they were defined.
_defined: dict[str, "Periodic[Any]"] = {}
#: The running queue, once it started (:func:`started`).
_queue: _Queue | None = None


class Periodic(Generic[_R]):
    """A periodic function: ``await tidy(signal)`` calls the function itself; the queue runs it
    once per slot, with its job's signal (:func:`periodic`).

    Attributes:
        name: the schedule's name (``module:qualname``, or the ``name=`` given); also the
            reconstructor its jobs are rebuilt with.
        definition: what is stored (:class:`~pyjobq.core.periodic.ScheduleDefinition`).
    """

    def __init__(self, fn: Callable[[AbortSignal], Awaitable[_R]],
                 definition: ScheduleDefinition) -> None:
        self.fn = fn
        self.definition = definition
        self.name = definition.name
        self.__wrapped__ = fn
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", definition.name)
        self.__qualname__ = getattr(fn, "__qualname__", definition.name)

    def __call__(self, signal: AbortSignal, /) -> Awaitable[_R]:
        return self.fn(signal)

    def factory(self, _params: Any) -> Callable[[AbortSignal], Awaitable[_R]]:
        """The reconstructor of this schedule's jobs (they store no params): the function,
        called with the job's signal."""
        return self.fn

    def __repr__(self) -> str:
        return (f"<pyjobq.periodic {self.name!r} every "
                f"{timedelta(milliseconds=self.definition.every_ms)}>")

    def attach(self, queue: _Queue) -> None:
        """Register this schedule's reconstructor on ``queue`` and store its definition there
        (the request goes out now). What :func:`started` does for each schedule (the real
        queue has the reconstructor from the settings already); a test kit calls it on a
        simulated tab's queue, which does not read them."""
        queue.register_reconstructor(self.name, self.factory)
        _store(queue.schedule(self.definition), self.name)

    def cancel(self) -> Coroutine[Any, Any, bool]:
        """Stop this schedule: forget it on this page and delete the stored one, so no tab
        enqueues it any more (its jobs stay). Returns whether one was stored. A page that still
        defines it stores it again when it loads: remove the decorator too.

        Raises:
            PyjobqError: the queue has not started on this page (nothing could delete the
                stored schedule): ``await pyjobq.unschedule(name)`` starts it and deletes it.
        """
        if _queue is None:
            raise PyjobqError(
                f"{self.name!r}.cancel(): the queue has not started on this page, so the stored "
                f"schedule cannot be deleted; call `await pyjobq.unschedule({self.name!r})`, "
                "which starts it")
        _defined.pop(self.name, None)
        return _queue.unschedule(self.name)


def _store(request: Coroutine[Any, Any, Any], name: str) -> None:
    """Wait for the ``schedule`` request's answer in the background; a refusal is logged (the
    request went out already: its order among this page's calls is kept)."""
    try:
        task = asyncio.ensure_future(request)
    except RuntimeError:  # no event loop here (plain CPython outside asyncio): nobody to wait
        request.close()
        return

    def logged(done: asyncio.Future[Any]) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.error("pyjobq: periodic %r could not be stored: %s", name, done.exception())

    task.add_done_callback(logged)


def _every_ms(every: Any) -> float:
    if not isinstance(every, timedelta):
        raise InvalidJobError(
            f"periodic(every=...): expected a datetime.timedelta such as "
            f"timedelta(minutes=15), got {every!r} ({type(every).__name__})")
    ms = every / timedelta(milliseconds=1)
    if ms < MIN_EVERY_MS or ms != int(ms):
        raise InvalidJobError(
            f"periodic(every=...): expected at least a second, in whole milliseconds, got "
            f"{every!r}; shorter periodic work belongs in a loop of its own")
    return float(ms)


def periodic(
    every: timedelta,
    *,
    name: str | None = None,
    type: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    label: str | None = None,
    group: str | None = None,
) -> Callable[[Callable[[AbortSignal], Awaitable[_R]]], Periodic[_R]]:
    """Run the decorated ``async def f(signal)`` once per slot of ``every``, once per origin.

    The function's one parameter receives its job's :class:`~pyjobq.AbortSignal`, as a
    ``@pyjobq.task``'s first parameter does; its return value (JSON-like) is the job's result.

    Slots are the multiples of ``every`` since the UNIX epoch (15 minutes: :00, :15, :30, :45 of
    each hour, UTC). Whichever tab holds the processor lease enqueues each due slot once, as a
    persistent job of this schedule, however many tabs are open. A new schedule's first slot is
    the next one. A slot missed while no tab was open runs once when one opens (the latest;
    the others are skipped). A slot that comes due while the previous occurrence's job is
    unfinished is skipped. docs/periodic.md has the rules and their limits.

    Importable and applicable before the queue: the reconstructor of its jobs is registered at
    once (in the settings, as ``@pyjobq.task`` does), and the schedule takes effect when the
    queue starts (or at once, if it has). The schedule is stored, so other tabs and later
    sessions keep running it; :meth:`Periodic.cancel` or :func:`pyjobq.unschedule` deletes it.

    Args:
        every: a :class:`~datetime.timedelta` of at least a second.
        name: the schedule's name, stored, and the reconstructor its jobs are rebuilt by;
            default ``module:qualname`` of the function. Keep it stable across releases.
        type: the jobs' lane; default the schedule's name (its own lane).
        max_attempts, label, group: as for ``enqueue_fetch`` (the label defaults to the name).

    Raises:
        InvalidJobError: ``every`` is not a timedelta of at least a second, an option is out
            of range, the function cannot be called as ``f(signal)`` (an ``async def`` whose
            first parameter takes the signal and that needs no other), another function was
            defined under its name, or the name is a reconstructor not made by ``@periodic``
            (a task's, or one given to :func:`pyjobq.configure`).
    """
    every_ms = _every_ms(every)

    def decorate(fn: Callable[[AbortSignal], Awaitable[_R]]) -> Periodic[_R]:
        check_signal_first(fn, decorator="@pyjobq.periodic", kind="periodic function",
                           arguments=False, error=InvalidJobError)
        try:
            inspect.signature(fn).bind(None)
        except TypeError as exc:
            raise InvalidJobError(
                f"@pyjobq.periodic: {fn.__qualname__} must be callable with the job's "
                f"AbortSignal alone (its jobs have no arguments): {exc}; write `async def "
                f"{fn.__name__}(signal): ...`") from None
        schedule_name = name if name is not None else f"{fn.__module__}:{fn.__qualname__}"
        definition = ScheduleDefinition(
            name=schedule_name, every_ms=every_ms,
            type=type if type is not None else schedule_name, max_attempts=max_attempts,
            label=label, group=group)
        existing = _defined.get(schedule_name)
        if existing is not None and getattr(existing.fn, "__qualname__", None) != fn.__qualname__:
            raise InvalidJobError(
                f"@pyjobq.periodic: {schedule_name!r} already names {existing.fn!r}; give one "
                "of them another name=")
        registered = _config.settings().reconstructors.get(schedule_name)
        if registered is not None and not isinstance(getattr(registered, "__self__", None),
                                                     Periodic):
            raise InvalidJobError(
                f"@pyjobq.periodic: {schedule_name!r} is already a reconstructor (a task's, or "
                "one given to pyjobq.configure(reconstructors=...)); its jobs would be run as "
                "the other's. Give the schedule another name=")
        schedule = Periodic(fn, definition)
        _defined[schedule_name] = schedule  # a cell run again replaces its own definition
        _config.add_reconstructor(schedule_name, schedule.factory,
                                  module=getattr(fn, "__module__", None))
        if _queue is not None:
            schedule.attach(_queue)
        return schedule

    return decorate


def started(queue: _Queue) -> None:
    """The queue started (it registered as the ``job-queue`` service): every schedule defined
    so far takes effect on it, and later ones at once."""
    global _queue
    _queue = queue
    for schedule in list(_defined.values()):
        schedule.attach(queue)


_services.when_registered(_services.JOB_QUEUE, started)

