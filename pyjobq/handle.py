"""The handle ``enqueue`` returns: :class:`Job`, its :class:`Completion` s and :class:`JobUpdate`.

Theory of operation
-------------------
A job ends once, but any number of coroutines may wait for it: a page's
``await job``, a table's ``asyncio.wait_for(job.done, 5)``, a test's ``gather``.
A bare :class:`asyncio.Future` shared by all of them is cancelled by the first
waiter that gives up (``wait_for`` cancels what it awaits on timeout; so does
cancelling the awaiting task, or a ``gather``), and the outcome is then lost to every
other waiter. So each read of ``job.done`` or ``job.stored`` is a :class:`Completion`:
a read-only view of one private future, through which every ``await`` waits on a
future of its own and every done-callback is that view's. Giving up — cancelling the
view, as ``gather`` does, or the awaiting task — ends only the waits made through it.
Only the executor side settles the private future (``Job._settle``, ``_lose``,
``_store_ok``, ``_store_failed``), and settling it resolves every waiting view in the
same step — where :func:`asyncio.shield` took one event-loop step more, which under
Pyodide's loop on a page is one browser task more for every awaited job. Nothing
else settles the private futures (``tests/test_job_handle.py`` checks the source), so
no waiter is left behind.

*A future, to asyncio.* A view passes :func:`asyncio.isfuture`, so ``gather`` and
``wait`` add their done-callback to it directly. Otherwise ``gather`` wraps each
awaitable in a task — three event-loop steps a job (the task's first step, its wake-up,
its end) — and a burst of 10,000 ``stored`` paid 30,000 browser tasks on a page. The
done-callbacks of everything settled in one step are called together in one later
step (:func:`~pyjobq.loop.soon`), in the order they became due: a burst's
``gather`` costs one step, not one a job.

The handle's own calls — :meth:`Job.result`, :meth:`Job.status`, :meth:`Job.cancel`,
:meth:`Job.retry`, :meth:`Job.delete` — ask the queue that made the handle (its
:class:`JobControl`, the executor side) exactly what the module functions ask
(``cancel_job(job.id)`` and the rest): they wait on ``done`` like any waiter and settle nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import math
from typing import Any, Callable, Coroutine, Generator, Generic, Protocol, TypeVar

from .core.codes import Code
from .core.errors import InvalidJobError, PyjobqError
from .core.outcome import JobFailed, Outcome
from .core.status import Status
from .loop import new_future, soon

T = TypeVar("T")


class JobControl(Protocol):
    """What a :class:`Job` handle asks of the queue that made it (the executor side): the same
    requests as the module functions, each sent at the call, routed to the job's own engine
    (this tab's volatile one, or the persistent one)."""

    def cancel_job(self, job_id: str) -> Coroutine[Any, Any, bool]: ...

    def retry_job(self, job_id: str) -> Coroutine[Any, Any, bool]: ...

    def delete_job(self, job_id: str) -> Coroutine[Any, Any, bool]: ...

    def get_job(self, job_id: str) -> Coroutine[Any, Any, dict[str, Any] | None]:
        """The job's record now (None: there is none)."""
        ...


class _Once(Generic[T]):
    """What happens once — a job's end, its record's write — and who waits for it: the shared
    private future only :class:`Job` settles, and the :class:`Completion` views that have a wait
    on it (an ``await`` or a done-callback)."""

    __slots__ = ("future", "what", "views", "_prune_at")

    def __init__(self, future: asyncio.Future[T], what: str) -> None:
        self.future = future
        self.what = what
        #: Views with a wait on the future, until it happens.
        self.views: list[Completion[T]] = []
        self._prune_at = 64

    def watch(self, view: Completion[T]) -> None:
        """``view`` has a wait registered now (its ``await`` or callback already added)."""
        if view._watched:
            return
        view._watched = True
        self.views.append(view)
        if len(self.views) >= self._prune_at:
            # Waiters that gave up (a wait_for that timed out, again and again) are forgotten
            # here rather than each paying an event-loop step to leave.
            kept = []
            for v in self.views:
                if v._waiting():
                    kept.append(v)
                else:
                    v._watched = False  # a later wait through it watches it again
            self.views = kept
            self._prune_at = max(64, 2 * len(kept))

    def awaited(self) -> bool:
        """Whether a wait on it is pending (an ``await`` or a done-callback not given up)."""
        return any(view._waiting() for view in self.views)

    def settle(self, value: T) -> None:
        """Resolve the future with ``value`` and tell the views, unless it is settled already."""
        if not self.future.done():
            self.future.set_result(value)
            self.resolve()

    def fail(self, error: BaseException) -> None:
        """Make the future raise ``error`` and tell the views, unless it is settled already. The
        error is marked retrieved as it is set (no done-callback, which would cost a step of the
        event loop): a waiter-less future that raises must not warn "exception never
        retrieved"."""
        if not self.future.done():
            self.future.set_exception(error)
            _retrieve(self.future)
            self.resolve()

    def resolve(self) -> None:
        """Hand the future's result to every view still waiting: :meth:`settle` and :meth:`fail`
        call it as they settle the future."""
        if not self.future.done():
            return
        views, self.views = self.views, []
        for view in views:
            view._watched = False
            view._happened()


class Completion(Generic[T]):
    """Something that happens once, awaitable by any number of waiters: ``job.done``,
    ``job.stored``.

    ``await completion`` (also through :func:`asyncio.wait_for`, :func:`asyncio.gather`
    or :func:`asyncio.wait`) returns its result or raises its error. A waiter
    that gives up — a ``wait_for`` that times out, a cancelled task, a cancelled
    ``gather`` — stops only its own wait: the job's completion stays pending, and every other
    waiter, earlier or later, still gets the result. It answers like a future
    (:func:`asyncio.isfuture` is true, so ``gather`` and ``wait`` take it as one, with no task
    of their own per job): :meth:`done`, :meth:`result`, :meth:`exception`,
    :meth:`add_done_callback`, :meth:`cancel`.

    Each read of ``job.done`` is a view of its own on the job's one completion (views of the
    same completion compare equal): :meth:`cancel` stops the waits made through that view —
    what ``gather`` and ``wait_for`` do when they give up — and nothing else; the job runs on.
    To stop a job, call ``job.cancel()`` or :func:`pyjobq.cancel_job`.

    Done-callbacks of completions that happen in one step are called together, in the order
    they happened, in one step of the event loop after it (asyncio calls each in a step of its
    own: under Pyodide's loop on a page, a browser task each).
    """

    __slots__ = ("_once", "_callbacks", "_awaits", "_gave_up", "_watched",
                 "_asyncio_future_blocking")

    def __init__(self, once: _Once[T]) -> None:
        self._once = once
        #: Done-callbacks added through this view, with the context each runs in.
        self._callbacks: list[tuple[Callable[[Completion[T]], object],
                                    contextvars.Context]] = []
        #: Each pending ``await`` through this view: a future of its own.
        self._awaits: list[asyncio.Future[T]] = []
        #: The CancelledError this view's waits ended with (cancel()), until a new wait through
        #: it begins; None otherwise.
        self._gave_up: asyncio.CancelledError | None = None
        #: Listed in its completion's views (_Once.watch).
        self._watched = False
        #: What asyncio.isfuture reads: a future-like object (gather takes it as it is).
        self._asyncio_future_blocking = False

    def __await__(self) -> Generator[Any, None, T]:
        # A new wait: a cancel() ended the waits before it, not this one.
        self._gave_up = None
        future = self._once.future
        if future.done():  # no step to wait: the result (or the error) at once
            return future.__await__()
        waiter: asyncio.Future[T] = new_future(future.get_loop())
        self._awaits.append(waiter)
        self._once.watch(self)
        return waiter.__await__()

    __iter__ = __await__  # as asyncio.Future: ``yield from`` in generator-based code

    def _waiting(self) -> bool:
        """Whether a wait through this view is still pending (the awaits given up are
        forgotten)."""
        self._awaits = [w for w in self._awaits if not w.done()]
        return bool(self._callbacks or self._awaits)

    def _happened(self) -> None:
        future = self._once.future
        awaits, self._awaits = self._awaits, []
        error = None if future.cancelled() else future.exception()
        for waiter in awaits:
            if waiter.done():
                continue  # its waiter gave up
            if future.cancelled():
                waiter.cancel()
            elif error is not None:
                waiter.set_exception(error)
            else:
                waiter.set_result(future.result())
        callbacks, self._callbacks = self._callbacks, []
        for fn, context in callbacks:
            _call_soon(future.get_loop(), fn, self, context)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop it belongs to (asyncio's future protocol)."""
        return self._once.future.get_loop()

    def done(self) -> bool:
        """Whether it happened (a result or an error is set), or this view's waits were
        cancelled."""
        return self._gave_up is not None or self._once.future.done()

    def result(self) -> T:
        """The result; raises the error if it failed.

        Raises:
            asyncio.InvalidStateError: it has not happened yet (``await`` it instead).
            asyncio.CancelledError: this view's waits were cancelled (:meth:`cancel`).
        """
        if self._gave_up is not None:
            raise self._gave_up
        return self._once.future.result()

    def exception(self) -> BaseException | None:
        """The error it failed with, or None.

        Raises:
            asyncio.InvalidStateError: it has not happened yet.
            asyncio.CancelledError: this view's waits were cancelled (:meth:`cancel`).
        """
        if self._gave_up is not None:
            raise self._gave_up
        return self._once.future.exception()

    def cancelled(self) -> bool:
        """Whether this view's waits were cancelled (the job's completion never is)."""
        return self._gave_up is not None

    def cancel(self, msg: Any = None) -> bool:
        """Stop the waits made through this view — its ``await`` s end with CancelledError, its
        done-callbacks are called as cancelled — and nothing else: the job keeps running, and
        its completion stays pending for every other view. What ``gather``, ``wait_for`` and
        the cancelling of what ``asyncio.wait`` left pending do. Returns False if it had
        already happened. The view reads as cancelled, as a future does, until a new wait
        through it (``await``, a done-callback) begins; ``job.done`` read again is a new view.

        To stop the job itself: ``job.cancel()`` or ``pyjobq.cancel_job(job.id)``.
        """
        if self.done():
            return False
        self._waiting()  # the awaits given up already are not cancelled again
        self._gave_up = asyncio.CancelledError() if msg is None else asyncio.CancelledError(msg)
        awaits, self._awaits = self._awaits, []
        for waiter in awaits:
            waiter.cancel(msg)
        callbacks, self._callbacks = self._callbacks, []
        loop = self.get_loop()
        for fn, context in callbacks:
            _call_soon(loop, fn, self, context)
        return True

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        """The CancelledError this view's waits ended with (what ``gather`` raises)."""
        return self._gave_up if self._gave_up is not None else asyncio.CancelledError()

    def add_done_callback(self, fn: Callable[[Completion[T]], object], *,
                          context: contextvars.Context | None = None) -> None:
        """Call ``fn(completion)`` soon after it happens (soon, if it already has)."""
        if context is None:
            context = contextvars.copy_context()
        if self._once.future.done():
            _call_soon(self.get_loop(), fn, self, context)
            return
        self._gave_up = None  # a new wait: a cancel() ended the waits before it, not this one
        self._callbacks.append((fn, context))
        self._once.watch(self)

    def remove_done_callback(self, fn: Callable[[Completion[T]], object]) -> int:
        """Forget every ``fn`` added by :meth:`add_done_callback` to this completion, through
        any view of it; returns how many."""
        removed = 0
        views = list(self._once.views)
        if not any(view is self for view in views):
            views.append(self)
        for view in views:
            kept = [(f, c) for f, c in view._callbacks if f != fn]
            removed += len(view._callbacks) - len(kept)
            view._callbacks = kept
        return removed

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Completion) and other._once is self._once

    def __hash__(self) -> int:
        return id(self._once)

    def __repr__(self) -> str:
        what = self._once.what
        if self._gave_up is not None:
            return f"<Completion {what}: this wait cancelled>"
        future = self._once.future
        if not future.done():
            return f"<Completion {what} pending>"
        error = future.exception()
        return f"<Completion {what} {'raised ' + repr(error) if error else 'done'}>"


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[Any], object], arg: Any,
               context: contextvars.Context) -> None:
    """``fn(arg)`` in ``context``, with every other done-callback due on ``loop``, in one step
    (:func:`~pyjobq.loop.soon`: on a page, at the end of the event that made it due)."""
    soon(functools.partial(fn, arg), loop, context=context)


