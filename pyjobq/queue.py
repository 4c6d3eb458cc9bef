"""The job queue (spec: "API"). Importing this module reads the configured names for good.

Persistent jobs (:func:`enqueue_fetch`, :func:`enqueue_persistent`) are stored
by the scheduler worker in IndexedDB and replayed through the application's
transport; every tab sees their ``job-update`` events. The queue registers itself
as the ``job-queue`` service.

In a browser, importing this module starts the queue: a page that has the queue is a page
that runs it (spec: "Survive a hard reload"; "sent the next time the queue runs on this
device, from any page that holds the lock"). It is in line for the processor lease at once,
so after a reload its stored work resumes, and when the processing tab closes, crashes or
freezes it takes over — with no call into the queue. Its worker loads Pyodide only once the
lease is this tab's. On plain CPython (tests of code that uses the queue) there is no event
loop at import, so the in-process queue starts on first use.
"""

from __future__ import annotations

import logging
import reprlib
from typing import Any, AsyncIterator, Callable, Coroutine

from . import config as _config
from . import hosts as _hosts
from . import notebook as _notebook
from . import services as _services
from .abort import AbortSignal
from .core.errors import InvalidJobError
from .core.records import A_GROUP, A_TYPE, DEFAULT_MAX_ATTEMPTS, check_str
from .core.status import KNOWN, Status
from .executor.current import current_job_id as current_job_id  # queue.current_job_id()
from .executor.current import report_progress as report_progress  # queue.report_progress()
from .executor.side import ExecutorSide
from .handle import Job, JobUpdate, StorageState
from .notebook.known import Known as _Known

_log = logging.getLogger("pyjobq")

SERVICE_NAME = _services.JOB_QUEUE

#: The names this queue runs under, read when this module was imported.
settings = _config.read(__name__)

_side: ExecutorSide | None = None


def _queue() -> ExecutorSide:
    global _side
    if _side is None:
        _side = _hosts.start(_config.settings())
        _side.on_update(_known.remember)
        _services.register(SERVICE_NAME, _side)  # the @periodic schedules defined so far start
    return _side


#: What this tab knows of the jobs, for the notebook's tables (:mod:`pyjobq.notebook.known`).
_known = _Known(lambda: _queue(), lambda: _side)

_STATUSES = tuple(str(status) for status in Status)


def table(*, type: str | None = None, group: str | None = None,
          status: str | None = None) -> _notebook.JobsTable:
    """The jobs table of ``type``, ``group`` and ``status`` (each ``None``: any), for a notebook.

    End a cell with it (or ``display`` it): the output is a table that redraws itself as
    jobs change — in every tab and kernel of the origin — at most every half second. It lists
    every stored record from the start: until the store has answered, its caption says so.
    ``queue`` on its own displays ``table()``.

    Raises:
        InvalidJobError: ``type`` or ``group`` is not a str (or None), or ``status`` is not
            one of the statuses (``"pending"``, ``"running"``, ``"paused"``, ``"done"``,
            ``"failed"``, ``"cancelled"``) or None.
    """
    _check_view("table", type, group, status)
    return _notebook.JobsTable(
        _notebook.View(type=type, group=group, status=None if status is None else str(status)),
        _known.tables)


def jobs(*, status: str | None = None, type: str | None = None,
         group: str | None = None) -> Coroutine[Any, Any, list[dict[str, Any]]]:
    """The records of ``status``, ``type`` and ``group`` (each ``None``: any) — persistent
    ones oldest first, then this tab's volatile ones (marked ``volatile``), as
    :func:`query_all` lists them, with ``_params``.

    Each engine filters as it reads its store (through its status or group index), so no other
    record is copied to the page. Asked at the call (call order), awaited or not.

    Raises:
        InvalidJobError: at the call, ``type`` or ``group`` is not a str (or None), or
            ``status`` is not one of the statuses (``"pending"``, ``"running"``,
            ``"paused"``, ``"done"``, ``"failed"``, ``"cancelled"``) or None.
    """
    _check_view("jobs", type, group, status)
    return _queue().jobs(status=None if status is None else str(Status(status)),
                         type=type, group=group)


