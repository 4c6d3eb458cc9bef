"""What this tab knows of the jobs, for the notebook's tables: :class:`Known`.

The queue holds one (``pyjobq.queue``'s ``queue``, ``queue.table(...)`` and ``_repr_html_``
draw from it). It takes ``job-update`` news and the store's answers, keeps the newest state of
each job it has heard of, and reads the store again where news cannot be trusted: the rules of
each step are :mod:`pyjobq.core.jobs_table`'s, the tables' drawing is :mod:`pyjobq.notebook`'s
(whose docstring gives the theory of operation).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import weakref
from collections import OrderedDict
from typing import Any, Awaitable, Callable, Coroutine

from ..core import jobs_table
from ..core.status import TERMINAL, Status
from ..executor.side import ExecutorSide
from ..handle import JobUpdate
from . import (
    LiveTables,
    StoreState,
    Timer,
    View,
    created_at,
    event_loop,
    loop_call_later,
    table_bundle,
)

log = logging.getLogger("pyjobq")

KNOWN_FINISHED = 1000
"""Finished jobs kept beyond this many, least recently updated first, are forgotten (they stay
in the store: ``query_all()`` shows them), so a long session's memory stays flat."""


class Heard:
    """What :meth:`Known.remember` heard while one read of every record (``query_all``) was in
    flight: the newest state of each job, ``None`` for a deleted one. The store's answer may
    predate any of it, so it is laid over that answer, never thrown away for it: a job filed
    meanwhile stays listed, a job deleted meanwhile stays gone."""

    def __init__(self) -> None:
        self.news: dict[str, dict[str, Any] | None] = {}


