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

import asyncio
import dataclasses
import logging
import reprlib
import weakref
from collections import OrderedDict
from typing import Any, AsyncIterator, Awaitable, Callable, Coroutine

from . import config as _config
from . import hosts as _hosts
from . import notebook as _notebook
from . import scheduling as _scheduling
from . import services as _services
from .abort import AbortSignal
from .core import jobs_table as _jobs_table
from .core.errors import InvalidJobError
from .core.records import A_GROUP, A_TYPE, DEFAULT_MAX_ATTEMPTS, check_str
from .core.status import KNOWN, TERMINAL, Status
from .executor.current import current_job_id as current_job_id  # queue.current_job_id()
from .executor.current import report_progress as report_progress  # queue.report_progress()
from .executor.side import ExecutorSide
from .handle import Job, JobUpdate

_log = logging.getLogger("pyjobq")

SERVICE_NAME = "job-queue"

#: The names this queue runs under, read when this module was imported.
settings = _config.read(__name__)

_side: ExecutorSide | None = None
#: The records this tab has heard of, newest state of each, for a notebook's synchronous display.
#: Unfinished jobs are always kept; finished ones beyond the newest KNOWN_FINISHED are forgotten
#: (they stay in the store: query_all() shows them), so a long session's memory stays flat.
_known: OrderedDict[str, dict[str, Any]] = OrderedDict()
KNOWN_FINISHED = 1000
#: The ids of the finished records in ``_known``, least recently updated first: trimming is
#: O(1) per update, not a walk over every known record.
_finished: OrderedDict[str, None] = OrderedDict()
#: What news said that the store has not confirmed yet, least recently heard first: each id the
#: next read asks about, with the news of its end
#: (see :func:`pyjobq.core.jobs_table.confirm_first`),
#: or None for news of a job ``_known`` did not hold. News is any same-origin script's word, so
#: it only prompts that read; at most :data:`pyjobq.core.jobs_table.MAX_UNCONFIRMED` wait.
_due: OrderedDict[str, dict[str, Any] | None] = OrderedDict()
#: The rows of ``_known`` only news told of: no answer of the store has listed them yet.
_heard_only: set[str] = set()
#: The rows of ``_known`` that are this tab's volatile jobs (see :func:`_is_volatile_here`).
_volatile_here: set[str] = set()


def _queue() -> ExecutorSide:
    global _side
    if _side is None:
        _side = _hosts.start(_config.settings())
        _side.on_update(_remember)
        _services.register(SERVICE_NAME, _side)
        _scheduling.started(_side)  # the @periodic schedules defined so far take effect
    return _side


class _Heard:
    """What :func:`_remember` heard while one read of every record (``query_all``) was in
    flight: the newest state of each job, ``None`` for a deleted one. The store's answer may
    predate any of it, so it is laid over that answer, never thrown away for it: a job filed
    meanwhile stays listed, a job deleted meanwhile stays gone."""

    def __init__(self) -> None:
        self.news: dict[str, dict[str, Any] | None] = {}


#: The reads of every record in flight, each with what was heard since it was asked. Weak: a
#: ``query_all()`` coroutine dropped without being awaited takes its own with it.
_reads: weakref.WeakSet[_Heard] = weakref.WeakSet()


def _remember(update: JobUpdate) -> None:
    """Take one ``job-update`` as news: an unfinished job's state is shown as it comes; an end,
    a deletion or a finished job running again only prompts a read of the store, whose answer
    is shown (:func:`_check_again`). Fields of the wrong kind are left out
    (:func:`pyjobq.core.jobs_table.row`), so no row can stop the table."""
    news = _jobs_table.row(update)
    if news is None:
        return
    job_id: str = news["id"]
    shown = _known.get(job_id)
    if _jobs_table.late_progress(news, shown):
        return
    if _jobs_table.confirm_first(news, shown):
        _expect(job_id, news)
        _read_soon()
        return
    if shown is None:
        _heard_only.add(job_id)
        _expect(job_id, None)
    if _side is not None and _side.volatile is not None and _side.volatile.knows(job_id):
        _volatile_here.add(job_id)
    record = _known[job_id] = {**_known.pop(job_id, {}), **news}
    for heard in _reads:
        heard.news[job_id] = record
    _changed()
    _read_soon()


