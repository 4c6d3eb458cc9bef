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

The handle's own calls — :meth:`Job.result`, :meth:`Job.status`, :meth:`Job.cancel`,
:meth:`Job.retry`, :meth:`Job.delete` — ask the queue that made the handle (its
:class:`JobControl`, the executor side) exactly what the module functions ask
(``cancel_job(job.id)`` and the rest): they wait on ``done`` like any waiter and settle nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine, Generator, Generic, Protocol, TypeVar

from .core.codes import Code
from .core.errors import InvalidJobError, PyjobqError
from .core.outcome import JobFailed, Outcome
from .core.status import Status

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

    As RQ, arq or Celery users expect, the handle also answers for its job:
    ``await job.result(timeout=...)``, ``await job.status()``, ``await job.cancel()``,
    ``await job.retry()`` and ``await job.delete()`` — for volatile and persistent jobs alike.
    """

    __slots__ = ("id", "_done", "_stored", "done", "stored", "_control", "_volatile")

    def __init__(self, job_id: str, control: JobControl | None = None, *,
                 volatile: bool = False) -> None:
        loop = asyncio.get_event_loop()
        self.id: str = job_id
        #: The queue that made this handle; None for a handle made by hand (a test's).
        self._control = control
        #: A volatile job's engine forgets it once done: ``status()`` then reads ``done``.
        self._volatile = volatile
        # An error set on either is marked retrieved as it is set (_lose, _store_failed), not by
        # a done-callback: that would cost a step of the event loop — a browser task under
        # Pyodide's — per job, for jobs that never fail.
        self._done: asyncio.Future[Outcome] = loop.create_future()
        self._stored: asyncio.Future[None] = loop.create_future()
        self.done: Completion[Outcome] = Completion(self._done, f"job {job_id}'s done")
        self.stored: Completion[None] = Completion(self._stored, f"job {job_id}'s stored")

    def __await__(self) -> Generator[Any, None, Outcome]:
        return self.done.__await__()

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the job to end and return its result (what the executor returned; for a
        fetch job the response's parsed body).

        Args:
            timeout: the longest to wait, in seconds; None waits until the job ends. Giving
                up stops only this wait: the job keeps running, and ``done`` stays pending
                for every other waiter.

        Raises:
            JobFailed: the job failed or was cancelled (deleted jobs are cancelled with code
                ``deleted``); ``.outcome`` is its :class:`~pyjobq.Outcome`.
            TimeoutError: ``timeout`` passed before the job ended (the job keeps running).
            WorkerUnavailable: this page can no longer learn the outcome (as ``await job``).
        """
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(
                timeout, (int, float)) or timeout < 0):
            raise InvalidJobError(
                f"job.result(timeout): expected a number of seconds >= 0, or None to wait "
                f"until the job ends; got {timeout!r}")
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

    def _settle(self, outcome: Outcome) -> None:
        if not self._done.done():
            self._done.set_result(outcome)
            self.done._resolve()

    def _lose(self, error: BaseException) -> None:
        """This page can no longer learn the job's outcome: ``done`` raises ``error``."""
        if not self._done.done():
            self._done.set_exception(error)
            # done raises only when this page can no longer learn the outcome
            # (WorkerUnavailable): an application that never awaits it must not get
            # "exception never retrieved".
            _retrieve(self._done)
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
            _retrieve(self._stored)  # reported through done too: don't warn twice
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
