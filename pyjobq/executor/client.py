"""This page's word with one engine: :class:`EngineClient`.

A page talks to two engines, both :class:`~pyjobq.engine.scheduler.Scheduler` s: the persistent one
(the scheduler worker, and the page's own request scheduler on the same store) and the
volatile one (in this tab, on a store only it holds). Each is one :class:`EngineClient`: it
files jobs (a burst in one ``enqueue`` message and one transaction), sends requests and
settles their replies in call order, hands its engine's ``run`` s to its
:class:`~pyjobq.executor.runner.Runner` and its ``job-update`` s to its
:class:`~pyjobq.executor.registry.Handles`. The persistent client also holds its requests until its
worker's script runs (``worker_alive``) and, once the worker cannot serve it, fails every
request at once (:meth:`fail`); the worker's boot itself is watched and retried by
:class:`pyjobq.executor.boot.Boot`.

Runs on the page only (its main thread, or a worker host such as a notebook kernel), never in
the scheduler worker: the engine's end of a link is the scheduler's own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable

from ..core import errors
from ..core.codes import Code
from ..core.errors import PyjobqError, WorkerUnavailable
from ..core.messages import make, updated_jobs
from ..core.outcome import Outcome
from ..core.ports import Link
from ..core.records import NewJob, new_id
from ..core.router import Router
from ..core.status import Status
from ..engine.lease import LEASE_MESSAGES
from ..handle import Job
from ..loop import new_future
from .registry import Handles
from .runner import Runner

if TYPE_CHECKING:
    from ..engine.scheduler import Scheduler

log = logging.getLogger("pyjobq")

#: The worker's boot steps: :class:`pyjobq.executor.boot.Boot` follows them beside this client.
BOOT_MESSAGES = frozenset({"worker_progress", "worker_fetched", "worker_booting", "worker_error",
                           "worker_attached", "worker_preinstalled"})


#: The classes a failed reply may name: pyjobq's own errors, never an arbitrary name.
_ERRORS: dict[str, type[PyjobqError]] = {
    name: kind for name in errors.__all__
    if isinstance(kind := getattr(errors, name), type) and issubclass(kind, PyjobqError)}


def reply_error(msg: dict[str, Any]) -> PyjobqError:
    """The error a failed ``reply`` stands for: of the class the engine raised (``error_type``),
    when it is one of pyjobq's errors, so a page can catch what it would have caught in-process."""
    message = str(msg.get("error"))
    kind = _ERRORS.get(str(msg.get("error_type")))
    if kind is not None:
        try:
            return kind(message)
        except TypeError:  # a class with other constructor arguments
            pass
    return PyjobqError(message)