def _expect(job_id: str, news: dict[str, Any] | None) -> None:
    """Ask the next read about ``job_id`` (``news``: the end it was told of). Beyond
    :data:`pyjobq.core.jobs_table.MAX_UNCONFIRMED` waiting, the oldest is let go, with its row
    if only news told of it: what the tables show is then no longer the whole store, and they
    say so until it is read again (on the next display, or at once while one is live)."""
    global _store
    if news is None and job_id in _due:
        return  # the end it waits to confirm is what it is read for
    _due.pop(job_id, None)
    _due[job_id] = news
    while len(_due) > _jobs_table.MAX_UNCONFIRMED:
        dropped, _ = _due.popitem(last=False)
        if dropped in _heard_only:
            _forget(dropped)
            for heard in _reads:
                heard.news.pop(dropped, None)
        _store = dataclasses.replace(_store, answered=False)


def _forget(job_id: str) -> None:
    """The row of ``job_id`` leaves the tables (and every set that names it)."""
    _known.pop(job_id, None)
    _finished.pop(job_id, None)
    _heard_only.discard(job_id)
    _volatile_here.discard(job_id)


def _is_volatile_here(job_id: str) -> bool:
    """Whether ``job_id`` is a row's job this tab's volatile engine ran: it was heard of
    unfinished while that engine held its closure. That engine forgets a job once it is done,
    so no read can confirm that end; its news comes from this tab, and a read that finds no
    record of the job then leaves the news of its end standing (``<bg-jobs>`` asks too)."""
    return job_id in _volatile_here


def _changed() -> None:
    # News runs on an event loop: a live table that could not read the store (shown outside
    # one) or whose read ended with its loop asks now. After a failed read it waits to be
    # displayed again (a store that keeps failing is not asked every half second).
    if _tables.live and _store.error is None:
        _fill_in()
    _tables.changed()
    _keep_reading()


#: The live tables' next read of the unfinished jobs they show, while armed.
_recheck: _notebook.Timer | None = None
#: That read, while in flight.
_checking: asyncio.Task[None] | None = None


def _keep_reading() -> None:
    """Arm the live tables' next read of the unfinished jobs they show, unless one is armed
    (see :func:`_reread`). Armed on any change, a table shown, a read's answer; what to read is
    decided when it fires, so a burst of news costs no walk of the records."""
    if _tables.live:
        _arm_reread()


def _arm_reread() -> None:
    global _recheck
    if _recheck is None or not _recheck.pending():
        _recheck = _notebook.loop_call_later(_recheck_s(), _reread)


def _recheck_s() -> float:
    """How often, in seconds, a live table reads its unfinished jobs again: the interval both
    tables share (:data:`pyjobq.core.jobs_table.RECHECK_MS`, ``<bg-jobs>`` too)."""
    return _jobs_table.RECHECK_MS / 1000


def _read_soon() -> None:
    """Start the read of what news said (``_due``) now, unless a read is under way: it starts
    the next when it ends. Where no event loop runs, the ids wait for the next news or table
    drawn on one."""
    if not _due or (_checking is not None and _can_finish(_checking)):
        return
    loop = _notebook.event_loop()
    if loop is not None:
        _start_check(loop, [])


def _start_check(loop: asyncio.AbstractEventLoop, shown: list[str]) -> None:
    """One read of the store at a time — so each begins after the one before answered, and
    their answers are taken in order: ``shown`` (the unfinished rows, :func:`_reread`) and
    every id news asked about."""
    global _checking
    _checking = loop.create_task(_check_again(shown))
    _checking.add_done_callback(_checked)


