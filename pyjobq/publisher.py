"""The publisher: how a scheduler tells every page what it stored.

Theory of operation
-------------------
A write's news goes two ways: over the link to this scheduler's own page (which
still hears it after closing its channel) and over the BroadcastChannel to every
other tab. One ``job-update`` carries all the records one transaction stored, up
to :data:`NEWS_BATCH` (``jobs``; its first also as ``job`` for older receivers), so
a burst of 10,000 is twenty messages. News is only news: receivers read the store
for truth (spec: "the channel is news; the store is the truth").

Progress is news that is never stored (``progress_only``). The volatile engine's
updates say ``volatile`` so tables mark the row as this tab's.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from .core.messages import make
from .core.ports import Channel, Link
from .core.records import JobRecord
from .core.status import Status

log = logging.getLogger("pyjobq")

#: At most this many records in one ``job-update`` (a burst of 10,000 is twenty messages).
NEWS_BATCH = 500


class Publisher:
    def __init__(self, *, link: Link, channel: Channel, source: str, volatile: bool) -> None:
        self._link = link
        self._channel = channel
        self.source = source
        self._volatile = volatile

    def records(self, records: Sequence[JobRecord], **extra: Any) -> None:
        """Records one transaction stored (or, ``deleted=True``, deleted): one message per batch."""
        for start in range(0, len(records), NEWS_BATCH):
            jobs = [self._summary(r, **extra) for r in records[start:start + NEWS_BATCH]]
            batch = {"jobs": jobs} if len(jobs) > 1 else {}
            self.post(make("job-update", source=self.source, job=jobs[0], **batch))

    def progress(self, job_id: str, progress: Any, note: Any) -> None:
        """A running job's progress: a job-update that is not stored."""
        job = {"id": job_id, "status": Status.RUNNING.value, "progress": progress,
               "progress_note": note, "progress_only": True}
        if self._volatile:
            job["volatile"] = True
        self.post(make("job-update", source=self.source, job=job))

    def _summary(self, record: JobRecord, **extra: Any) -> dict[str, Any]:
        summary = record.summary()
        if self._volatile:
            summary["volatile"] = True
        summary.update(extra)
        return summary

    def post(self, update: dict[str, Any]) -> None:
        # To this page directly (it still hears us after it closed its channel),
        # and to every other tab through the channel.
        self._link.send(update)
        try:
            self._channel.post(update)
        except Exception as exc:  # a closed channel: other tabs just miss this update
            log.debug("pyjobq: job-update not broadcast: %s", exc)