def _check_view(call: str, type: Any, group: Any, status: Any) -> None:
    """The filters of :func:`table` and :func:`jobs`: each None, or of the right kind."""
    if type is not None:
        check_str(type, f"{call}(type)", f"{A_TYPE}, or None for every type")
    if group is not None:
        check_str(group, f"{call}(group)", f"{A_GROUP}, or None for every group")
    if status is not None and not (isinstance(status, str) and status in KNOWN):
        raise InvalidJobError(
            f"{call}(status): expected a status, one of {', '.join(map(repr, _STATUSES))}, or "
            f"None for every status; got {reprlib.repr(status)} ({status.__class__.__name__})")


def _ipython_display_() -> None:
    """In a notebook, ``queue`` displays as its live jobs table (see :func:`table`)."""
    table()._ipython_display_()


def _repr_html_() -> str:
    """Where there is no IPython display, ``queue`` renders as its jobs table as it is now —
    every record as of the last :func:`query_all`, updated by ``job-update`` events since (the
    read of every record starts here too, where an event loop runs)."""
    return _known.tables.draw(_notebook.View())["text/html"]


def enqueue_fetch(
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
    """Queue a persistent request, replayed through the transport until it succeeds or must stop.

    Args:
        method: HTTP method (GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS).
        path: what the transport turns into a URL; the queue composes none itself.
        body: JSON-like data stored with the job and handed to the transport.
        type: the job's lane: one job of a type runs at a time; types run side by side.
        group: a name for :func:`delete_group` (e.g. one document's saves).
        label: a readable name for job tables.
        max_attempts: counted tries before the job fails (401, offline and
            yields are not counted). At least 1.
        delay_ms: wait this long before the first try (debouncing a save).
        key: keys that replace (a debounce in one call): while a job filed with the same key
            waits — pending, waiting out its delay or a retry backoff, or paused — this job
            replaces it in the transaction that stores this one: the old record is deleted
            and its ``done`` resolves cancelled with the code ``replaced``. While one runs,
            this one waits behind it (one job of a key runs at a time, whatever its type).
            Finished jobs of the key are left as they are. A non-empty str, or None.
        timeout_s: the longest one attempt may run, in seconds: past it, the run's signal
            aborts (a transport given the signal ends its request), and the attempt fails with
            the code ``timeout`` and is retried with backoff like any failure, up to
            ``max_attempts``; the lane moves on. None: ``configure(timeout_s=)``'s, by default
            no bound.

    Debouncing a save is one call: ``enqueue_fetch("PUT", "/doc/1", body, key="doc-1",
    delay_ms=2000)`` on every change. The spec's two calls (``delete_group`` then enqueue)
    still work, as long as the delete is *sent* first — each housekeeping call sends at the
    call, awaited or not — but they are two transactions; the key is one.

    Returns:
        A :class:`Job`; ``await job.done`` gives the :class:`~pyjobq.Outcome`.

    Raises:
        InvalidJobError: an argument is of the wrong type or range, or the body is not JSON-like.
    """
    return _queue().enqueue_fetch(method, path, body, type=type, group=group, label=label,
                                  max_attempts=max_attempts, delay_ms=delay_ms, key=key,
                                  timeout_s=timeout_s)


def enqueue(
    executor: Callable[[AbortSignal], Any],
    *,
    id: str | None = None,
    type: str = "default",
    label: str | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    key: str | None = None,
    timeout_s: float | None = None,
) -> Job:
    """Queue a volatile job: ``await executor(signal)`` runs in this tab with the same backoff.

    Nothing is written to IndexedDB: the job is seen only by this tab (in
    :func:`query_all`, marked ``volatile``) and is lost on reload. The executor
    gets an :class:`~pyjobq.AbortSignal`; to stop on request it raises
    :class:`~pyjobq.Interrupted` (the attempt is given back), and
    :class:`~pyjobq.Terminal` fails the job at once.

    Args:
        executor: an async callable taking the abort signal; its return value
            (JSON-like) becomes the outcome's ``result``.
        id: a caller-chosen id; enqueueing an id that is still outstanding returns
            the existing job (the same ``done``).
        type: the job's lane, and what :func:`suspend_type` pauses.
        label: a readable name for job tables.
        max_attempts: counted tries before the job fails.
        key: as for :func:`enqueue_fetch`, among this tab's volatile jobs: a waiting volatile job
            of the key is replaced (its ``done`` resolves cancelled, code ``replaced``, and its
            executor is never called); a running one is followed.
        timeout_s: the longest one attempt may run, in seconds: past it, the run's signal
            aborts (a transport given the signal ends its request), and the attempt fails with
            the code ``timeout`` and is retried with backoff like any failure, up to
            ``max_attempts``; the lane moves on. None: ``configure(timeout_s=)``'s, by default
            no bound.

    Raises:
        InvalidJobError: ``executor`` is not callable, or an argument is out of range.
    """
    return _queue().enqueue(executor, id=id, type=type, label=label, max_attempts=max_attempts,
                            key=key, timeout_s=timeout_s)


# The housekeeping calls (suspend_type and resume_type, query_all, the deletes and retries,
# cleanup_old) are written as plain functions returning a coroutine: each sends its request at
# the call, so it takes effect in call order whether it is awaited at once, later, in a task or
# never (see the docstring of each). To a type checker and to ``await`` / ``create_task``
# they are the ``async def`` s they were.

def suspend_type(type: str) -> Coroutine[Any, Any, None]:
    """Pause this tab's volatile jobs of ``type`` — pending ones and future ones — and abort
    the running one; the coroutine returns once it has settled. Its attempt does not count and
    its ``done`` stays pending. Other types keep running. Calling it twice is harmless.

    The request goes out at the call (call order), awaited or not.

    Raises:
        InvalidJobError: at the call, ``type`` is not a str.
    """
    return _queue().suspend_type(type)


def resume_type(type: str) -> Coroutine[Any, Any, None]:
    """Return this tab's paused volatile jobs of ``type`` to the queue (sent at the call).

    Raises:
        InvalidJobError: at the call, ``type`` is not a str.
    """
    return _queue().resume_type(type)


def enqueue_persistent(
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
    """Queue a persistent job of a registered kind, rebuilt from JSON-like ``params`` on every run.

    ``enqueue_fetch`` is this call with the built-in ``fetch`` reconstructor, and ``key``
    replaces as it does there (a waiting job of the key is replaced, a running one followed).
    A page that picks the job up without ``reconstructor`` registered fails it as orphaned.
    ``timeout_s`` bounds each attempt, as for :func:`enqueue_fetch`.
    """
    return _queue().enqueue_persistent(reconstructor, params, type=type, group=group, label=label,
                                       max_attempts=max_attempts, delay_ms=delay_ms, key=key,
                                       timeout_s=timeout_s)


def register_reconstructor(name: str, factory: Callable[[Any], Any]) -> None:
    """Teach this page to rebuild persistent jobs of kind ``name``: ``factory(params)`` returns
    an ``async def run(signal)``.
    Prefer ``configure(reconstructors=...)`` for kinds every page needs."""
    _queue().register_reconstructor(name, factory)


def set_transport(transport: Callable[..., Any] | None) -> None:
    """Set or replace the transport; it is read on every replay, so this may happen any time."""
    _config.check_transport(transport)
    _queue().transport = transport


def job(job_id: str) -> Job:
    """A handle on a persistent job by id — after a reload, ``await job(id).done`` as usual.

    Raises:
        InvalidJobError: ``job_id`` is not a str.
    """
    return _queue().job(job_id)


def get_job(job_id: str) -> Coroutine[Any, Any, dict[str, Any] | None]:
    """A job's record now, as :func:`query_all` lists it, read from its store (not from news
    heard earlier): a persistent job's, or this tab's volatile job's. None when it has none:
    deleted, cleaned up (``cleanup_old``), a volatile job forgotten once done, or never filed.

    Asked at the call (call order), awaited or not.

    Raises:
        InvalidJobError: at the call, ``job_id`` is not a str.
    """
    return _queue().get_job(job_id)


def query_all() -> Coroutine[Any, Any, list[dict[str, Any]]]:
    """Every persistent record (with ``_params``), oldest first, then this tab's volatile jobs.

    Asked at the call: the answer reflects every call made before this one."""
    return _known.query_all()


def storage() -> Coroutine[Any, Any, StorageState]:
    """What the browser says of the origin's storage, where the stored jobs live: whether it is
    persisted (kept, never evicted), and its usage and quota in bytes (a
    :class:`~pyjobq.StorageState`; each None where not known, as on plain CPython). The queue
    asks the browser to persist it once a job is stored (``configure(persist_storage=...)``).
    """
    return _storage(_queue())


async def _storage(side: ExecutorSide) -> StorageState:
    report = side.resources.storage
    if report is None:
        return StorageState(persisted=None, usage_bytes=None, quota_bytes=None)
    return await report.state()


def delete_job(job_id: str) -> Coroutine[Any, Any, bool]:
    """Delete a job's record, ending its run if one is under way. Returns whether it existed.

    The request goes out at the call, so it takes effect in call order, awaited or not:
    ``asyncio.create_task(delete_job(old.id))`` then a new ``enqueue_fetch`` deletes only the
    old job.

    Raises:
        InvalidJobError: at the call, ``job_id`` is not a str.
    """
    return _queue().delete_job(job_id)


def delete_group(group: str) -> Coroutine[Any, Any, int]:
    """Delete every job of ``group``; returns how many.

    The request goes out at the call, so it takes effect in call order, awaited or not:
    ``asyncio.create_task(delete_group("doc"))`` then ``enqueue_fetch(..., group="doc")`` (the
    debounce recipe) deletes the saves filed before the call, never the new one.

    Raises:
        InvalidJobError: at the call, ``group`` is not a str.
    """
    return _queue().delete_group(group)


def cancel_job(job_id: str) -> Coroutine[Any, Any, bool]:
    """Mark an unfinished job cancelled (kept until deleted); returns whether it changed.
    Sent at the call (call order), awaited or not.

    Raises:
        InvalidJobError: at the call, ``job_id`` is not a str.
    """
    return _queue().cancel_job(job_id)


def retry_job(job_id: str) -> Coroutine[Any, Any, bool]:
    """Run a failed or cancelled job again with a fresh attempt budget; returns whether it
    changed. Sent at the call (call order), awaited or not. An older job of a key whose newer
    job is stored (and not cancelled) is not sent over it: it is deleted as replaced, and the
    answer is False.

    Raises:
        InvalidJobError: at the call, ``job_id`` is not a str.
    """
    return _queue().retry_job(job_id)


def retry_all() -> Coroutine[Any, Any, int]:
    """Run every failed and cancelled job again; returns how many. Sent at the call."""
    return _queue().retry_all()


def cleanup_old() -> Coroutine[Any, Any, int]:
    """Delete ``done`` records older than ``configure(keep_done_days=)`` (7 days by default) —
    and only those, with ``failed`` ones older than ``keep_failed_days`` when it is set.
    Returns how many. Sent at the call."""
    return _queue().cleanup_old()


def unschedule(name: str) -> Coroutine[Any, Any, bool]:
    """Delete the stored periodic schedule ``name`` (``module:qualname`` of its function, or its
    ``name=``): no tab enqueues it any more; its jobs stay. Returns whether one was stored.
    Sent at the call. A page that still defines it stores it again when it loads.

    Raises:
        InvalidJobError: at the call, ``name`` is not a str.
    """
    return _queue().unschedule(name)


def schedules() -> Coroutine[Any, Any, list[dict[str, Any]]]:
    """Every stored periodic schedule: its definition, ``last_slot`` (every slot up to it was
    enqueued or skipped) and ``last_job_id``. Sent at the call."""
    return _queue().schedules()


def on_update(callback: Callable[[JobUpdate], None]) -> Callable[[], None]:
    """Call ``callback(update)`` on every ``job-update`` from any tab;
    returns an unsubscribe function."""
    return _queue().on_update(callback)


def updates() -> AsyncIterator[JobUpdate]:
    """``async for update in pyjobq.updates():`` every ``job-update`` from now on."""
    return _queue().updates()


def wake() -> None:
    """Ask the scheduler to look for ready work now."""
    _queue().wake()


def stop() -> None:
    """Close this tab's channel (spec: "The queue registers as the job-queue service").

    The queue still runs: this tab stays in line for the processor lease and keeps processing
    when it holds it, and its own jobs' updates still reach it over its worker; updates from
    other tabs no longer do. To stop processing on this tab, close it.
    """
    if _side is not None:
        _side.stop()
        _known.stopped()


def _register_late(name: str, factory: Callable[[Any], Any]) -> None:
    # The settings hold it too: a queue not started yet reads it there when it starts, so a
    # configure() call or a @pyjobq.task defined after this import never starts the queue.
    if _side is not None:
        _side.register_reconstructor(name, factory)


def _set_transport_late(transport: Callable[..., Any] | None) -> None:
    # As _register_late: the settings hold it, so a configure() call again (a script's, outside
    # a running loop) never starts the queue.
    if _side is not None:
        _side.transport = transport


_config.accept_late(_config.LateHooks(set_transport=_set_transport_late,
                                      register_reconstructor=_register_late))

if _hosts.IN_PYODIDE:
    _queue()  # a page that has the queue runs it (see above)
