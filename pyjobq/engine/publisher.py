"""The publisher: how a scheduler tells every page what it stored.

Runs wherever an engine runs: in the scheduler worker, and in the page — the waiting tab's
request scheduler publishes what its requests stored, the outbox what it stored, and the
volatile engine tells only its own page (nothing on the channel).

Theory of operation
-------------------
A write's news goes two ways: over the link to this scheduler's own page (which
still hears it after closing its channel) and over the BroadcastChannel to every
other tab. One ``job-update`` carries all the records one transaction stored, up
to :data:`NEWS_BATCH` (``jobs``; its first also as ``job`` for older receivers), so
a burst of 10,000 is twenty messages. News is only news: receivers read the store
for truth (spec: "the channel is news; the store is the truth").

News used to sit between a transaction's commit and the ``run`` of the job that
transaction claimed: first the channel's post (in Chromium a BroadcastChannel
message crosses the browser process), then — once that went — the page's own
news, which the page handles before the ``run`` queued behind it (0.4 ms a job on
the page, ``bench.mjs --trace``). So what a step stored is queued and posted once
that step is over — after the ``run`` went out — to the page first and then to
the other tabs, merged with whatever else the step stored, in the order it was
stored; each record's summary is made then too (after the ``run``), once for both.
Nothing waits for it: the store was written first, and news is never what anyone
relies on. The volatile engine's page hears at once (its link is in the tab).

While this scheduler runs job after job, other tabs hear their claims and ends at most
every :data:`CHANNEL_EVERY_MS`: the first at once, what follows within that time held and
posted together when it is over. Each channel post crosses the browser's process to every
other context of the origin — this page's own channel object too, which drops the echo — and
one a job cost a serial lane about a tenth of its rate (``bench.mjs``: 2,000 jobs of one type,
six runs interleaved with a build posting none from the worker), while other tabs gain nothing
from hearing of each job apart: a table redraws per message, and the store is the truth.
Nothing is held unless a run is still in flight here (``streaming``) — a lone job's end, a
request's delete or cancel, what a scheduler that runs nothing stores all go at once, as
other contexts act on them — and news of a record now pending goes at once, with whatever
was held before it (the order kept): it may be another context's work. Held news is posted
when the scheduler stops (:meth:`Publisher.stop`); a context that ends without stopping loses
at most that window's news, which readers of the store never needed.

Progress is news that is never stored (``progress_only``). The volatile engine's
updates say ``volatile`` so tables mark the row as this tab's.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Callable, Sequence

from ..core.messages import make
from ..core.ports import Channel, Clock, Link, Timer
from ..core.records import JobRecord
from ..core.status import Status

log = logging.getLogger("pyjobq")

#: At most this many records in one ``job-update`` (a burst of 10,000 is twenty messages).
NEWS_BATCH = 500

#: Other tabs hear a stream of claims and ends at most this often (ms): about a frame.
CHANNEL_EVERY_MS = 20


class Publisher:
    def __init__(self, *, link: Link, channel: Channel, clock: Clock, source: str,
                 volatile: bool, streaming: Callable[[], bool]) -> None:
        self._link = link
        self._channel = channel
        self._clock = clock
        #: Whether a run is in flight here: only then is other tabs' news held.
        self._streaming = streaming
        self._source = source
        self._volatile = volatile
        #: What is queued, in the order it was stored: records one transaction stored with
        #: their extra fields, or (None, a progress job). Summaries are made as it is posted —
        #: after the step's ``run`` went out — once for the page and the channel both.
        self._queued: list[tuple[Sequence[JobRecord] | None, dict[str, Any]]] = []
        self._flush_soon = False
        #: The channel's news held until :data:`CHANNEL_EVERY_MS` is over, in order: each
        #: message's jobs, and whether it is a progress job alone.
        self._held: list[tuple[bool, list[dict[str, Any]]]] = []
        #: When the channel was last posted to (the clock's ms).
        self._posted_at = -math.inf
        #: Armed only while news is held: it posts it when CHANNEL_EVERY_MS is over.
        self._channel_timer: Timer | None = None

    def records(self, records: Sequence[JobRecord], **extra: Any) -> None:
        """Records one transaction stored (or, ``deleted=True``, deleted): one message per batch."""
        if self._volatile:  # its page hears at once, and nothing goes on the channel
            self._tell_page([self._summary(r, **extra) for r in records])
            return
        self._queued.append((records, extra))
        self._flush_after_step()

    def progress(self, job_id: str, progress: Any, note: Any) -> None:
        """A running job's progress: a job-update that is not stored."""
        job = {"id": job_id, "status": Status.RUNNING.value, "progress": progress,
               "progress_note": note, "progress_only": True}
        if self._volatile:
            job["volatile"] = True
            self._tell_page([job])
            return
        self._queued.append((None, job))
        self._flush_after_step()

    def _tell_page(self, jobs: list[dict[str, Any]]) -> None:
        for start in range(0, len(jobs), NEWS_BATCH):
            self._link.send(_update(self._source, jobs[start:start + NEWS_BATCH]))

    def _summary(self, record: JobRecord, **extra: Any) -> dict[str, Any]:
        summary = record.summary()
        if self._volatile:
            summary["volatile"] = True
        summary.update(extra)
        return summary

    def _flush_after_step(self) -> None:
        if not self._flush_soon:
            self._flush_soon = True
            asyncio.get_event_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Post what is queued now: to the page, then to other tabs (in order, at most
        NEWS_BATCH records a message; a progress job alone) — held for them instead while a
        run is in flight and CHANNEL_EVERY_MS since their last post is not over, unless a
        record is now pending."""
        queued, self._queued, self._flush_soon = self._queued, [], False
        held = self._held
        work = False
        for records, what in queued:
            alone = records is None
            jobs = [what] if records is None else [self._summary(r, **what) for r in records]
            self._tell_page(jobs)
            if alone or not held or held[-1][0]:
                held.append((alone, []))
            held[-1][1].extend(jobs)
            work = work or any(r.status is Status.PENDING for r in records or ())
        if not held or self._channel_timer is not None and not work and self._streaming():
            return  # held: the armed timer posts it
        wait = self._posted_at + CHANNEL_EVERY_MS - self._clock.now()
        if work or wait <= 0 or not self._streaming():
            self._post_held()
        else:
            self._channel_timer = self._clock.call_later(wait, self._channel_due)

    def stop(self) -> None:
        """The scheduler stops: what is held for other tabs goes now."""
        self._post_held()

    def _post_held(self) -> None:
        if self._channel_timer is not None:
            self._channel_timer.cancel()
            self._channel_timer = None
        held, self._held = self._held, []
        if held:
            self._posted_at = self._clock.now()
        for _alone, jobs in held:
            for start in range(0, len(jobs), NEWS_BATCH):
                try:
                    self._channel.post(_update(self._source, jobs[start:start + NEWS_BATCH]))
                except Exception as exc:  # a closed channel: other tabs just miss this update
                    log.debug("pyjobq: job-update not broadcast: %s", exc)
                    return

    def _channel_due(self) -> None:
        """CHANNEL_EVERY_MS since the last post is over: what was held goes."""
        self._channel_timer = None
        self._post_held()


def _update(source: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``job-update``: ``jobs`` when there are several, the first also as ``job``."""
    return make("job-update", source=source, job=jobs[0],
                **({"jobs": jobs} if len(jobs) > 1 else {}))
