"""The handle ``enqueue`` returns: :class:`Job`, its :class:`Completion` s and :class:`JobUpdate`.

Theory of operation
-------------------
A job ends once, but any number of coroutines may wait for it: a page's
``await job``, a table's ``asyncio.wait_for(job.done, 5)``, a test's ``gather``.
A bare :class:`asyncio.Future` shared by all of them is cancelled by the first
waiter that gives up (``wait_for`` cancels what it awaits on timeout; so does
cancelling the awaiting task), and the outcome is then lost to every other
waiter. So ``job.done`` and ``job.stored`` are :class:`Completion` s: read-only
views of one private future, where every ``await`` waits on a future of its own.
Giving up cancels only that waiter's wait. Only the executor side settles the
private future (``Job._settle``, ``_lose``, ``_store_ok``, ``_store_failed``), and
settling it resolves every waiter's future in the same step — where
:func:`asyncio.shield` took one event-loop step more, which under Pyodide's loop
on a page is one browser task more for every awaited job. Nothing else settles the
private futures (``tests/test_job_handle.py`` checks the source), so no waiter is
left behind.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Generator, Generic, TypeVar

from .core.errors import PyjobqError
from .core.outcome import Outcome
from .core.status import Status

T = TypeVar("T")


class Completion(Generic[T]):
    """Something that happens once, awaitable by any number of waiters: ``job.done``,
    ``job.stored``.

    ``await completion`` (also through :func:`asyncio.wait_for`, :func:`asyncio.gather`
    or :func:`asyncio.wait`) returns its result or raises its error. A waiter
    that gives up — a ``wait_for`` that times out, a cancelled task — stops only
    its own wait: the completion stays pending, and every other waiter, earlier
    or later, still gets the result. It also answers like a future:
    :meth:`done`, :meth:`result`, :meth:`exception`, :meth:`add_done_callback`.
    It cannot be cancelled (:meth:`cancel` raises): to stop a job, call
    :func:`pyjobq.cancel_job` or :func:`pyjobq.delete_job`.
    """

    __slots__ = ("_future", "_what", "_callbacks", "_waiters")

    def __init__(self, future: asyncio.Future[T], what: str) -> None:
        self._future = future
        self._what = what
        self._callbacks: list[tuple[Callable[[Completion[T]], object],
                                    Callable[[asyncio.Future[T]], None]]] = []
        #: Each pending ``await``'s own future: cancelling one leaves the shared future alone.
        self._waiters: list[asyncio.Future[T]] = []

    def __await__(self) -> Generator[Any, None, T]:
        if self._future.done():  # no step to wait: the result (or the error) at once
            return self._future.__await__()
        waiter: asyncio.Future[T] = self._future.get_loop().create_future()
        self._waiters.append(waiter)
        return waiter.__await__()

    def _resolve(self) -> None:
        """Hand the shared future's result to every waiter still waiting: :class:`Job` calls it
        as it settles the shared future."""
        if not self._future.done():
            return
        waiters, self._waiters = self._waiters, []
        error = None if self._future.cancelled() else self._future.exception()
        for waiter in waiters:
            if waiter.done():
                continue  # its waiter gave up
            if self._future.cancelled():
                waiter.cancel()
            elif error is not None:
                waiter.set_exception(error)
            else:
                waiter.set_result(self._future.result())

    def done(self) -> bool:
        """Whether it happened (a result or an error is set)."""
        return self._future.done()

    def result(self) -> T:
        """The result; raises the error if it failed.

        Raises:
            asyncio.InvalidStateError: it has not happened yet (``await`` it instead).
        """
        return self._future.result()

    def exception(self) -> BaseException | None:
        """The error it failed with, or None.

        Raises:
            asyncio.InvalidStateError: it has not happened yet.
        """
        return self._future.exception()

    def cancelled(self) -> bool:
        """Always False: a completion is never cancelled (a waiter's wait may be)."""
        return self._future.cancelled()

    def cancel(self, msg: Any = None) -> bool:
        """Refused: the completion is shared by every waiter of the job.

        Raises:
            PyjobqError: always. Cancel the task that awaits it (or let ``wait_for``
                time out) to stop waiting; call ``pyjobq.cancel_job(job.id)`` to stop the job.
        """
        raise PyjobqError(
            f"{self._what} is shared by every waiter and cannot be cancelled: cancel the task "
            f"that awaits it (or use asyncio.wait_for) to stop waiting, or call "
            f"pyjobq.cancel_job(job.id) to stop the job")

    def add_done_callback(self, fn: Callable[[Completion[T]], object]) -> None:
        """Call ``fn(completion)`` soon after it happens (at once if it already has)."""
        def call(_future: asyncio.Future[T]) -> None:
            fn(self)

        self._callbacks.append((fn, call))
        self._future.add_done_callback(call)

    def remove_done_callback(self, fn: Callable[[Completion[T]], object]) -> int:
        """Forget every ``fn`` added by :meth:`add_done_callback`; returns how many."""
        kept = [(f, c) for f, c in self._callbacks if f != fn]
        removed = 0
        for f, call in self._callbacks:
            if f == fn:
                removed += self._future.remove_done_callback(call)
        self._callbacks = kept
        return removed

    def __repr__(self) -> str:
        if not self._future.done():
            return f"<Completion {self._what} pending>"
        error = self._future.exception()
        return f"<Completion {self._what} {'raised ' + repr(error) if error else 'done'}>"


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
    """

    __slots__ = ("id", "_done", "_stored", "done", "stored")

    def __init__(self, job_id: str) -> None:
        loop = asyncio.get_event_loop()
        self.id: str = job_id
        self._done: asyncio.Future[Outcome] = loop.create_future()
        self._stored: asyncio.Future[None] = loop.create_future()
        # An unobserved storage error is reported through done; don't warn twice.
        self._stored.add_done_callback(_retrieve)
        # done raises only when this page can no longer learn the outcome (WorkerUnavailable);
        # an application that never awaits it must not get "exception never retrieved".
        self._done.add_done_callback(_retrieve)
        self.done: Completion[Outcome] = Completion(self._done, f"job {job_id}'s done")
        self.stored: Completion[None] = Completion(self._stored, f"job {job_id}'s stored")

    def __await__(self) -> Generator[Any, None, Outcome]:
        return self.done.__await__()

    def _settle(self, outcome: Outcome) -> None:
        if not self._done.done():
            self._done.set_result(outcome)
            self.done._resolve()

    def _lose(self, error: BaseException) -> None:
        """This page can no longer learn the job's outcome: ``done`` raises ``error``."""
        if not self._done.done():
            self._done.set_exception(error)
            self.done._resolve()

    def _store_ok(self) -> None:
        """The record is written: ``stored`` resolves."""
        if not self._stored.done():
            self._stored.set_result(None)
            self.stored._resolve()

    def _store_failed(self, error: BaseException) -> None:
        """The record could not be written: ``stored`` raises ``error``."""
        if not self._stored.done():
            self._stored.set_exception(error)
            self.stored._resolve()

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