def _reread() -> None:
    """While a live table shows an unfinished job, read those jobs' records again each
    :data:`pyjobq.core.jobs_table.RECHECK_MS` (:func:`pyjobq.core.jobs_table.read_again`). News of a
    job's end or deletion is lost for good when the tab that stored it crashed or froze before
    broadcasting it; the store is the truth, and a table that only followed news would show
    that job unfinished for ever. Once no table shows an unfinished job it stops until the next
    change."""
    global _recheck
    _recheck = None
    if not _tables.live or not _store.answered:  # the first read (_fill_in) comes first
        return
    shown = [job_id for job_id, r in _known.items()
             if r.get("status") not in TERMINAL and _tables.shows(r)]
    if not shown:
        return
    if _checking is None or not _can_finish(_checking):
        loop = _notebook.event_loop()
        if loop is None:
            return
        _start_check(loop, shown)
    _keep_reading()


async def _check_again(unfinished: list[str]) -> None:
    """Read the stored record of each of ``unfinished`` (rows shown unfinished) and of every
    id news asked about (``_due``, taken as the read begins: a task its loop never ran leaves
    them waiting), and show what
    the store says: a record that says more than its row replaces it, a record of a job news
    told of is shown, and a job with no record leaves the tables — unless news of that job
    came while it was read (that news is the newer; an id news asked about is read again)."""
    due = dict(_due)
    _due.clear()
    job_ids = list(dict.fromkeys([*unfinished, *due]))
    heard = _Heard()
    # The reads of every record asked before this one: its answer may be newer than theirs (a
    # read asked after it is at least as new, and is left alone).
    earlier = list(_reads)
    _reads.add(heard)  # before the requests go out: whatever is heard after may be newer
    try:
        # Bounded: a read that never answers must not keep the next ones (nor what is heard
        # meanwhile) waiting for good.
        found = await asyncio.wait_for(_jobs_table.read_again(_queue(), job_ids), _recheck_s())
    except BaseException:
        for job_id, news in due.items():  # still unconfirmed: the next read asks again
            _expect(job_id, news)
        raise
    finally:
        _reads.discard(heard)
    for job_id, stored in found.items():
        if job_id in heard.news:
            if job_id in due:
                _expect(job_id, due[job_id])
            continue
        shown = _known.get(job_id)
        record = None if stored is None else _jobs_table.row(stored)
        if record is None:
            news = due.get(job_id)
            if news is not None and news.get("status") == Status.DONE \
                    and _is_volatile_here(job_id):
                record = {**(shown or {}), **news}  # forgotten by its engine once done
            elif shown is None:
                _mark(earlier, job_id, None)  # gone: an older answer must not draw it back
                continue
            elif shown.get("volatile") is True and shown.get("status") == Status.DONE:
                continue  # a done volatile job its engine forgot
            else:
                _forget(job_id)
                _mark(earlier, job_id, None)
                continue
        elif shown is None and job_id not in due:
            continue  # it left the tables while it was read
        elif shown is not None and not _jobs_table.read_is_news(record, shown):
            _heard_only.discard(job_id)
            continue
        _heard_only.discard(job_id)
        _known.pop(job_id, None)
        _known[job_id] = record
        _finished.pop(job_id, None)
        if record.get("status") in TERMINAL:
            _finished[job_id] = None
        _mark(earlier, job_id, record)
    _forget_finished()
    _tables.changed()


def _mark(earlier: list[_Heard], job_id: str, record: dict[str, Any] | None) -> None:
    # News to a read of every record asked before this one and still in flight, as heard news
    # is: its answer may predate this one, and must not draw the job back as it was.
    for other in earlier:
        if other in _reads:
            other.news[job_id] = record


def _checked(done: asyncio.Task[None]) -> None:
    global _checking
    if _checking is done:
        _checking = None
    if not done.cancelled() and done.exception() is not None:
        # What the tables show stays; the next period (or news) reads again.
        _log.debug("pyjobq: a live table could not read its jobs again: %s", done.exception())
        return
    if not done.cancelled():
        _read_soon()  # what news asked about while this one was read


def _forget_finished() -> None:
    global _store
    while len(_finished) > KNOWN_FINISHED:
        job_id, _ = _finished.popitem(last=False)
        _forget(job_id)
        _store = dataclasses.replace(_store, finished_kept=KNOWN_FINISHED)


