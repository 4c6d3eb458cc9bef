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
stored. Nothing waits for it: the store was written first, and news is never what
anyone relies on. The volatile engine's page hears at once (its link is in the tab).

Progress is news that is never stored (``progress_only``). The volatile engine's
updates say ``volatile`` so tables mark the row as this tab's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Sequence

from ..core.messages import make
from ..core.ports import Channel, Link
from ..core.records import JobRecord
from ..core.status import Status

log = logging.getLogger("pyjobq")

#: At most this many records in one ``job-update`` (a burst of 10,000 is twenty messages).
NEWS_BATCH = 500


class Publisher:
    def __init__(self, *, link: Link, channel: Channel, source: str, volatile: bool) -> None:
        self._link = link
        self._channel = channel
        self._source = source
        self._volatile = volatile
        #: What is queued for the channel: (progress, its jobs), in the order it was stored.
        self._pending: list[tuple[bool, list[dict[str, Any]]]] = []
        #: What is queued for the page: its messages, in order.
        self._for_page: list[dict[str, Any]] = []
        self._flush_soon = False

    def records(self, records: Sequence[JobRecord], **extra: Any) -> None:
        """Records one transaction stored (or, ``deleted=True``, deleted): one message per batch."""
        jobs = [self._summary(r, **extra) for r in records]
        for start in range(0, len(jobs), NEWS_BATCH):
            self._tell_page(_update(self._source, jobs[start:start + NEWS_BATCH]))
        self._queue_for_channel(jobs)

    def progress(self, job_id: str, progress: Any, note: Any) -> None:
        """A running job's progress: a job-update that is not stored."""
        job = {"id": job_id, "status": Status.RUNNING.value, "progress": progress,
               "progress_note": note, "progress_only": True}
        if self._volatile:
            job["volatile"] = True
        self._tell_page(_update(self._source, [job]))
        self._queue_for_channel([job], alone=True)

    def _tell_page(self, message: dict[str, Any]) -> None:
        if self._volatile:
            self._link.send(message)
            return
        self._for_page.append(message)
        self._flush_after_step()

    def _summary(self, record: JobRecord, **extra: Any) -> dict[str, Any]:
        summary = record.summary()
        if self._volatile:
            summary["volatile"] = True
        summary.update(extra)
        return summary

    def _queue_for_channel(self, jobs: list[dict[str, Any]], *, alone: bool = False) -> None:
        if self._volatile:
            return  # volatile jobs are this tab's alone: no other tab hears of them
        if alone or not self._pending or self._pending[-1][0]:
            self._pending.append((alone, []))
        self._pending[-1][1].extend(jobs)
        self._flush_after_step()

    def _flush_after_step(self) -> None:
        if not self._flush_soon:
            self._flush_soon = True
            asyncio.get_event_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Post what is queued now: to the page, then to other tabs
        (in order, at most NEWS_BATCH records a message)."""
        for_page, self._for_page = self._for_page, []
        pending, self._pending, self._flush_soon = self._pending, [], False
        for message in for_page:
            self._link.send(message)
        for _alone, jobs in pending:
            for start in range(0, len(jobs), NEWS_BATCH):
                try:
                    self._channel.post(_update(self._source, jobs[start:start + NEWS_BATCH]))
                except Exception as exc:  # a closed channel: other tabs just miss this update
                    log.debug("pyjobq: job-update not broadcast: %s", exc)
                    return


def _update(source: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``job-update``: ``jobs`` when there are several, the first also as ``job``."""
    return make("job-update", source=source, job=jobs[0],
                **({"jobs": jobs} if len(jobs) > 1 else {}))
