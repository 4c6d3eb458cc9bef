"""The publisher: how a scheduler tells every page what it stored.

Runs wherever an engine runs: in the scheduler worker, and in the page — the waiting tab's
request scheduler publishes what its requests stored, the outbox what it stored, and the
volatile engine tells only its own page (nothing on the channel).

Theory of operation
-------------------
A write's news goes two ways: over the link to this scheduler's own page (which
still hears it after closing its channel) and over the BroadcastChannel to every
other tab. One ``job-update`` carries all the records one transaction stored, up
to :data:`NEWS_BATCH` (``jobs``), so a burst of 10,000 is twenty messages. News is only
news: receivers read the store for truth (spec: "the channel is news; the store is the
truth").

News posted between a transaction's commit and the ``run`` of the job that transaction
claimed would delay the run: the channel's post crosses the browser process in Chromium,
and the page handles its own news before a ``run`` queued behind it (0.4 ms a job on the
page, ``bench.mjs --trace``). So what a step stored is queued and posted once that step is
over — after the ``run`` went out — to the page first and then to
the other tabs, merged with whatever else the step stored, in the order it was
stored; each record's summary is made then too (after the ``run``), once for both.
Nothing waits for it: the store was written first, and news is never what anyone
relies on. The volatile engine's page hears at once (its link is in the tab).

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
        #: What is queued, in the order it was stored: records one transaction stored with
        #: their extra fields, or (None, a progress job). Summaries are made as it is posted —
        #: after the step's ``run`` went out — once for the page and the channel both.
        self._queued: list[tuple[Sequence[JobRecord] | None, dict[str, Any]]] = []
        self._flush_soon = False

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
        NEWS_BATCH records a message; a progress job alone)."""
        queued, self._queued, self._flush_soon = self._queued, [], False
        for_channel: list[tuple[bool, list[dict[str, Any]]]] = []
        for records, what in queued:
            alone = records is None
            jobs = [what] if records is None else [self._summary(r, **what) for r in records]
            self._tell_page(jobs)
            if alone or not for_channel or for_channel[-1][0]:
                for_channel.append((alone, []))
            for_channel[-1][1].extend(jobs)
        for _alone, jobs in for_channel:
            for start in range(0, len(jobs), NEWS_BATCH):
                try:
                    self._channel.post(_update(self._source, jobs[start:start + NEWS_BATCH]))
                except Exception as exc:  # a closed channel: other tabs just miss this update
                    log.debug("pyjobq: job-update not broadcast: %s", exc)
                    return


def _update(source: str, jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``job-update`` of ``jobs``."""
    return make("job-update", source=source, jobs=jobs)