class Job:
    """A handle on a queued job: ``await job`` gives its :class:`~pyjobq.Outcome`.

    Attributes:
        id: the job's id (a caller-chosen one for ``enqueue(id=...)``).
        done: a :class:`Completion` resolving to the same outcome as ``await job``
            once the job is done, failed or cancelled (a deleted job resolves as
            cancelled with code ``deleted``). It raises only when this page can no
            longer learn the outcome (:class:`~pyjobq.WorkerUnavailable`).
        stored: a :class:`Completion` resolving to None once the record is written;
            it raises the storage error if it could not be (``done`` then resolves
            as failed with code ``not_stored``).

    Any number of waiters may await ``job``, ``job.done`` or ``job.stored``; one
    that gives up (``asyncio.wait_for`` timing out, a cancelled task) leaves them
    pending for the others.

    As RQ, arq or Celery users expect, the handle also answers for its job:
    ``await job.result(timeout=...)``, ``await job.status()``, ``await job.cancel()``,
    ``await job.retry()`` and ``await job.delete()`` — for volatile and persistent jobs alike.
    """

    __slots__ = ("id", "_done", "_stored", "_done_once", "_stored_once", "_control", "_volatile",
                 "_progress")

    def __init__(self, job_id: str, control: JobControl | None = None, *,
                 volatile: bool = False) -> None:
        loop = asyncio.get_event_loop()
        self.id: str = job_id
        #: The queue that made this handle; None for a handle made by hand (a test's).
        self._control = control
        #: A volatile job's engine forgets it once done: ``status()`` then reads ``done``.
        self._volatile = volatile
        # An error set on either is marked retrieved as it is set (_Once.fail), not by a
        # done-callback: that would cost a step of the event loop — a browser task under
        # Pyodide's — per job, for jobs that never fail.
        self._done: asyncio.Future[Outcome] = new_future(loop)
        self._stored: asyncio.Future[None] = new_future(loop)
        self._done_once: _Once[Outcome] = _Once(self._done, f"job {job_id}'s done")
        self._stored_once: _Once[None] = _Once(self._stored, f"job {job_id}'s stored")
        self._progress: float | None = None

    @property
    def progress(self) -> float | None:
        """The last progress (0..1) its executor reported (``report_progress``), as this tab
        heard it; None before any. A persistent job's reports reach every tab of the origin
        while it runs (they are never stored: after a reload it is None until the next); a
        volatile job's stay in its own tab."""
        return self._progress

    @property
    def done(self) -> Completion[Outcome]:
        """A :class:`Completion` resolving to the job's :class:`~pyjobq.Outcome` (a view of its
        own at each read: giving up on it stops only that wait)."""
        return Completion(self._done_once)

    @property
    def stored(self) -> Completion[None]:
        """A :class:`Completion` resolving to None once the record is written (a view of its
        own at each read)."""
        return Completion(self._stored_once)

    def __await__(self) -> Generator[Any, None, Outcome]:
        return self.done.__await__()

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the job to end and return its result (what the executor returned; for a
        fetch job the response's parsed body).

        Args:
            timeout: the longest to wait, in seconds (finite, >= 0); None waits until the job
                ends. Giving up stops only this wait: the job keeps running, and ``done`` stays
                pending for every other waiter.

        Raises:
            InvalidJobError: ``timeout`` is not None nor a finite number >= 0 (``nan``,
                ``inf``, a negative number, a str): a ``ValueError``.
            JobFailed: the job failed or was cancelled (deleted jobs are cancelled with code
                ``deleted``); ``.outcome`` is its :class:`~pyjobq.Outcome`.
            TimeoutError: ``timeout`` passed before the job ended (the job keeps running).
            WorkerUnavailable: this page can no longer learn the outcome (as ``await job``).
        """
        # nan compares false with every bound (it would wait for ever), and inf is None spelt
        # another way: only a finite count of seconds is a timeout.
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(
                timeout, (int, float)) or not math.isfinite(timeout) or timeout < 0):
            raise InvalidJobError(
                f"job.result(timeout): expected a finite number of seconds >= 0, or None to "
                f"wait until the job ends; got {timeout!r}")
        try:
            outcome = await asyncio.wait_for(self.done, timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"job {self.id} did not end within {timeout} s; it keeps running — await "
                "job.result() again to keep waiting, or job.cancel() to stop it") from None
        if outcome.status is not Status.DONE:
            raise JobFailed(outcome)
        return outcome.result

    def _queue(self, call: str) -> JobControl:
        if self._control is None:
            raise PyjobqError(
                f"job.{call}(): this handle on job {self.id} was made by hand, not by a queue; "
                f"use the handle enqueue or pyjobq.job(id) returns, or pyjobq.{call}_job(id)")
        return self._control

    async def status(self) -> Status | None:
        """The job's status now, read from its record (not from news heard earlier).

        Returns None when the job has no record: it was deleted, or cleaned up
        (``cleanup_old``), or never existed. A volatile job's engine forgets it once it is
        done; its handle then answers from ``done`` (:attr:`Status.DONE`).
        """
        control = self._queue("status")
        record = await control.get_job(self.id)
        if record is None:
            # Done volatile jobs are forgotten at once; failed and cancelled ones are kept until
            # deleted, so a volatile job without a record and not done was deleted.
            if (self._volatile and self._done.done() and self._done.exception() is None
                    and self._done.result().status is Status.DONE
                    and self._done.result().code != Code.DELETED):
                return Status.DONE
            return None
        status = record.get("status")
        return status if isinstance(status, Status) else Status(str(status))

    def cancel(self) -> Coroutine[Any, Any, bool]:
        """``pyjobq.cancel_job(job.id)``: mark the unfinished job cancelled (its run is
        stopped; the record is kept). Returns whether it changed. Sent at the call."""
        return self._queue("cancel").cancel_job(self.id)

    def retry(self) -> Coroutine[Any, Any, bool]:
        """``pyjobq.retry_job(job.id)``: run a failed or cancelled job again with a fresh
        attempt budget. Returns whether it changed. Sent at the call.

        ``done`` already resolved with the first outcome stays so: take a new handle with
        ``pyjobq.job(job.id)`` to wait for the retried run."""
        return self._queue("retry").retry_job(self.id)

    def delete(self) -> Coroutine[Any, Any, bool]:
        """``pyjobq.delete_job(job.id)``: delete the job's record, ending its run if one is
        under way (``done`` resolves cancelled, code ``deleted``). Returns whether it existed.
        Sent at the call."""
        return self._queue("delete").delete_job(self.id)

    def _awaited(self) -> bool:
        """Whether anyone waits for ``done`` now: what the page's recheck reads the store for."""
        return self._done_once.awaited()

    def _settle(self, outcome: Outcome) -> None:
        self._done_once.settle(outcome)

    def _lose(self, error: BaseException) -> None:
        """This page can no longer learn the job's outcome (:class:`~pyjobq.WorkerUnavailable`):
        ``done`` raises ``error`` (an application that never awaits it gets no warning)."""
        self._done_once.fail(error)

    def _store_ok(self) -> None:
        """The record is written: ``stored`` resolves."""
        self._stored_once.settle(None)

    def _store_failed(self, error: BaseException) -> None:
        """The record could not be written: ``stored`` raises ``error`` (reported through
        ``done`` too, so it does not warn)."""
        self._stored_once.fail(error)

    def __repr__(self) -> str:
        if not self._done.done():
            state = "outstanding"
        elif self._done.exception() is not None:
            state = "lost"
        else:
            state = str(self._done.result().status)
        return f"<Job {self.id} {state}>"


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


@dataclasses.dataclass(frozen=True)
class StorageState:
    """What the browser says of the origin's storage, where the stored jobs live
    (``queue.storage()``). Each field is None where it is not known: on plain CPython, or a
    browser that gave no answer."""

    #: Whether the browser keeps the storage (``navigator.storage.persisted()``): False means
    #: it may evict it under pressure, and WebKit after days without a visit.
    persisted: bool | None
    #: What the origin uses, in bytes (``navigator.storage.estimate()``).
    usage_bytes: int | None
    #: What it may use, in bytes.
    quota_bytes: int | None


class JobUpdate(dict[str, Any]):
    """A ``job-update``: the record's fields (no ``_params``), as a dict with attribute access.

    ``status`` is a :class:`~pyjobq.Status` (a ``str`` enum: ``update.status == "done"``
    holds). Stores never hand out a record with a status this version does not know; news
    of one from another tab running a newer pyjobq keeps it as the plain str it came as.
    Besides the record's fields an update may carry ``deleted: True`` (the record
    is gone), ``volatile: True`` (a job only this tab runs) or ``progress`` (0..1).
    A missing field raises :class:`AttributeError` as an attribute, ``KeyError`` as a key.
    """

    def __init__(self, fields: Any = (), /, **more: Any) -> None:
        super().__init__(fields, **more)
        status = self.get("status")
        if isinstance(status, str) and not isinstance(status, Status):
            self["status"] = known_status(status)

    @property
    def id(self) -> str:
        """The job's id."""
        return str(self["id"])

    @property
    def status(self) -> Status:
        """The job's status; missing (``AttributeError``) on an update that only says
        ``deleted``."""
        try:
            return self["status"]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError("status") from None

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def known_status(status: str) -> Status | str:
    """``status`` as a :class:`Status` when this version knows it; otherwise unchanged."""
    try:
        return Status(status)
    except ValueError:
        return status