class Known:
    """The records this tab has heard of, newest state of each, for a notebook's synchronous
    display, and the live tables drawn from them.

    ``side``: the queue's executor side (started on first use); it answers the reads.
    ``started``: that side if it has started, else None.
    """

    def __init__(self, side: Callable[[], ExecutorSide],
                 started: Callable[[], ExecutorSide | None]) -> None:
        self._side = side
        self._started = started
        #: Finished jobs kept beyond this many are forgotten (:data:`KNOWN_FINISHED`).
        self.keep_finished = KNOWN_FINISHED
        #: Unfinished jobs are always kept; finished ones beyond KNOWN_FINISHED are forgotten.
        self.records: OrderedDict[str, dict[str, Any]] = OrderedDict()
        #: The ids of the finished records, least recently updated first: trimming is O(1).
        self.finished: OrderedDict[str, None] = OrderedDict()
        #: What news said that the store has not confirmed yet, least recently heard first: each
        #: id the next read asks about, with the news of its end
        #: (:func:`pyjobq.core.jobs_table.confirm_first`), or None for news of a job not known.
        #: News is any same-origin script's word, so it only prompts that read; at most
        #: :data:`pyjobq.core.jobs_table.MAX_UNCONFIRMED` wait.
        self.due: OrderedDict[str, dict[str, Any] | None] = OrderedDict()
        #: The rows only news told of: no answer of the store has listed them yet.
        self.heard_only: set[str] = set()
        #: The rows that are this tab's volatile jobs (see :meth:`is_volatile_here`).
        self.volatile_here: set[str] = set()
        #: The reads of every record in flight, each with what was heard since it was asked.
        #: Weak: a ``query_all()`` coroutine dropped unawaited takes its own with it.
        self.reads: weakref.WeakSet[Heard] = weakref.WeakSet()
        #: Whether ``records`` holds every stored record yet (the store answered a query_all),
        #: whether the last read failed, and whether other tabs' news still arrives.
        self.store = StoreState()
        #: The live tables' next read of the unfinished jobs they show, while armed.
        self.recheck: Timer | None = None
        #: That read, while in flight.
        self.checking: asyncio.Task[None] | None = None
        #: The table's own read of every record (see :meth:`fill_in`), while in flight.
        self.filling: asyncio.Task[Any] | None = None
        self.tables = LiveTables(self.render, on_show=self.fill_in)

    # ------------------------------------------------------------ news

    def remember(self, update: JobUpdate) -> None:
        """Take one ``job-update`` as news: an unfinished job's state is shown as it comes; an
        end, a deletion or a finished job running again only prompts a read of the store, whose
        answer is shown (:meth:`_check_again`). Fields of the wrong kind are left out
        (:func:`pyjobq.core.jobs_table.row`), so no row can stop the table."""
        news = jobs_table.row(update)
        if news is None:
            return
        job_id: str = news["id"]
        shown = self.records.get(job_id)
        if jobs_table.late_progress(news, shown):
            return
        if jobs_table.confirm_first(news, shown):
            self._expect(job_id, news)
            self._read_soon()
            return
        if shown is None:
            self.heard_only.add(job_id)
            self._expect(job_id, None)
        side = self._started()
        if side is not None and side.volatile is not None and side.volatile.knows(job_id):
            self.volatile_here.add(job_id)
        record = self.records[job_id] = {**self.records.pop(job_id, {}), **news}
        for heard in self.reads:
            heard.news[job_id] = record
        self._changed()
        self._read_soon()

    def _expect(self, job_id: str, news: dict[str, Any] | None) -> None:
        """Ask the next read about ``job_id`` (``news``: the end it was told of). Beyond
        :data:`pyjobq.core.jobs_table.MAX_UNCONFIRMED` waiting, the oldest is let go, with its
        row if only news told of it: what the tables show is then no longer the whole store,
        and they say so until it is read again (on the next display, or at once while one is
        live)."""
        if news is None and job_id in self.due:
            return  # the end it waits to confirm is what it is read for
        self.due.pop(job_id, None)
        self.due[job_id] = news
        while len(self.due) > jobs_table.MAX_UNCONFIRMED:
            dropped, _ = self.due.popitem(last=False)
            if dropped in self.heard_only:
                self._forget(dropped)
                for heard in self.reads:
                    heard.news.pop(dropped, None)
            self.store = dataclasses.replace(self.store, answered=False)

    def _forget(self, job_id: str) -> None:
        """The row of ``job_id`` leaves the tables (and every set that names it)."""
        self.records.pop(job_id, None)
        self.finished.pop(job_id, None)
        self.heard_only.discard(job_id)
        self.volatile_here.discard(job_id)

    def is_volatile_here(self, job_id: str) -> bool:
        """Whether ``job_id`` is a row's job this tab's volatile engine ran: it was heard of
        unfinished while that engine held its closure. That engine forgets a job once it is
        done, so no read can confirm that end; its news comes from this tab, and a read that
        finds no record of the job then leaves the news of its end standing (``<bg-jobs>``
        asks too)."""
        return job_id in self.volatile_here

    def _changed(self) -> None:
        # News runs on an event loop: a live table that could not read the store (shown outside
        # one) or whose read ended with its loop asks now. After a failed read it waits to be
        # displayed again (a store that keeps failing is not asked every half second).
        if self.tables.live and self.store.error is None:
            self.fill_in()
        self.tables.changed()
        self._keep_reading()

    def stopped(self) -> None:
        """The queue's channel is closed: the live tables say they no longer hear other tabs."""
        self.store = dataclasses.replace(self.store, hears_other_tabs=False)
        self.tables.changed()

    # ------------------------------------------------------------ reads of the jobs shown

    def _keep_reading(self) -> None:
        """Arm the live tables' next read of the unfinished jobs they show, unless one is armed
        (see :meth:`_reread`). Armed on any change, a table shown, a read's answer; what to read
        is decided when it fires, so a burst of news costs no walk of the records."""
        if self.tables.live:
            self._arm_reread()

    def _arm_reread(self) -> None:
        if self.recheck is None or not self.recheck.pending():
            self.recheck = loop_call_later(_recheck_s(), self._reread)

    def _read_soon(self) -> None:
        """Start the read of what news said (``due``) now, unless a read is under way: it
        starts the next when it ends. Where no event loop runs, the ids wait for the next news
        or table drawn on one."""
        if not self.due or (self.checking is not None and _can_finish(self.checking)):
            return
        loop = event_loop()
        if loop is not None:
            self._start_check(loop, [])

    def _start_check(self, loop: asyncio.AbstractEventLoop, shown: list[str]) -> None:
        """One read of the store at a time — so each begins after the one before answered, and
        their answers are taken in order: ``shown`` (the unfinished rows, :meth:`_reread`) and
        every id news asked about."""
        self.checking = loop.create_task(self._check_again(shown))
        self.checking.add_done_callback(self._checked)

    def _reread(self) -> None:
        """While a live table shows an unfinished job, read those jobs' records again each
        :data:`pyjobq.core.jobs_table.RECHECK_MS` (:func:`pyjobq.core.jobs_table.read_again`).
        News of a job's end or deletion is lost for good when the tab that stored it crashed or
        froze before broadcasting it; the store is the truth, and a table that only followed
        news would show that job unfinished for ever. Once no table shows an unfinished job it
        stops until the next change."""
        self.recheck = None
        if not self.tables.live or not self.store.answered:  # the first read (fill_in) first
            return
        shown = [job_id for job_id, r in self.records.items()
                 if r.get("status") not in TERMINAL and self.tables.shows(r)]
        if not shown:
            return
        if self.checking is None or not _can_finish(self.checking):
            loop = event_loop()
            if loop is None:
                return
            self._start_check(loop, shown)
        self._keep_reading()

    async def _check_again(self, unfinished: list[str]) -> None:
        """Read the stored record of each of ``unfinished`` (rows shown unfinished) and of every
        id news asked about (``due``, taken as the read begins: a task its loop never ran leaves
        them waiting), and show what the store says: a record that says more than its row
        replaces it, a record of a job news told of is shown, and a job with no record leaves
        the tables — unless news of that job came while it was read (that news is the newer;
        an id news asked about is read again)."""
        due = dict(self.due)
        self.due.clear()
        job_ids = list(dict.fromkeys([*unfinished, *due]))
        heard = Heard()
        # The reads of every record asked before this one: its answer may be newer than theirs
        # (a read asked after it is at least as new, and is left alone).
        earlier = list(self.reads)
        self.reads.add(heard)  # before the requests go out: whatever is heard after is newer
        try:
            # Bounded: a read that never answers must not keep the next ones (nor what is heard
            # meanwhile) waiting for good.
            found = await asyncio.wait_for(jobs_table.read_again(self._side(), job_ids),
                                           _recheck_s())
        except BaseException:
            for job_id, news in due.items():  # still unconfirmed: the next read asks again
                self._expect(job_id, news)
            raise
        finally:
            self.reads.discard(heard)
        for job_id, stored in found.items():
            if job_id in heard.news:
                if job_id in due:
                    self._expect(job_id, due[job_id])
                continue
            self._take(earlier, job_id, stored, due)
        self._forget_finished()
        self.tables.changed()

    def _take(self, earlier: list[Heard], job_id: str, stored: Any,
              due: dict[str, dict[str, Any] | None]) -> None:
        """One answer of :meth:`_check_again`: the stored record of ``job_id`` (None: none)."""
        shown = self.records.get(job_id)
        record = None if stored is None else jobs_table.row(stored)
        if record is None:
            news = due.get(job_id)
            if news is not None and news.get("status") == Status.DONE \
                    and self.is_volatile_here(job_id):
                record = {**(shown or {}), **news}  # forgotten by its engine once done
            elif shown is None:
                self._mark(earlier, job_id, None)  # gone: an older answer must not draw it back
                return
            elif shown.get("volatile") is True and shown.get("status") == Status.DONE:
                return  # a done volatile job its engine forgot
            else:
                self._forget(job_id)
                self._mark(earlier, job_id, None)
                return
        elif shown is None and job_id not in due:
            return  # it left the tables while it was read
        elif shown is not None and not jobs_table.read_is_news(record, shown):
            self.heard_only.discard(job_id)
            return
        self.heard_only.discard(job_id)
        self.records.pop(job_id, None)
        self.records[job_id] = record
        self.finished.pop(job_id, None)
        if record.get("status") in TERMINAL:
            self.finished[job_id] = None
        self._mark(earlier, job_id, record)

    def _mark(self, earlier: list[Heard], job_id: str, record: dict[str, Any] | None) -> None:
        # News to a read of every record asked before this one and still in flight, as heard
        # news is: its answer may predate this one, and must not draw the job back as it was.
        for other in earlier:
            if other in self.reads:
                other.news[job_id] = record

    def _checked(self, done: asyncio.Task[None]) -> None:
        if self.checking is done:
            self.checking = None
        if not done.cancelled() and done.exception() is not None:
            # What the tables show stays; the next period (or news) reads again.
            log.debug("pyjobq: a live table could not read its jobs again: %s", done.exception())
            return
        if not done.cancelled():
            self._read_soon()  # what news asked about while this one was read

    def _forget_finished(self) -> None:
        while len(self.finished) > self.keep_finished:
            job_id, _ = self.finished.popitem(last=False)
            self._forget(job_id)
            self.store = dataclasses.replace(self.store, finished_kept=self.keep_finished)

    # ------------------------------------------------------------ the read of every record

    def render(self, view: View, retired: bool) -> dict[str, str]:
        records = sorted(self.records.values(), key=lambda r: (created_at(r), str(r["id"])))
        store = dataclasses.replace(self.store, reading=bool(self.reads))
        return table_bundle(records, view, store, retired=retired)

    def fill_in(self) -> None:
        """Ask the store for every record, unless it answered already or is being asked — on
        the event loop that runs now; where none runs (plain CPython outside asyncio), the
        table says it is not read. Called whenever a table is displayed or drawn: after a
        failed read, that is the retry."""
        self._arm_reread()  # a table shown (live from just after this) once the store answered
        self._read_soon()  # what news heard where no event loop ran asked about
        if self.store.answered or (self.filling is not None and _can_finish(self.filling)):
            return
        loop = event_loop()
        if loop is None:
            return
        self.store = dataclasses.replace(self.store, error=None)
        self.filling = loop.create_task(self.query_all())
        self.filling.add_done_callback(self._filled)

    def _filled(self, done: asyncio.Task[Any]) -> None:
        if self.filling is done:
            self.filling = None
        if not done.cancelled() and done.exception() is not None and not self.store.answered:
            error = done.exception()
            # What the table knew stays drawn; the caption says the read failed and how to retry.
            self.store = dataclasses.replace(self.store, error=f"{type(error).__name__}: {error}")
        self.tables.changed()

    def query_all(self) -> Coroutine[Any, Any, list[dict[str, Any]]]:
        """``query_all()``, whose answer becomes what the tables show (with what was heard
        while it was asked laid over it)."""
        heard = Heard()
        self.reads.add(heard)  # before the request goes out: whatever is heard after is newer
        return self._remember_all(self._side().query_all(), heard)

    async def _remember_all(self, reply: Awaitable[list[dict[str, Any]]],
                            heard: Heard) -> list[dict[str, Any]]:
        try:
            records = await reply
        finally:
            self.reads.discard(heard)
        known: OrderedDict[str, dict[str, Any]] = OrderedDict()
        for listed in records:
            kept = jobs_table.row(listed)
            if kept is not None:
                known[kept["id"]] = kept
        answered = set(known)
        # What was heard while the store answered is laid over its answer: a job filed
        # meanwhile is added, a job deleted meanwhile removed, and of two states of one job the
        # newer kept (heard news of the same age wins: it may carry progress the store does not
        # keep).
        for job_id, news in heard.news.items():
            if news is None:
                known.pop(job_id, None)
            elif job_id not in known or (jobs_table.updated_at(news)
                                         >= jobs_table.updated_at(known[job_id])):
                known[job_id] = {**known.get(job_id, {}), **news}
        self.records.clear()
        self.records.update(known)
        self.heard_only.intersection_update(self.records.keys() - answered)
        self.volatile_here.intersection_update(self.records.keys())
        self.store = dataclasses.replace(self.store, answered=True, error=None,
                                         finished_kept=None)
        self.finished.clear()
        self.finished.update((job_id, None) for job_id, r in self.records.items()
                             if r.get("status") in TERMINAL)
        self._forget_finished()
        self.tables.changed()
        self._keep_reading()
        return records


def _recheck_s() -> float:
    """How often, in seconds, a live table reads its unfinished jobs again: the interval both
    tables share (:data:`pyjobq.core.jobs_table.RECHECK_MS`, ``<bg-jobs>`` too)."""
    return jobs_table.RECHECK_MS / 1000


def _can_finish(task: asyncio.Task[Any]) -> bool:
    # A task of a loop that ended (CPython's asyncio.run) or that no longer runs this code
    # would keep the table "reading" for good: a new read is asked on the loop of now.
    loop = task.get_loop()
    return not task.done() and not loop.is_closed() and loop is event_loop()
