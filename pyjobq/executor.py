"""The executor side: the public API's engine, and where user code runs.

It lives where the user's Python does — a page's main thread, a PyScript
worker, a JupyterLite kernel — and assumes neither ``window`` nor a DOM. It
keeps the closures, answers the scheduler's ``run`` with ``run_started`` and
then ``run_result``, and turns ``job-update`` messages into events and into
the outcomes ``done`` resolves to. It reaches its scheduler only through a
:class:`~pyjobq.core.ports.Link` and other tabs only through a
:class:`~pyjobq.core.ports.Channel`, so it runs unchanged in the browser and
in the CPython simulation.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Mapping

from .abort import AbortSignal
from .core import messages
from .core.messages import ABANDON_GRACE_MS, RECHECK_MS, BadMessage, make
from .core import mode as _mode
from .core.ports import Channel, Clock, Link, LockManager, LockStolen
from .core.outcome import Outcome
from .core.records import DEFAULT_MAX_ATTEMPTS, FETCH_METHODS, NewJob, check_json, new_id
from .core.status import TERMINAL, Status
from .errors import (
    InvalidJobError,
    OrphanedJobError,
    PyjobqError,
    WorkerUnavailable,
)
from .fetch import FETCH, Answer, code_from_body, make_fetch
from .handle import Job, JobUpdate, known_status
from .lease import LEASE_MESSAGES

log = logging.getLogger("pyjobq")

#: The reconstructor name of volatile jobs: their closure lives only in this tab's memory.
VOLATILE = "volatile"

# Which job the current task runs, for report_progress(); asyncio copies it into the task.
_current_run: contextvars.ContextVar[tuple["ExecutorSide", Any, str] | None] = \
    contextvars.ContextVar("pyjobq_current_run", default=None)


def _assume_online() -> bool:
    return True


def report_progress(fraction: float, note: str | None = None) -> None:
    """From inside an executor: tell every job table how far along the job is.

    ``fraction`` is clamped to 0..1. Progress travels in a ``job-update`` and is
    not stored. Outside an executor this raises :class:`PyjobqError`.
    """
    current = _current_run.get()
    if current is None:
        raise PyjobqError("report_progress() was called outside a running job's executor")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise InvalidJobError(f"progress must be a number between 0 and 1, got {fraction!r}")
    _side, link, job_id = current
    link.send(make("progress", job_id=job_id, progress=min(1.0, max(0.0, float(fraction))),
                   note=None if note is None else str(note)))


def current_job_id() -> str | None:
    """From inside an executor: the id of the job it runs; None outside one."""
    current = _current_run.get()
    return None if current is None else current[2]


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The fields of a failed ``run_result``: only these survive the closure (spec: "Where jobs run")."""
    status = getattr(exc, "status", None)
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    code = getattr(exc, "code", None)
    if not isinstance(code, str):
        code = code_from_body(getattr(exc, "body", None))
    message = str(exc) or type(exc).__name__
    return {
        "ok": False,
        "error": message if isinstance(exc, PyjobqError) else f"{type(exc).__name__}: {message}",
        "status": status,
        "code": code,
        "terminal": getattr(exc, "terminal", False) is True,
        "interrupted": getattr(exc, "interrupted", False) is True,
    }


@dataclass
class _Run:
    """A run this page has in hand, from ``run`` until its executor settled."""

    task: asyncio.Future[Any]
    signal: AbortSignal
    #: The scheduler's claim identifier, echoed in every answer; None from an older scheduler.
    claim: str | None
    #: Dropped by the scheduler (``abandon_run``): its outcome is not stored, its end is confirmed.
    abandoned: bool = False
    grace: Any = None


def _claimed(fields: dict[str, Any], msg: Mapping[str, Any]) -> dict[str, Any]:
    """An answer's fields with the claim it answers: echoed only when the ``run`` had one."""
    claim = msg.get("claim")
    return fields if claim is None else {**fields, "claim": claim}


