"""The executor side: the public API's engine, and where user code runs.

It runs on the page only — where the user's Python does: a page's main thread, a PyScript
worker, a JupyterLite kernel — never in the scheduler worker, and assumes neither ``window``
nor a DOM. It is three parts, each in its module:

- **running user code** (:class:`~pyjobq.executor.runner.Runner`): answers an engine's ``run``
  with ``run_started`` and then ``run_result``;
- **talking to one engine** (:class:`~pyjobq.executor.client.EngineClient`): requests and replies,
  filing jobs, its worker's start. The persistent and the volatile engines are two
  instances of it: :attr:`ExecutorSide.persistent` and :attr:`ExecutorSide.volatile`;
- **job handles and listeners** (:mod:`pyjobq.executor.registry`): what ``done`` resolves to, and
  the ``job-update`` events.

It reaches its schedulers only through a :class:`~pyjobq.core.ports.Link` and other tabs
only through a :class:`~pyjobq.core.ports.Channel`, so it runs unchanged in the browser and
in the CPython simulation.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
    Protocol,
    TypeVar,
)

from ..abort import AbortSignal
from ..config import check_reconstructor, timeout_or_none
from ..core import mode as _mode
from ..core.errors import InvalidJobError, WorkerUnavailable
from ..core.messages import make, updated_jobs
from ..core.periodic import ScheduleDefinition
from ..core.ports import Channel, Clock, Link, LockManager
from ..core.records import (
    A_GROUP,
    A_JOB_ID,
    A_TYPE,
    DEFAULT_MAX_ATTEMPTS,
    FETCH,
    FETCH_METHODS,
    MAX_DEPTH,
    VOLATILE,
    NewJob,
    check_key,
    check_str,
    new_id,
    stored_json,
)
from ..core.router import Router
from ..handle import Job, JobUpdate, StorageState, known_status
from ..memory import ChannelHub, LockHub, LoopClock, VolatileStore
from .client import EngineClient
from .current import current_job_id, report_progress
from .fetch import make_fetch
from .registry import Handles, Listeners
from .runner import Runner, error_fields
from .wiring import in_process

if TYPE_CHECKING:
    from ..engine.lease import LeaseHolder
    from ..engine.scheduler import Scheduler
    from .boot import Boot

__all__ = ["ExecutorSide", "VOLATILE", "current_job_id", "error_fields", "report_progress"]



def _assume_online() -> bool:
    return True


class Closable(Protocol):
    """Something the host made that the queue closes when it stops."""

    def close(self) -> None: ...


@dataclass
class HostResources:
    """What the host (the browser runtime) made for a side's queue, kept for the queue's life."""

    #: The page's own request scheduler: stores and answers this tab's requests whatever its
    #: worker does (``NeverLease``, pyjobq/browser/page_main.py).
    requests: "Scheduler | None" = None
    #: The worker's boot, watched and retried.
    boot: "Boot | None" = None
    #: Undoes the page's ``online`` listener.
    unlisten_online: Callable[[], None] | None = None
    #: The page's registration of pyjobq's Service Worker (``configure(service_worker=...)``,
    #: pyjobq/service_worker/page.py).
    service_worker: "Closable | None" = None
    #: The origin's storage as the browser reports it (pyjobq/browser/storage.py); None: no
    #: browser here.
    storage: "StorageReport | None" = None


class StorageReport(Protocol):
    """What ``queue.storage()`` reads: the storage's state now."""

    async def state(self) -> StorageState: ...


_T = TypeVar("_T")


async def _reply(reply: Awaitable[Any], value: Callable[[Any], _T]) -> _T:
    """Wait for the reply of a request already sent, and give ``value(what it says)``.

    A housekeeping call sends its request when it is called and returns this coroutine: its
    effect takes its place in call order whether the caller awaits it at once, later, in a
    task, or never — ``create_task(queue.delete_group("doc"))`` then an enqueue of the group's
    next save deletes only the saves filed before it. Before, the request went out when the
    coroutine first ran, after the enqueue filed meanwhile."""
    return value(await reply)


def _nothing(_value: Any) -> None:
    return None


def _total(counts: list[Any]) -> int:
    return sum(int(count) for count in counts)