#: Whether ``_known`` holds every stored record yet (the store answered a query_all), whether
#: the last read failed, and whether other tabs' news still arrives.
_store = _notebook.StoreState()
#: The table's own read of every record (see :func:`_fill_in`), while in flight.
_filling: asyncio.Task[Any] | None = None


def _render(view: _notebook.View, retired: bool) -> dict[str, str]:
    records = sorted(_known.values(), key=lambda r: (_notebook.created_at(r), str(r["id"])))
    store = dataclasses.replace(_store, reading=bool(_reads))
    return _notebook.table_bundle(records, view, store, retired=retired)


def _fill_in() -> None:
    """Ask the store for every record, unless it answered already or is being asked — on the
    event loop that runs now; where none runs (plain CPython outside asyncio), the table says
    it is not read. Called whenever a table is displayed or drawn: after a failed read, that
    is the retry."""
    global _filling, _store
    _arm_reread()  # a table shown (live from just after this) once the store answered too
    _read_soon()  # what news heard where no event loop ran asked about
    if _store.answered or (_filling is not None and _can_finish(_filling)):
        return
    loop = _notebook.event_loop()
    if loop is None:
        return
    _store = dataclasses.replace(_store, error=None)
    _filling = loop.create_task(query_all())
    _filling.add_done_callback(_filled)


def _can_finish(task: asyncio.Task[Any]) -> bool:
    # A task of a loop that ended (CPython's asyncio.run) or that no longer runs this code
    # would keep the table "reading" for good: a new read is asked on the loop of now.
    loop = task.get_loop()
    return not task.done() and not loop.is_closed() and loop is _notebook.event_loop()


def _filled(done: asyncio.Task[Any]) -> None:
    global _filling, _store
    if _filling is done:
        _filling = None
    if not done.cancelled() and done.exception() is not None and not _store.answered:
        error = done.exception()
        # What the table knew stays drawn; the caption says the read failed and how to retry.
        _store = dataclasses.replace(_store, error=f"{type(error).__name__}: {error}")
    _tables.changed()


_tables = _notebook.LiveTables(_render, on_show=_fill_in)

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
        _tables)


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
    return _tables.draw(_notebook.View())["text/html"]


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
    heard = _Heard()
    _reads.add(heard)  # before the request goes out: whatever is heard after may be newer
    return _remember_all(_queue().query_all(), heard)


async def _remember_all(reply: Awaitable[list[dict[str, Any]]],
                        heard: _Heard) -> list[dict[str, Any]]:
    global _store
    try:
        records = await reply
    finally:
        _reads.discard(heard)
    known: OrderedDict[str, dict[str, Any]] = OrderedDict()
    for listed in records:
        kept = _jobs_table.row(listed)
        if kept is not None:
            known[kept["id"]] = kept
    answered = set(known)
    # What was heard while the store answered is laid over its answer: a job filed meanwhile
    # is added, a job deleted meanwhile removed, and of two states of one job the newer kept
    # (heard news of the same age wins: it may carry progress the store does not keep).
    for job_id, news in heard.news.items():
        if news is None:
            known.pop(job_id, None)
        elif job_id not in known or (_jobs_table.updated_at(news)
                                     >= _jobs_table.updated_at(known[job_id])):
            known[job_id] = {**known.get(job_id, {}), **news}
    _known.clear()
    _known.update(known)
    _heard_only.intersection_update(_known.keys() - answered)
    _volatile_here.intersection_update(_known.keys())
    _store = dataclasses.replace(_store, answered=True, error=None, finished_kept=None)
    _finished.clear()
    _finished.update((job_id, None) for job_id, r in _known.items()
                     if r.get("status") in TERMINAL)
    _forget_finished()
    _tables.changed()
    _keep_reading()
    return records


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
    """Delete ``done`` records older than 7 days — and only those. Returns how many.
    Sent at the call."""
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
    global _store
    if _side is not None:
        _side.stop()
        _store = dataclasses.replace(_store, hears_other_tabs=False)
        _tables.changed()  # the live tables say they no longer hear other tabs


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