class ExecutorSide:
    def __init__(
        self,
        *,
        link: Link,
        channel: Channel,
        source: str,
        reconstructors: Mapping[str, Callable[[Any], Any]] | None = None,
        transport: Callable[..., Any] | None = None,
        clock: Clock | None = None,
        locks: LockManager | None = None,
        yields: Mapping[str, str] | None = None,
        requests: Link | None = None,
        requests_source: str | None = None,
        is_online: Callable[[], bool] | None = None,
    ) -> None:
        """``link`` reaches the scheduler that runs this tab's jobs (its worker). ``requests``,
        when given, reaches the one that answers this tab's store requests (enqueue, queries,
        deletes): in a browser the page's own, so a tab whose worker waits for the lease
        without Pyodide still stores and answers at once. Default: ``link``.
        ``requests_source`` is that scheduler's source: its channel echoes are this tab's own.
        ``is_online`` is ``navigator.onLine`` where the executor runs, read when an attempt
        fails: the page's word on whether the failure found no network. None: say nothing, and
        the scheduler reads its own when it stores the outcome."""
        from .memory import LoopClock

        self._link = link
        self._requests_link = requests if requests is not None else link
        self._channel = channel
        self._clock = clock or LoopClock()
        self._locks = locks
        self._yields = dict(yields or {})
        self._closures: dict[str, Callable[[AbortSignal], Any]] = {}
        self._volatile: Any = None  # the in-tab Scheduler of volatile jobs, made on first use
        self._volatile_link: Link | None = None
        self.source = source  # the id our scheduler stamps on its updates
        self._own_sources = {source} | ({requests_source} if requests_source else set())
        for own in sorted(self._own_sources):
            channel.ignore_source(own)  # its news comes over the link; the channel's is an echo
        self.transport = transport
        self._registry: dict[str, Callable[[Any], Any]] = {FETCH: make_fetch(lambda: self.transport)}
        self._registry.update(reconstructors or {})
        self._jobs: dict[str, Job] = {}
        self._requests: dict[str, asyncio.Future[Any]] = {}
        self._is_online = is_online
        self._running: dict[str, _Run] = {}
        self._confirming: set[str] = set()  # job ids whose terminal news is being checked
        self._recheck_timer: Any = None
        self._listeners: list[Callable[[JobUpdate], None]] = []
        self._batch: list[tuple[NewJob, Job]] = []
        self._via_worker: set[str] = set()  # ids of requests waiting on the scheduler worker
        #: Why persistent jobs cannot run here: the worker did not start or stopped for good.
        #: Every request to it fails with this error, at once. None while it is usable.
        self.unavailable: WorkerUnavailable | None = None
        #: Called once with that error (the browser runtime writes it to the console).
        self.on_unavailable: Callable[[WorkerUnavailable], None] | None = None
        #: True once the scheduler said ``ready``.
        self.worker_ready = False
        self._ready_timer: Any = None
        # With a separate requests link, store requests wait (in order) until the worker's
        # script has said it runs: a worker that cannot start fails them instead of leaving
        # records no tab of this code could ever process. None: sent at once.
        self._held: list[dict[str, Any]] | None = [] if requests is not None else None
        self._start_timeout_ms: float | None = None
        self._unsubscribe = [link.subscribe(self._on_link), channel.subscribe(self._on_channel)]
        if requests is not None:
            self._unsubscribe.append(requests.subscribe(self._on_link))
        self._channel_open = True
        #: The page-held processor lease (:class:`pyjobq.lease.LeaseHolder`) when this side
        #: has a document; None in a worker host and in plain CPython.
        self.lease_holder: Any = None

    # ------------------------------------------------------------ persistent jobs

    def register_reconstructor(self, name: str, factory: Callable[[Any], Any]) -> None:
        from .config import check_reconstructor

        check_reconstructor(name, factory)
        self._registry[name] = factory

    def enqueue_persistent(
        self,
        reconstructor: str,
        params: Any = None,
        *,
        type: str = "default",
        group: str | None = None,
        label: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        delay_ms: float = 0,
    ) -> Job:
        new = NewJob(id=new_id(), reconstructor=reconstructor, params=params, type=type,
                     group=group, label=label, max_attempts=max_attempts, delay_ms=delay_ms)
        job = Job(new.id)
        self._jobs[new.id] = job
        self._arm_recheck()
        if not self._batch:
            # Jobs filed in one burst travel in one message and one transaction.
            asyncio.get_event_loop().call_soon(self._flush)
        self._batch.append((new, job))
        return job

    def enqueue_fetch(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        type: str = "default",
        group: str | None = None,
        label: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        delay_ms: float = 0,
    ) -> Job:
        if not isinstance(method, str) or method.upper() not in FETCH_METHODS:
            raise InvalidJobError(f"method must be one of {', '.join(sorted(FETCH_METHODS))}, got {method!r}")
        if not isinstance(path, str) or not path:
            raise InvalidJobError(f"path must be a non-empty str, got {path!r}")
        check_json(body, "body")
        return self.enqueue_persistent(
            FETCH, {"method": method.upper(), "path": path, "body": body}, type=type, group=group,
            label=label, max_attempts=max_attempts, delay_ms=delay_ms,
        )

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if batch:
            self._track_stored(self._request(make("enqueue", jobs=[new.to_message() for new, _ in batch])), batch)

    def _track_stored(self, future: asyncio.Future[Any], batch: list[tuple[NewJob, Job]]) -> None:
        def stored(f: asyncio.Future[Any]) -> None:
            error = f.exception() if not f.cancelled() else PyjobqError("enqueue was cancelled")
            for new, job in batch:
                if error is None:
                    job._stored.set_result(None)
                    continue
                job._stored.set_exception(error)
                self._jobs.pop(new.id, None)
                self._closures.pop(new.id, None)
                code = error.code if isinstance(error, WorkerUnavailable) else "not_stored"
                job._settle(Outcome(id=new.id, status=Status.FAILED, error=f"not stored: {error}", code=code))

        future.add_done_callback(stored)

    def job(self, job_id: str) -> Job:
        """A handle on a persistent job by id, e.g. after a reload; ``done`` resolves as usual."""
        existing = self._jobs.get(job_id)
        if existing is not None:
            return existing
        job = Job(job_id)
        job._stored.set_result(None)
        self._jobs[job_id] = job
        self._arm_recheck()

        def found(f: asyncio.Future[Any]) -> None:
            error = PyjobqError("the lookup was cancelled") if f.cancelled() else f.exception()
            if error is not None:
                # The record may well exist: say why this page cannot tell, never "not found".
                self._jobs.pop(job_id, None)
                job._lose(error)
                return
            record = f.result()
            if record is None:
                self._jobs.pop(job_id, None)
                job._settle(Outcome(id=job_id, status=Status.FAILED, error=f"no job with id {job_id!r}",
                                    code="not_found"))
            elif record["status"] in TERMINAL:
                self._jobs.pop(job_id, None)
                job._settle(Outcome.of(record))

        self._request(make("get_job", job_id=job_id)).add_done_callback(found)
        return job

    # ------------------------------------------------------------ volatile jobs

    def _volatile_engine(self) -> Link:
        """Volatile jobs run on the same engine as persistent ones — a
        :class:`~pyjobq.scheduler.Scheduler` — over a store that only this tab holds
        (:class:`~pyjobq.memory.VolatileStore`: no copies, and a job is forgotten once its
        ``done`` is published): same lanes, same backoff, nothing written to IndexedDB."""
        if self._volatile_link is None:
            from .memory import ChannelHub, LockHub, VolatileStore, link_pair
            from .scheduler import Scheduler

            mine, theirs = link_pair(copy=False)  # one Python context: no structured copies
            mine.subscribe(self._on_link)
            self._volatile = Scheduler(
                store=VolatileStore(), locks=LockHub().client(),
                channel=ChannelHub().channel("volatile"),  # heard by no other tab
                link=theirs, clock=self._clock, lock_name="volatile",
                source=self.source + ":volatile", mode=_mode.VOLATILE,
                # The same reading as persistent jobs' when a page says nothing of its own.
                is_online=self._is_online if self._is_online is not None else _assume_online,
            )
            self._volatile.start()
            self._volatile_link = mine
        return self._volatile_link

    def enqueue(
        self,
        executor: Callable[[AbortSignal], Any],
        *,
        id: str | None = None,
        type: str = "default",
        label: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> Job:
        if not callable(executor):
            raise InvalidJobError(f"executor must be an async callable taking the abort signal, got {executor!r}")
        if id is not None and id in self._jobs:
            return self._jobs[id]  # a duplicate outstanding id: the same job, the same done
        new = NewJob(id=id if id is not None else new_id(), reconstructor=VOLATILE, params=None,
                     type=type, label=label, max_attempts=max_attempts)
        job = Job(new.id)
        self._jobs[new.id] = job
        self._closures[new.id] = executor
        link = self._volatile_engine()
        self._track_stored(self._request(make("enqueue", jobs=[new.to_message()]), link), [(new, job)])
        return job

    async def suspend_type(self, job_type: str) -> None:
        """Pause this tab's volatile jobs of ``job_type`` (future ones too), abort the running
        one and return once it has settled. Harmless when already suspended."""
        await self._request(make("suspend_type", job_type=job_type), self._volatile_engine())

    async def resume_type(self, job_type: str) -> None:
        """Return this tab's paused volatile jobs of ``job_type`` to the queue."""
        await self._request(make("resume_type", job_type=job_type), self._volatile_engine())

    async def _either(self, msg: dict[str, Any]) -> Any:
        """A request about one job id: this tab's volatile engine knows it, or the persistent one."""
        if msg.get("job_id") in self._closures and self._volatile_link is not None:
            return await self._request(msg, self._volatile_link)
        return await self._request(msg)

    # ------------------------------------------------------------ requests

    def _request(self, msg: dict[str, Any], link: Link | None = None) -> asyncio.Future[Any]:
        request_id = new_id()
        future = asyncio.get_event_loop().create_future()
        link = link or self._requests_link
        if link is self._requests_link or link is self._link:
            if self._batch and msg.get("type") != "enqueue":
                # Requests reach the worker in call order: jobs filed just before this call go
                # first, or delete_job(id) right after filing would find nothing to delete.
                self._flush()
            if self.unavailable is not None:
                future.set_exception(self.unavailable)
                return future
            self._via_worker.add(request_id)
        self._requests[request_id] = future
        if link is self._requests_link and self._held is not None:
            self._held.append({**msg, "request_id": request_id})
        else:
            try:
                link.send({**msg, "request_id": request_id})
            except Exception as exc:  # a message the link cannot carry: fail it, never leave it waiting
                self._requests.pop(request_id, None)
                self._via_worker.discard(request_id)
                future.set_exception(PyjobqError(f"{msg.get('type')} could not be sent to the worker: {exc}"))
        return future

    def _release_held(self) -> None:
        held, self._held = self._held, None
        for message in held or ():
            self._requests_link.send(message)

    async def query_all(self) -> list[dict[str, Any]]:
        """The origin's persistent records, then this tab's volatile ones (``"volatile": True``)."""
        records: list[dict[str, Any]] = await self._request(make("query_all"))
        if self._volatile_link is not None:
            records += await self._request(make("query_all"), self._volatile_link)
        for record in records:
            if isinstance(record.get("status"), str):
                record["status"] = known_status(record["status"])
        return records

    async def delete_job(self, job_id: str) -> bool:
        return bool(await self._either(make("delete_job", job_id=job_id)))

    async def delete_group(self, group: str) -> int:
        return int(await self._request(make("delete_group", group=group)))

    async def cancel_job(self, job_id: str) -> bool:
        return bool(await self._either(make("cancel_job", job_id=job_id)))

    async def retry_job(self, job_id: str) -> bool:
        return bool(await self._either(make("retry_job", job_id=job_id)))

    async def retry_all(self) -> int:
        count = int(await self._request(make("retry_all")))
        if self._volatile_link is not None:
            count += int(await self._request(make("retry_all"), self._volatile_link))
        return count

    async def cleanup_old(self) -> int:
        return int(await self._request(make("cleanup_old")))

    def wake(self) -> None:
        self._link.send(make("wake"))

    def back_online(self) -> None:
        """The page came back online: jobs waiting out an offline failure become due now —
        persistent ones and this tab's volatile ones alike."""
        self._link.send(make("online"))
        if self._volatile_link is not None:
            self._volatile_link.send(make("online"))

    # ------------------------------------------------------------ events

    def on_update(self, callback: Callable[[JobUpdate], None]) -> Callable[[], None]:
        """Call ``callback(update)`` for every ``job-update``; returns a function that unsubscribes."""
        self._listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return unsubscribe

    async def updates(self) -> AsyncIterator[JobUpdate]:
        """``async for update in updates()``: every ``job-update`` from now on."""
        queue: asyncio.Queue[JobUpdate] = asyncio.Queue()
        unsubscribe = self.on_update(queue.put_nowait)
        try:
            while True:
                yield await queue.get()
        finally:
            unsubscribe()

    def _apply_update(self, job: dict[str, Any], *, trusted: bool = True) -> None:
        """A ``job-update``: news for every listener. ``done`` settles on it only when it is our
        own worker's word (``trusted``) and whole; channel news of an end, or a result too big
        to travel, is checked against the store first (:meth:`_confirm`)."""
        update = JobUpdate(job)
        for listener in list(self._listeners):
            try:
                listener(update)
            except Exception:
                log.exception("pyjobq: a job-update listener raised")
        job_id = job.get("id")
        if not trusted or job.get("result_truncated"):
            if isinstance(job_id, str) and job_id in self._jobs and job_id not in self._closures \
                    and (job.get("deleted") or job.get("status") in TERMINAL):
                self._confirm(job_id)
            return
        if job.get("deleted") or job.get("status") in TERMINAL:
            # A retried volatile job runs its closure again, so keep closures of
            # failed and cancelled jobs until they are deleted.
            if job.get("deleted") or job.get("status") == "done":
                self._closures.pop(job_id, None)  # type: ignore[arg-type]
        handle = self._jobs.get(job_id)  # type: ignore[arg-type]
        if handle is None:
            return
        if job.get("deleted"):
            self._jobs.pop(handle.id, None)
            handle._settle(Outcome(id=handle.id, status=Status.CANCELLED, error="deleted", code="deleted"))
        elif job.get("status") in TERMINAL:
            self._jobs.pop(handle.id, None)
            handle._settle(Outcome.of(job))

    # ------------------------------------------------------------ messages

    def _on_link(self, data: Any) -> None:
        try:
            msg = messages.parse(data)
        except BadMessage as exc:
            log.warning("pyjobq ignored a message from its worker: %s", exc)
            return
        kind = msg["type"]
        if kind == "run":
            link = self._volatile_link if msg["job_id"] in self._closures and self._volatile_link else self._link
            if link is self._link and self.lease_holder is not None and self.lease_holder.refusing:
                # Claimed after this page let the lease go (freeze/pagehide), before the worker
                # knew: give it back unspent for whoever holds the lease now (pyjobq/lease.py).
                self._send_result(msg["job_id"], _claimed({
                    "ok": False, "interrupted": True, "code": "lease_revoked",
                    "error": "the page let the processor lease go (frozen or hidden) before this run began",
                }, msg), link)
                return
            if msg["job_id"] in self._running:
                # A second run of a job this page is still running (an answer of the first may
                # be in flight): refuse it, unspent, rather than run the job twice at once.
                self._send_result(msg["job_id"], _claimed({
                    "ok": False, "interrupted": True, "code": "already_running",
                    "error": "this page is still running an earlier claim of this job",
                }, msg), link)
                return
            started = self._start_run(msg, link)
            if started is not None:
                asyncio.ensure_future(self._finish_run(msg["job_id"], started, link))
        elif kind == "abandon_run":
            self._abandon(msg["job_id"], msg.get("claim"))
        elif kind == "abort_run":
            running = self._running.get(msg["job_id"])
            if running is not None:
                running.signal.abort(msg.get("reason") or "aborted")
        elif kind == "reply":
            self._via_worker.discard(msg["request_id"])
            future = self._requests.pop(msg["request_id"], None)
            if future is None or future.done():
                return
            if msg["ok"]:
                future.set_result(msg.get("value"))
            else:
                future.set_exception(PyjobqError(str(msg.get("error"))))
        elif kind == "job-update":
            for job in messages.updated_jobs(msg):
                self._apply_update(job)
        elif kind in LEASE_MESSAGES:
            pass  # the LeaseHolder's
        elif kind == "ready" and msg["source"] == self.source:
            self.worker_ready = True
            self._disarm_start()
        elif kind == "worker_alive":
            self._disarm_start()  # its script runs: waiting for the lease is not bounded
            self._release_held()
        elif kind == "worker_booting":
            self._arm_start()  # it loads Pyodide now: that is
        elif kind == "worker_error":
            stage = msg.get("stage")
            self.scheduler_unavailable(WorkerUnavailable.not_started(
                stage if isinstance(stage, str) else "start", msg["message"]))
        elif kind == "stopped":
            self.scheduler_unavailable(WorkerUnavailable(
                f"persistent jobs stopped on this page: {msg['reason']}",
                code="worker_stopped", worker_message=msg["reason"]))

    def expect_ready(self, timeout_ms: float) -> None:
        """Bound the worker's start: its script must say ``worker_alive`` within ``timeout_ms``,
        and once it says ``worker_booting`` (it holds the lease and loads Pyodide) its scheduler
        must say ``ready`` within ``timeout_ms`` again. A tab waiting for the lease in between
        waits as long as the lease is held elsewhere. Past a deadline persistent jobs fail with
        a :class:`WorkerUnavailable` (stage ``timeout``): no request waits for ever."""
        self._start_timeout_ms = timeout_ms
        self._arm_start()

    def _arm_start(self) -> None:
        timeout_ms = self._start_timeout_ms
        if timeout_ms is None or self.worker_ready:
            return
        self._disarm_start()

        def check() -> None:
            self._ready_timer = None
            if not self.worker_ready:
                self.scheduler_unavailable(WorkerUnavailable.not_started(
                    "timeout", f"no answer within {timeout_ms / 1000:g} s"))

        self._ready_timer = self._clock.call_later(timeout_ms, check)

    def _disarm_start(self) -> None:
        if self._ready_timer is not None:
            self._ready_timer.cancel()
            self._ready_timer = None

    def scheduler_unavailable(self, error: WorkerUnavailable) -> None:
        """The scheduler worker did not start, or stopped for good: fail every request that
        waits on it and every later one at once with ``error``, and make each persistent
        job's ``done`` raise it (this page can no longer learn their outcomes). Volatile jobs
        run on. Only the first call counts."""
        if self.unavailable is not None:
            return
        self.unavailable = error
        self._held = None  # their futures fail below; the messages are never sent
        log.error("pyjobq: %s", error)
        for request_id in list(self._via_worker):
            future = self._requests.pop(request_id, None)
            if future is not None and not future.done():
                future.set_exception(error)
        self._via_worker.clear()
        # Jobs filed this turn fail through their enqueue request, which now fails at once.
        self._flush()
        for job_id, handle in list(self._jobs.items()):
            if job_id not in self._closures and handle._stored.done():
                self._jobs.pop(job_id, None)
                handle._lose(error)
        if self.on_unavailable is not None:
            try:
                self.on_unavailable(error)
            except Exception:
                log.exception("pyjobq: the on_unavailable hook raised")

    def _on_channel(self, data: Any) -> None:
        try:
            msg = messages.parse(data)
        except BadMessage as exc:
            log.warning("pyjobq ignored a channel message: %s", exc)
            return
        # Our own scheduler's updates arrive over the link; the channel copy is a duplicate.
        # What other tabs (or any same-origin script) post is news: checked before it settles.
        if msg["type"] == "job-update" and msg["source"] not in self._own_sources:
            for job in messages.updated_jobs(msg):
                self._apply_update(job, trusted=False)

    def _outstanding(self) -> list[str]:
        return [job_id for job_id, handle in self._jobs.items()
                if job_id not in self._closures and not handle._done.done()]

    def _arm_recheck(self) -> None:
        if self._recheck_timer is None and self.unavailable is None:
            self._recheck_timer = self._clock.call_later(RECHECK_MS, self._recheck)

    def _recheck(self) -> None:
        """Read the records of persistent jobs still outstanding here, settling those that ended."""
        self._recheck_timer = None
        outstanding = self._outstanding()
        for job_id in outstanding:
            if self._jobs[job_id]._stored.done():
                self._confirm(job_id)
        if outstanding:
            self._arm_recheck()

    def _confirm(self, job_id: str) -> None:
        """Settle ``done`` from the stored record, which news said has ended: terminal → its
        outcome; gone → deleted; anything else → the news was wrong, wait for more."""
        if job_id in self._confirming or self.unavailable is not None:
            return
        self._confirming.add(job_id)

        def read(f: asyncio.Future[Any]) -> None:
            self._confirming.discard(job_id)
            handle = self._jobs.get(job_id)
            if handle is None or f.cancelled() or f.exception() is not None:
                return
            record = f.result()
            if record is None:
                self._jobs.pop(job_id, None)
                handle._settle(Outcome(id=job_id, status=Status.CANCELLED, error="deleted", code="deleted"))
            elif record.get("status") in TERMINAL:
                self._jobs.pop(job_id, None)
                handle._settle(Outcome.of(record))

        self._request(make("get_job", job_id=job_id)).add_done_callback(read)

    def _abandon(self, job_id: str, claim: str | None = None, *, at_once: bool = False) -> None:
        """Drop a run: abort its signal; cancel its task at once unless the executor heeds the
        signal (then only after :data:`ABANDON_GRACE_MS`). The run stays in hand — a second
        ``run`` of the job is refused — until its task ended, which the page then confirms."""
        run = self._running.get(job_id)
        if run is None or (claim is not None and run.claim is not None and claim != run.claim):
            return
        if run.abandoned and not at_once:
            return
        run.abandoned = True
        run.signal.abort("abandoned")
        if at_once or not run.signal.heeded:
            run.task.cancel()
        elif run.grace is None:
            task = run.task

            def cancel() -> None:
                task.cancel()

            run.grace = self._clock.call_later(ABANDON_GRACE_MS, cancel)

    def _start_run(self, msg: dict[str, Any], link: Link) -> asyncio.Future[Any] | None:
        """Rebuild the executor, start it and say ``run_started`` — all in the ``run`` message's
        own event, so the handshake costs no extra turn of the event loop. Returns the task,
        or None when the run was answered at once (orphaned, or the factory raised)."""
        job_id = msg["job_id"]
        name = msg["reconstructor"]
        executor = self._closures.get(job_id)
        if executor is None:
            factory = self._registry.get(name)
            if factory is None:
                self._send_result(job_id, _claimed(error_fields(OrphanedJobError(name)), msg), link)
                return None
            try:
                executor = factory(msg.get("params"))
            except Exception as exc:
                fields = error_fields(exc)
                fields.update(error=f"reconstructor {name!r} raised {fields['error']}",
                              terminal=True, code="reconstructor_failed")
                self._send_result(job_id, _claimed(fields, msg), link)
                return None
        signal = AbortSignal()
        token = _current_run.set((self, link, job_id))
        try:
            task: asyncio.Future[Any] = asyncio.ensure_future(executor(signal))
        finally:
            _current_run.reset(token)
        claim: str | None = msg.get("claim")
        self._running[job_id] = _Run(task, signal, claim)
        link.send(make("run_started", job_id=job_id, **({"claim": claim} if claim is not None else {})))
        yield_lock = self._yields.get(msg.get("job_type", ""))
        if yield_lock and self._locks is not None and link is self._link:
            self._hold_shared(yield_lock, task, signal)
        return task

    async def _finish_run(self, job_id: str, task: asyncio.Future[Any], link: Link) -> None:
        """Await the executor and answer ``run_result`` (only these fields survive the closure)."""
        fields: dict[str, Any]
        run = self._running[job_id]
        try:
            fields = {"ok": True, "result": await task}
        except asyncio.CancelledError:
            fields = error_fields(PyjobqError("the run was cancelled on its page"))
        except Exception as exc:
            fields = error_fields(exc)
            if self._is_online is not None:
                fields["offline"] = not self._is_online()  # read now: when the attempt failed
        finally:
            if self._running.get(job_id) is run:
                del self._running[job_id]
            if run.grace is not None:
                run.grace.cancel()
        if run.abandoned:
            # The scheduler stores nothing of it; a revision-2 scheduler waits for this word
            # that it ended before the job's type runs again (an older one waits for nothing).
            if run.claim is not None:
                self._send_result(job_id, {"ok": False, "error": "abandoned", "code": "abandoned",
                                           "claim": run.claim}, link)
            return
        if fields["ok"] and isinstance(fields["result"], Answer):
            fields.update(result=fields["result"].result, status=fields["result"].status)
        if fields["ok"]:
            try:
                check_json(fields["result"], "the executor's result")
            except InvalidJobError as exc:
                # Repeating the work would produce the same result: fail at once.
                fields = error_fields(exc)
                fields.update(terminal=True, code="result_not_cloneable")
        self._send_result(job_id, _claimed(fields, {"claim": run.claim}), link)

    def _send_result(self, job_id: str, fields: dict[str, Any], link: Link) -> None:
        link.send(make("run_result", job_id=job_id, **fields))

    def _hold_shared(self, lock: str, task: asyncio.Future[Any], signal: AbortSignal) -> None:
        """Hold the job type's yield lock in shared mode while it runs: foreground work that
        takes it with ``steal: true`` rejects this request, which aborts the job's signal
        (spec: "Yielding")."""
        assert self._locks is not None

        async def hold(_lock: Any) -> None:
            await asyncio.wait({task})

        def released(request: asyncio.Future[Any]) -> None:
            if not request.cancelled() and isinstance(request.exception(), LockStolen):
                signal.abort(f"yield lock {lock!r} was taken")

        asyncio.ensure_future(self._locks.request(lock, hold, mode="shared")).add_done_callback(released)

    # ------------------------------------------------------------ stop

    def stop(self) -> None:
        """Clear the volatile retry wake and close the channel (spec: "The queue registers as
        the job-queue service"). The queue still runs: updates from other tabs stop, our
        worker's answers still arrive over the link and are handled or dropped without error."""
        if self._volatile is not None:
            self._volatile.clear_retry_timer()
        if self._channel_open:
            self._channel_open = False
            self._channel.close()
