"""Job handles and listeners: what this page tells its code about jobs.

:class:`Listeners` are the page's ``on_update`` callbacks and ``updates()`` iterators: every
``job-update`` reaches them, from either engine and from other tabs. :class:`Handles` are the
:class:`~pyjobq.handle.Job` handles of one engine's jobs, and settle each one's ``done`` once.

The channel is news, the store is the truth (spec: "Updates"): a handle settles on its own
engine's word over the link, but news of an end heard from another tab — or a result too
big to travel — is checked against the store first (:meth:`Handles.confirm`). An engine
whose handles can :attr:`~Handles.read_ended` the store also rereads, every
:data:`~pyjobq.core.messages.RECHECK_MS`, the records of the jobs someone here awaits, in one
request (``ended_jobs``): a message lost on the way costs an awaited ``done`` that long, never
a ``done`` that never resolves. A handle nobody awaits is not read for: a backlog of thousands
of jobs filed and left to run costs no reads, and the first wait on one of them is answered by
the next recheck at the latest.

Runs on the page only (its main thread, or a worker host such as a notebook kernel), where the
code holding the handles is.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any, AsyncIterator, Callable

from ..core.codes import REPLACED_ERROR, Code
from ..core.messages import RECHECK_MS
from ..core.outcome import Outcome
from ..core.ports import Clock, Timer
from ..core.status import TERMINAL, Status
from ..handle import Job, JobControl, JobUpdate

log = logging.getLogger("pyjobq")

#: How many deletions heard in news a page remembers the reason of (:meth:`Handles.heard_gone`).
GONE_KEPT = 1000

#: Reads one stored record by id (None: there is none).
Read = Callable[[str], "asyncio.Future[Any]"]
#: Reads which of several jobs have ended (``ended_jobs``): a dict of the record of each that did,
#: None for each with no record; unfinished ones are left out.
ReadEnded = Callable[[list[str]], "asyncio.Future[Any]"]


class Listeners:
    """The page's ``job-update`` listeners."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[JobUpdate], None]] = []

    def add(self, callback: Callable[[JobUpdate], None]) -> Callable[[], None]:
        """Call ``callback(update)`` for every ``job-update``;
        returns a function that unsubscribes."""
        self._callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return unsubscribe

    def __len__(self) -> int:
        return len(self._callbacks)

    def tell(self, update: JobUpdate) -> None:
        """Hand ``update`` to every listener; one that raises is logged and the rest still hear."""
        for callback in list(self._callbacks):
            try:
                callback(update)
            except Exception:
                log.exception("pyjobq: a job-update listener raised")

    async def updates(self) -> AsyncIterator[JobUpdate]:
        """``async for update in updates()``: every ``job-update`` from now on."""
        queue: asyncio.Queue[JobUpdate] = asyncio.Queue()
        unsubscribe = self.add(queue.put_nowait)
        try:
            while True:
                yield await queue.get()
        finally:
            unsubscribe()


def _ended(job: dict[str, Any]) -> bool:
    return bool(job.get("deleted")) or job.get("status") in TERMINAL


def _deleted(job_id: str, news: dict[str, Any] | None = None) -> Outcome:
    """The outcome of a job whose record is gone: cancelled, with the code ``deleted`` — or
    ``replaced`` when the news of its deletion says a newer job of its key replaced it (the
    store, which confirms the record is gone, cannot say why)."""
    if news is not None and news.get("code") == Code.REPLACED.value:
        return Outcome(id=job_id, status=Status.CANCELLED, error=REPLACED_ERROR,
                       code=Code.REPLACED)
    return Outcome(id=job_id, status=Status.CANCELLED, error="deleted", code=Code.DELETED)