def _one(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A ``get_job`` answer, its status as Status."""
    if record is not None and isinstance(record.get("status"), str):
        record["status"] = known_status(record["status"])
    return record


def _listed(batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The engines' ``query_all`` answers, persistent first, as one list, statuses as Status."""
    records = [record for batch in batches for record in batch]
    for record in records:
        if isinstance(record.get("status"), str):
            record["status"] = known_status(record["status"])
    return records


class ExecutorSide:
    """The page's queue: files jobs with its engines, runs their executors, keeps their handles.

    Args:
        link: reaches the scheduler that runs this tab's persistent jobs (its worker).
        channel: the origin's ``job-update`` news from other tabs.
        source: the id that scheduler stamps on its news.
        reconstructors: name → factory, for persistent jobs (``"fetch"`` is built in).
        transport: the application's transport, for ``enqueue_fetch`` jobs.
        clock, locks, yields: the page's clock, ``navigator.locks`` and job type → yield lock.
        requests: reaches the scheduler that answers this tab's store requests (enqueue,
            queries, deletes), when not ``link``: in a browser the page's own, so a tab whose
            worker waits for the lease without Pyodide still stores and answers at once.
        requests_source: that scheduler's source: its channel echoes are this tab's own.
        is_online: ``navigator.onLine`` where the executor runs, read when an attempt fails:
            the page's word on whether the failure found no network. None: say nothing, and
            the scheduler reads its own when it stores the outcome.
        engine: the scheduler behind ``link`` when it runs in this process (CPython, the
            simulation); None when it is a worker.
    """

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
        engine: Scheduler | None = None,
        unknown_kind: Callable[[str, str], Callable[[Any], Any] | None] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.source = source
        #: The timeout of a job filed without one of its own (``configure(timeout_s=)``).
        self.timeout_s = timeout_s
        self.transport = transport
        self.clock: Clock = clock or LoopClock()
        self.locks = locks
        self.yields = dict(yields or {})
        #: The page's ``job-update`` listeners (every engine's, and other tabs' news).
        self.listeners = Listeners()
        registry: dict[str, Callable[[Any], Any]] = {
            FETCH: make_fetch(lambda: self.transport, self.clock.now)}
        registry.update(reconstructors or {})
        runner = Runner(link, clock=self.clock, registry=registry, locks=locks, yields=yields,
                        is_online=is_online, refusing=self._refusing, unknown_kind=unknown_kind)
        handles = Handles(self.listeners, self.clock, control=self)
        #: The persistent engine's client (the worker; in CPython the in-process scheduler).
        self.persistent = EngineClient(link, runner=runner, handles=handles, source=source,
                                       requests=requests, engine=engine)
        handles.read, handles.read_ended = self.persistent.read, self.persistent.read_ended
        #: The volatile engine's client: made on the first volatile job (or request about them).
        self.volatile: EngineClient | None = None
        self._channel = channel
        self._own_sources = {source} | ({requests_source} if requests_source else set())
        for own in sorted(self._own_sources):
            channel.ignore_source(own)  # its news comes over the link; the channel's is an echo
        self._unsubscribe = [channel.subscribe(Router(
            "pyjobq", {"job-update": self._news}, kind="channel",
            ignore={"schedule-update"}))]  # the schedulers' news
        self._channel_open = True
        #: The page-held processor lease when this side has a document and its worker is in
        #: line for it (a new one for each worker the page starts); None in a worker host, in
        #: plain CPython, and while a tab's worker cannot boot.
        self.lease_holder: LeaseHolder | None = None
        #: What the host made for this queue (the browser runtime's request scheduler and boot).
        self.resources = HostResources()

    def _refusing(self) -> bool:
        return self.lease_holder is not None and self.lease_holder.refusing

    # ------------------------------------------------------------ the worker

    @property
    def link(self) -> Link:
        """The link to the persistent engine (the scheduler worker)."""
        return self.persistent.link

    @property
    def engine(self) -> Scheduler | None:
        """The persistent engine's scheduler when it runs in this process; None for a worker."""
        return self.persistent.engine

    @property
    def unavailable(self) -> WorkerUnavailable | None:
        """Why persistent jobs cannot run here: the worker did not start or stopped for good.
        Every request to it fails with this error, at once. None while it is usable."""
        return self.persistent.unavailable

    @property
    def worker_ready(self) -> bool:
        """True once the scheduler said ``ready``."""
        return self.persistent.ready

    @property
    def on_unavailable(self) -> Callable[[WorkerUnavailable], None] | None:
        """Called once with :attr:`unavailable` (the browser runtime writes it to the console)."""
        return self.persistent.on_unavailable

    @on_unavailable.setter
    def on_unavailable(self, hook: Callable[[WorkerUnavailable], None] | None) -> None:
        self.persistent.on_unavailable = hook

    def scheduler_unavailable(self, error: WorkerUnavailable) -> None:
        """The scheduler worker did not start, or stopped for good: fail every request that
        waits on it and every later one at once with ``error``, and make each persistent
        job's ``done`` raise it (this page can no longer learn their outcomes). Volatile jobs
        run on. Only the first call counts."""
        self.persistent.fail(error)

    # ------------------------------------------------------------ persistent jobs

    def register_reconstructor(self, name: str, factory: Callable[[Any], Any]) -> None:
        check_reconstructor(name, factory)
        self.persistent.runner.registry[name] = factory

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
        key: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        check_key(key, "enqueue_persistent(key)")
        return self.persistent.file(NewJob(
            id=new_id(), reconstructor=reconstructor, params=params, type=type, group=group,
            label=label, max_attempts=max_attempts, delay_ms=delay_ms, key=key,
            timeout_ms=_timeout_ms(timeout_s, self.timeout_s, "enqueue_persistent(timeout_s)"),
            params_json=stored_json(params, "the job's params")))

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
        key: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        check_key(key, "enqueue_fetch(key)")
        timeout_ms = _timeout_ms(timeout_s, self.timeout_s, "enqueue_fetch(timeout_s)")
        if not isinstance(method, str) or method.upper() not in FETCH_METHODS:
            raise InvalidJobError(
                f"method must be one of {', '.join(sorted(FETCH_METHODS))}, got {method!r}")
        if not isinstance(path, str) or not path:
            raise InvalidJobError(f"path must be a non-empty str, got {path!r}")
        # One JSON encoding of the body, checked in the words of the call; the params' text is
        # built around it. The body nests a level below the params, so one level less.
        body_text = stored_json(body, "body", limit=MAX_DEPTH - 1,
                                  why=" (it is stored inside the job's params, which may nest "
                                    f"{MAX_DEPTH})")
        method = method.upper()
        params_json = json.dumps({"method": method, "path": path})[:-1] + f', "body": {body_text}}}'
        return self.persistent.file(NewJob(
            id=new_id(), reconstructor=FETCH, params={"method": method, "path": path, "body": body},
            type=type, group=group, label=label, max_attempts=max_attempts, delay_ms=delay_ms,
            key=key, timeout_ms=timeout_ms, params_json=params_json))

    def job(self, job_id: str) -> Job:
        """A handle on a job by id, e.g. a persistent one after a reload; ``done`` resolves as
        usual. A volatile job this tab filed and is still outstanding gives its own handle."""
        check_str(job_id, "job(job_id)", A_JOB_ID)
        if self.volatile is not None:
            outstanding = self.volatile.handles.get(job_id)
            if outstanding is not None:
                return outstanding
        return self.persistent.look_up(job_id)

    # ------------------------------------------------------------ volatile jobs

    def _volatile(self) -> EngineClient:
        """This tab's volatile engine, started on first use (:func:`_volatile_engine`)."""
        if self.volatile is None:
            self.volatile = _volatile_engine(self)
        return self.volatile

    def enqueue(
        self,
        executor: Callable[[AbortSignal], Any],
        *,
        id: str | None = None,
        type: str = "default",
        label: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        key: str | None = None,
        timeout_s: float | None = None,
    ) -> Job:
        check_key(key, "enqueue(key)")
        timeout_ms = _timeout_ms(timeout_s, self.timeout_s, "enqueue(timeout_s)")
        if not callable(executor):
            raise InvalidJobError(
                f"executor must be an async callable taking the abort signal, got {executor!r}")
        if id is not None:
            check_str(id, "enqueue(id)", "None (a new id) or a str")
        volatile = self._volatile()
        if id is not None and id in volatile.handles:
            # a duplicate outstanding id: the same job, the same done
            return volatile.handles.jobs[id]
        new = NewJob(id=id if id is not None else new_id(), reconstructor=VOLATILE, params=None,
                     type=type, label=label, max_attempts=max_attempts, key=key,
                     timeout_ms=timeout_ms)
        volatile.runner.closures[new.id] = executor
        return volatile.file(new)

    # The housekeeping calls below send their request at the call and return the coroutine
    # that waits for its reply (_reply): their effects are in call order, awaited or not.

    def suspend_type(self, job_type: str) -> Coroutine[Any, Any, None]:
        """Pause this tab's volatile jobs of ``job_type`` (future ones too), abort the running
        one and return once it has settled. Harmless when already suspended."""
        check_str(job_type, "suspend_type(type)", A_TYPE)
        return _reply(self._volatile().request(make("suspend_type", job_type=job_type)), _nothing)

    def resume_type(self, job_type: str) -> Coroutine[Any, Any, None]:
        """Return this tab's paused volatile jobs of ``job_type`` to the queue."""
        check_str(job_type, "resume_type(type)", A_TYPE)
        return _reply(self._volatile().request(make("resume_type", job_type=job_type)), _nothing)

    def _engines(self) -> list[EngineClient]:
        return [self.persistent] + ([self.volatile] if self.volatile is not None else [])

    def _owner(self, job_id: str) -> EngineClient:
        """The engine a request about ``job_id`` goes to: this tab's volatile one when it filed
        the job (and may still run it), the persistent one otherwise."""
        if self.volatile is not None and self.volatile.knows(job_id):
            return self.volatile
        return self.persistent

    # ------------------------------------------------------------ requests

    def query_all(self) -> Coroutine[Any, Any, list[dict[str, Any]]]:
        """The origin's persistent records, then this tab's volatile ones (``"volatile": True``)."""
        requests = [engine.request(make("query_all")) for engine in self._engines()]
        return _reply(asyncio.gather(*requests), _listed)

    def get_job(self, job_id: str) -> Coroutine[Any, Any, dict[str, Any] | None]:
        """The job's record now, from its engine (None: there is none); status as Status."""
        check_str(job_id, "get_job(job_id)", A_JOB_ID)
        return _reply(self._owner(job_id).read(job_id), _one)

    def jobs(self, *, status: str | None = None, type: str | None = None,
             group: str | None = None) -> Coroutine[Any, Any, list[dict[str, Any]]]:
        """The records of ``status``, ``type`` and ``group`` (each None: any), persistent ones
        first, oldest first, then this tab's volatile ones; each engine filters as it reads
        its store (by its status or group index), so no other record is sent here.
        Arguments are checked by the caller (:func:`pyjobq.jobs`)."""
        filters = {k: v for k, v in (("status", status), ("job_type", type), ("group", group))
                   if v is not None}
        requests = [engine.request(make("query_all", **filters)) for engine in self._engines()]
        return _reply(asyncio.gather(*requests), _listed)

    def delete_job(self, job_id: str) -> Coroutine[Any, Any, bool]:
        check_str(job_id, "delete_job(job_id)", A_JOB_ID)
        return _reply(self._owner(job_id).request(make("delete_job", job_id=job_id)), bool)

    def delete_group(self, group: str) -> Coroutine[Any, Any, int]:
        check_str(group, "delete_group(group)", A_GROUP)
        return _reply(self.persistent.request(make("delete_group", group=group)), int)

    def cancel_job(self, job_id: str) -> Coroutine[Any, Any, bool]:
        check_str(job_id, "cancel_job(job_id)", A_JOB_ID)
        return _reply(self._owner(job_id).request(make("cancel_job", job_id=job_id)), bool)

    def retry_job(self, job_id: str) -> Coroutine[Any, Any, bool]:
        check_str(job_id, "retry_job(job_id)", A_JOB_ID)
        return _reply(self._owner(job_id).request(make("retry_job", job_id=job_id)), bool)

    def retry_all(self) -> Coroutine[Any, Any, int]:
        requests = [engine.request(make("retry_all")) for engine in self._engines()]
        return _reply(asyncio.gather(*requests), _total)

    def cleanup_old(self) -> Coroutine[Any, Any, int]:
        return _reply(self.persistent.request(make("cleanup_old")), int)

    def wake(self) -> None:
        self.persistent.send(make("wake"))

    # ------------------------------------------------------------ periodic schedules

    def schedule(self, definition: ScheduleDefinition) -> Coroutine[Any, Any, dict[str, Any]]:
        """Store a periodic schedule's definition (``@pyjobq.periodic``); returns it as stored."""
        return _reply(self.persistent.request(
            make("schedule", schedule=definition.to_message())), dict)

    def unschedule(self, name: str) -> Coroutine[Any, Any, bool]:
        """Delete the stored schedule ``name``; returns whether there was one. Its jobs stay."""
        check_str(name, "unschedule(name)", "a schedule's name, a str")
        return _reply(self.persistent.request(make("unschedule", name=name)), bool)

    def schedules(self) -> Coroutine[Any, Any, list[dict[str, Any]]]:
        """Every stored periodic schedule, as stored."""
        return _reply(self.persistent.request(make("schedules")), list)

    def back_online(self) -> None:
        """The page came back online: jobs waiting out an offline failure become due now —
        persistent ones and this tab's volatile ones alike."""
        for engine in self._engines():
            engine.send(make("online"))

    # ------------------------------------------------------------ events

    def on_update(self, callback: Callable[[JobUpdate], None]) -> Callable[[], None]:
        """Call ``callback(update)`` for every ``job-update``;
        returns a function that unsubscribes."""
        return self.listeners.add(callback)

    def updates(self) -> AsyncIterator[JobUpdate]:
        """``async for update in updates()``: every ``job-update`` from now on."""
        return self.listeners.updates()

    def _news(self, msg: dict[str, Any]) -> None:
        # Our own scheduler's updates arrive over the link; the channel copy is a duplicate.
        # What other tabs (or any same-origin script) post is news: checked before it settles.
        if msg["source"] not in self._own_sources:
            for job in updated_jobs(msg):
                self.persistent.handles.update(job, trusted=False)

    # ------------------------------------------------------------ stop

    def crash(self) -> None:
        """The page is gone, as a crashed tab is: it hears nothing more from its engines or the
        channel, and every run it has in hand ends, cancelled, unanswered. What it held — the
        lease, run locks — is for the engines to find out (a crashed page's locks go with it).
        For test kits (:meth:`pyjobq.testing.Tab.crash`); a live page calls :meth:`stop`."""
        for engine in self._engines():
            engine.close()
            for run in engine.runner.running.values():
                run.task.cancel()
        self.stop()

    def stop(self) -> None:
        """Clear the volatile retry wake and close the channel (spec: "The queue registers as
        the job-queue service"). The queue still runs: updates from other tabs stop, our
        worker's answers still arrive over the link and are handled or dropped without error."""
        if self.volatile is not None and self.volatile.engine is not None:
            self.volatile.engine.clear_retry_timer()
        if self.resources.service_worker is not None:
            self.resources.service_worker.close()
        if self._channel_open:
            self._channel_open = False
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            self._channel.close()


def _timeout_ms(timeout_s: float | None, default_s: float | None, where: str) -> float | None:
    """A job's timeout in ms: ``timeout_s``, or ``default_s`` (the configured one) when it is
    None; None for no bound.

    Raises:
        InvalidJobError: ``timeout_s`` is not a finite number > 0 or None, naming ``where``.
    """
    seconds = timeout_or_none(where, timeout_s, InvalidJobError)
    if seconds is None:
        seconds = default_s
    return None if seconds is None else seconds * 1000.0


def _volatile_engine(side: ExecutorSide) -> EngineClient:
    """Volatile jobs run on the same engine as persistent ones — a
    :class:`~pyjobq.engine.scheduler.Scheduler` — over a store that only this tab holds
    (:class:`~pyjobq.memory.VolatileStore`: no copies, and a job is forgotten once its
    ``done`` is published): same lanes, same backoff, nothing written to IndexedDB."""
    persistent = side.persistent.runner
    source = side.source + ":volatile"
    engine = in_process(
        store=VolatileStore(), source=source, clock=side.clock, lock_name="volatile",
        locks=LockHub().client(),
        channel=ChannelHub().channel("volatile"),  # heard by no other tab
        copy=False,  # one Python context: no structured copies
        mode=_mode.VOLATILE,
        # The same reading as persistent jobs' when a page says nothing of its own.
        is_online=(persistent.is_online if persistent.is_online is not None
                   else _assume_online))
    runner = Runner(engine.link, clock=side.clock, closures={}, is_online=persistent.is_online)
    return EngineClient(engine.link, runner=runner,
                        handles=Handles(side.listeners, side.clock, control=side, volatile=True),
                        source=source, engine=engine.scheduler)