class EngineClient:
    """Talks to one engine over ``link``.

    Args:
        link: reaches the engine that runs this client's jobs (``run`` comes from there).
        runner: runs them.
        handles: the handles of this engine's jobs.
        source: the ``source`` the engine stamps on its news.
        requests: reaches the engine that answers store requests, when not ``link`` (a
            browser page's own request scheduler). Requests sent there wait, in order, until
            the worker's script says ``worker_alive`` (or its boot is to be retried,
            :meth:`release_held`): a worker that cannot start at all fails them instead of
            leaving records no tab of this code could ever process.
        engine: the engine itself when it runs in this Python process; None for a worker.
    """

    def __init__(self, link: Link, *, runner: Runner, handles: Handles, source: str,
                 requests: Link | None = None, engine: "Scheduler | None" = None) -> None:
        self.link = link
        self.requests_link = requests if requests is not None else link
        self.runner = runner
        self.handles = handles
        self.source = source
        #: The in-process engine behind :attr:`link`; None when it runs in a worker.
        self.engine = engine
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._batch: list[tuple[NewJob, Job]] = []
        self._held: list[dict[str, Any]] | None = [] if requests is not None else None
        #: Why this engine cannot serve this page (its worker did not start or stopped for
        #: good): every request fails with it, at once. None while it is usable.
        self.unavailable: WorkerUnavailable | None = None
        #: Called once with that error.
        self.on_unavailable: Callable[[WorkerUnavailable], None] | None = None
        #: True once the engine said ``ready``.
        self.ready = False
        #: What this client does with each message type its engine sends.
        self.router = router = Router("pyjobq", {
            "run": runner.run,
            "run_check": runner.check,
            "abandon_run": lambda msg: runner.abandon(msg["job_id"], msg["claim"]),
            "abort_run": runner.abort,
            "reply": self._reply,
            "job-update": self._job_update,
            "ready": self._ready,
            "worker_alive": lambda _msg: self.release_held(),
            "stopped": self._stopped,
        }, ignore=LEASE_MESSAGES | BOOT_MESSAGES, origin="its worker")
        self._unsubscribe = [link.subscribe(router)]
        if requests is not None:
            self._unsubscribe.append(requests.subscribe(router))

    # ------------------------------------------------------------ filing

    def file(self, new: NewJob) -> Job:
        """File ``new`` and return its handle. Jobs filed in one burst travel in one message."""
        job = self.handles.add(new.id)
        if not self._batch:
            asyncio.get_event_loop().call_soon(self.flush)
        self._batch.append((new, job))
        return job

    def flush(self) -> None:
        """Send the jobs filed since the last flush (before any other request: call order)."""
        batch, self._batch = self._batch, []
        if not batch:
            return
        future = self._send(make("enqueue", jobs=[new.to_message() for new, _ in batch]),
                            self.requests_link)

        def stored(f: asyncio.Future[Any]) -> None:
            error = f.exception() if not f.cancelled() else PyjobqError("enqueue was cancelled")
            for new, job in batch:
                if error is None:
                    job._store_ok()
                    continue
                job._store_failed(error)
                self.runner.closures.pop(new.id, None)
                code = error.code if isinstance(error, WorkerUnavailable) else Code.NOT_STORED
                self.handles.settle(new.id, Outcome(id=new.id, status=Status.FAILED,
                                                    error=f"not stored: {error}", code=code))

        future.add_done_callback(stored)

    def look_up(self, job_id: str) -> Job:
        """A handle on a job filed earlier (e.g. before a reload); ``done`` resolves as usual."""
        existing = self.handles.get(job_id)
        if existing is not None:
            return existing
        job = self.handles.add(job_id)
        job._store_ok()

        def found(f: asyncio.Future[Any]) -> None:
            error = PyjobqError("the lookup was cancelled") if f.cancelled() else f.exception()
            if error is not None:
                # The record may well exist: say why this page cannot tell, never "not found".
                self.handles.jobs.pop(job_id, None)
                job._lose(error)
                return
            self.handles.settle_from(job_id, f.result(), missing=self.handles.heard_gone(job_id)
                                     or Outcome(id=job_id, status=Status.FAILED,
                                                error=f"no job with id {job_id!r}",
                                                code=Code.NOT_FOUND))

        self.read(job_id).add_done_callback(found)
        return job

    def read(self, job_id: str) -> asyncio.Future[Any]:
        """The stored record of ``job_id`` (None: there is none)."""
        return self.request(make("get_job", job_id=job_id))

    def read_ended(self, job_ids: list[str]) -> asyncio.Future[Any]:
        """Which of ``job_ids`` have ended, in one request: the record of each that did, None for
        each with no record; unfinished ones are left out (``ended_jobs``)."""
        return self.request(make("ended_jobs", job_ids=job_ids))

    def knows(self, job_id: Any) -> bool:
        """Whether ``job_id`` is a job this client filed and may still run (its closure is here)."""
        return job_id in self.runner.closures

    # ------------------------------------------------------------ requests

    def request(self, msg: dict[str, Any], *, to_worker: bool = False) -> asyncio.Future[Any]:
        """Send a request; the future settles with its reply's value or error. Jobs filed just
        before go first, or ``delete_job(id)`` right after filing would find nothing to delete.
        ``to_worker``: to the engine behind :attr:`link` even when requests go elsewhere."""
        if self._batch:
            self.flush()
        return self._send(msg, self.link if to_worker else self.requests_link)

    def send(self, msg: dict[str, Any]) -> None:
        """Send a message that asks for no reply (``wake``, ``online``)."""
        self.link.send(msg)

    def _send(self, msg: dict[str, Any], link: Link) -> asyncio.Future[Any]:
        future = new_future()
        if self.unavailable is not None:
            future.set_exception(self.unavailable)
            return future
        request_id = new_id()
        self._pending[request_id] = future
        message = {**msg, "request_id": request_id}
        if link is self.requests_link and self._held is not None:
            self._held.append(message)
            return future
        try:
            link.send(message)
        except Exception as exc:  # a message the link cannot carry: fail it, never leave it waiting
            self._pending.pop(request_id, None)
            future.set_exception(PyjobqError(
                f"{msg.get('type')} could not be sent to the worker: {exc}"))
        return future

    def _reply(self, msg: dict[str, Any]) -> None:
        future = self._pending.pop(msg["request_id"], None)
        if future is None or future.done():
            return
        if msg["ok"]:
            future.set_result(msg.get("value"))
        else:
            future.set_exception(reply_error(msg))

    def _job_update(self, msg: dict[str, Any]) -> None:
        for job in updated_jobs(msg):
            job_id = job.get("id")
            # A retried job runs its closure again: keep the closures of failed and cancelled
            # jobs until they are deleted.
            if isinstance(job_id, str) and (job.get("deleted")
                                            or job.get("status") == Status.DONE.value):
                self.runner.closures.pop(job_id, None)
            self.handles.update(job)

    # ------------------------------------------------------------ the worker's start

    def _ready(self, msg: dict[str, Any]) -> None:
        if msg["source"] == self.source:
            self.ready = True

    def release_held(self) -> None:
        """Send the requests held since the start (the worker's script runs, or its boot is
        being retried: the page's own scheduler stores them either way)."""
        held, self._held = self._held, None
        for message in held or ():
            self.requests_link.send(message)

    def _stopped(self, msg: dict[str, Any]) -> None:
        self.fail(WorkerUnavailable(f"persistent jobs stopped on this page: {msg['reason']}",
                                    code=Code.WORKER_STOPPED, worker_message=msg["reason"]))

    def fail(self, error: WorkerUnavailable) -> None:
        """The engine cannot serve this page any more: fail every request that waits on it and
        every later one at once with ``error``, and make each stored job's ``done`` raise it
        (this page can no longer learn their outcomes). Only the first call counts."""
        if self.unavailable is not None:
            return
        self.unavailable = error
        self._held = None  # their futures fail below; the messages are never sent
        log.error("pyjobq: %s", error)
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        self.flush()  # jobs filed this turn fail through their enqueue, which now fails at once
        self.handles.lose_stored(error)
        if self.on_unavailable is not None:
            try:
                self.on_unavailable(error)
            except Exception:
                log.exception("pyjobq: the on_unavailable hook raised")

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