class Handles:
    """The handles of one engine's jobs on this page.

    Args:
        listeners: told of every update this engine's jobs get.
        clock: for the recheck timer.
        read: reads a record from this engine's store; None for an engine whose word is
            never lost (volatile jobs: the engine runs in this page), which then confirms no
            news.
        read_ended: reads which of several records have ended, for the recheck; None: no
            recheck (an engine whose word is never lost).
        control: what the handles' own calls (``job.cancel()`` …) ask; the executor side.
        volatile: whether these are volatile jobs' handles (their engine forgets a done job).
    """

    def __init__(self, listeners: Listeners, clock: Clock, read: Read | None = None, *,
                 read_ended: ReadEnded | None = None, control: JobControl | None = None,
                 volatile: bool = False) -> None:
        self.listeners = listeners
        self.clock = clock
        self.read = read
        self.read_ended = read_ended
        self.control = control
        self.volatile = volatile
        self.jobs: dict[str, Job] = {}
        self._confirming: set[str] = set()  # ids whose record is being read
        #: What news said ended a job whose record it says is gone (``replaced``), until a read
        #: begun after that news settles the handle or finds the record still there (the news
        #: was wrong): the store can say only that the record is gone.
        self._gone_why: dict[str, Outcome] = {}
        #: Ids whose news of an end came while their record was being read: that read may have
        #: begun before the change the news tells of (a transaction that had not committed yet),
        #: so one that does not settle the handle is followed by another.
        self._news_since_read: set[str] = set()
        #: Why the last :data:`GONE_KEPT` jobs news said were deleted are gone (``replaced`` or
        #: ``deleted``), whether or not a handle awaited them: a handle looked up later, whose
        #: read finds no record, says why rather than "not found".
        self._heard_gone: OrderedDict[str, Outcome] = OrderedDict()
        self._recheck_timer: Timer | None = None
        #: Set once this page can no longer learn outcomes: nothing is reread after that.
        self.lost: BaseException | None = None

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.jobs

    def get(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def add(self, job_id: str) -> Job:
        """A new handle on ``job_id`` (filed here, or looked up by id)."""
        job = Job(job_id, self.control, volatile=self.volatile)
        self.jobs[job_id] = job
        self._arm_recheck()
        return job

    def settle(self, job_id: str, outcome: Outcome) -> None:
        self._gone_why.pop(job_id, None)
        self._news_since_read.discard(job_id)
        handle = self.jobs.pop(job_id, None)
        if handle is not None:
            handle._settle(outcome)

    def heard_gone(self, job_id: str) -> Outcome | None:
        """Why news said ``job_id`` was deleted (None: no such news heard lately). Only a read
        that finds no record may use it: news alone settles nothing."""
        return self._heard_gone.get(job_id)

    def settle_from(self, job_id: str, record: dict[str, Any] | None, *,
                    missing: Outcome | None = None) -> None:
        """Settle from a stored record: terminal → its outcome; none → ``missing`` (default:
        deleted); anything else → not yet."""
        if record is None:
            self.settle(job_id, missing or _deleted(job_id))
        elif record.get("status") in TERMINAL:
            self.settle(job_id, Outcome.of(record))

    def lose_stored(self, error: BaseException) -> None:
        """This page can no longer learn these jobs' outcomes: each stored one's ``done`` raises
        ``error`` (one still being filed fails through its enqueue instead)."""
        self.lost = error
        self._gone_why.clear()
        self._news_since_read.clear()
        for job_id, handle in list(self.jobs.items()):
            if handle._stored.done():
                del self.jobs[job_id]
                handle._lose(error)

    def update(self, job: dict[str, Any], *, trusted: bool = True) -> None:
        """A ``job-update``: news for every listener. ``done`` settles on it only when it is this
        engine's own word (``trusted``) and whole; otherwise an end is checked first."""
        self.listeners.tell(JobUpdate(job))
        job_id = job.get("id")
        if isinstance(job_id, str) and job.get("deleted"):
            self._heard_gone[job_id] = _deleted(job_id, job)
            self._heard_gone.move_to_end(job_id)
            if len(self._heard_gone) > GONE_KEPT:
                self._heard_gone.popitem(last=False)
        if not isinstance(job_id, str) or job_id not in self.jobs:
            return
        progress = job.get("progress")
        if isinstance(progress, (int, float)) and not isinstance(progress, bool) \
                and 0 <= progress <= 1:
            self.jobs[job_id]._progress = float(progress)
        if not _ended(job):
            return
        if not trusted or job.get("result_truncated"):
            self.confirm(job_id, _deleted(job_id, job) if job.get("deleted") else None)
        elif job.get("deleted"):
            self.settle(job_id, _deleted(job_id, job))
        else:
            self.settle(job_id, Outcome.of(job))

    def confirm(self, job_id: str, missing: Outcome | None = None, *, news: bool = True) -> None:
        """Settle ``done`` from the stored record, which news said has ended: terminal → its
        outcome; gone → ``missing`` (default: deleted); anything else → the news was wrong,
        wait for more. ``news=False``: a recheck's read, which no news prompted.

        News that comes while a read of the record is under way (a recheck's, or one for
        earlier news) does not start a second read at once, but that read may have begun
        before the change the news tells of: when it ends without settling ``done``, the
        record is read again, so the news is checked by a read begun after it — never dropped
        for a stale answer (its ``replaced`` then lost to a later recheck, which can say only
        ``deleted``, or its end heard only a recheck later)."""
        if missing is not None:
            # Kept for a read already under way too (a recheck's): it may be what finds it gone.
            self._gone_why[job_id] = missing
        if self.read is None or self.lost is not None:
            return
        if job_id in self._confirming:
            if news:
                self._news_since_read.add(job_id)
            return
        self._confirming.add(job_id)
        self._news_since_read.discard(job_id)  # this read begins after every news heard so far

        def read(f: asyncio.Future[Any]) -> None:
            ok = not f.cancelled() and f.exception() is None
            self._answered(job_id, ok, f.result() if ok else None)

        self.read(job_id).add_done_callback(read)

    def _answered(self, job_id: str, ok: bool, record: dict[str, Any] | None, *,
                  unfinished: bool = False) -> None:
        """A read of ``job_id``'s record (``ok``: it answered) found ``record``, or found it
        ``unfinished`` (the recheck's batch leaves those out)."""
        self._confirming.discard(job_id)
        if job_id not in self.jobs:  # settled meanwhile (settle dropped what was kept)
            return
        if ok and not unfinished:
            self.settle_from(job_id, record, missing=self._gone_why.get(job_id))
        if job_id not in self.jobs:
            return
        if job_id in self._news_since_read:
            self.confirm(job_id, news=False)  # news came during this read: read again
        elif ok:
            # A read begun after the news found the record still there: the news was wrong.
            self._gone_why.pop(job_id, None)

    def _arm_recheck(self) -> None:
        if self.read_ended is not None and self._recheck_timer is None and self.lost is None:
            self._recheck_timer = self.clock.call_later(RECHECK_MS, self._recheck)

    def _recheck(self) -> None:
        """Read, in one request, the records of the jobs someone awaits here, settling those that
        ended; a job with a read of its own under way is left to it."""
        self._recheck_timer = None
        if self.read_ended is None or self.lost is not None:
            return
        outstanding = [handle for handle in self.jobs.values() if not handle._done.done()]
        awaited = [handle.id for handle in outstanding
                   if handle._stored.done() and handle.id not in self._confirming
                   and handle._awaited()]
        if outstanding:
            self._arm_recheck()
        if not awaited:
            return
        for job_id in awaited:
            self._confirming.add(job_id)
            self._news_since_read.discard(job_id)

        def read(f: asyncio.Future[Any]) -> None:
            ok = not f.cancelled() and f.exception() is None
            found = f.result() if ok else None
            if not isinstance(found, dict):
                ok, found = False, {}
            for job_id in awaited:
                self._answered(job_id, ok, found.get(job_id),
                               unfinished=ok and job_id not in found)

        self.read_ended(awaited).add_done_callback(read)
