"""Which job the current task runs: :func:`current_job_id` and :func:`report_progress`.

Runs on the page only (the executor side), in the task that runs a job's executor (asyncio
copies the context into it). The :class:`~pyjobq.executor.runner.Runner` sets the run (a
:class:`RunProgress`); the built-in ``fetch`` executor and user code read it.

Progress is coalesced per run: a loop that reports on every item would otherwise send one
message over the link per call, and the scheduler one ``job-update`` to every tab per message.
The first report goes at once; then at most one message per :data:`PROGRESS_EVERY_MS` on the
runner's clock, the last report of a burst always sent (the trailing edge, so a table ends on
the value the executor last said). A report still waiting when the run ends is sent just
before its ``run_result``, so the end is never overtaken by progress; a report after the end
(from a task the executor left behind) is dropped.
"""

from __future__ import annotations

import contextvars
from typing import Any

from ..core.errors import InvalidJobError, PyjobqError
from ..core.messages import make
from ..core.ports import Clock, Link, Timer

#: The least time between two progress messages of one run, in ms; reports between are
#: coalesced to the last one.
PROGRESS_EVERY_MS = 100.0


class RunProgress:
    """One run's job id and its progress reports, coalesced (see the module docstring).

    Args:
        link: where the run's answers go.
        job_id: the job the run belongs to.
        clock: when a held report is due.
    """

    __slots__ = ("_link", "job_id", "_clock", "_sent_at", "_pending", "_timer", "_ended")

    def __init__(self, link: Link, job_id: str, clock: Clock) -> None:
        self._link = link
        self.job_id = job_id
        self._clock = clock
        #: When the last progress message went; None: none yet.
        self._sent_at: float | None = None
        #: The latest report not sent yet.
        self._pending: dict[str, Any] | None = None
        self._timer: Timer | None = None
        self._ended = False

    def report(self, progress: float, note: str | None) -> None:
        """Send this report now, or hold it as the one to send when the interval is over."""
        if self._ended:
            return
        message = make("progress", job_id=self.job_id, progress=progress, note=note)
        if self._timer is not None:
            self._pending = message  # a send is due already: it carries this report instead
            return
        now = self._clock.now()
        if self._sent_at is None or now - self._sent_at >= PROGRESS_EVERY_MS:
            self._send(message, now)
            return
        self._pending = message
        self._timer = self._clock.call_later(self._sent_at + PROGRESS_EVERY_MS - now, self._due)

    def _due(self) -> None:
        self._timer = None
        self._flush()

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        message, self._pending = self._pending, None
        if message is not None:
            self._send(message, self._clock.now())

    def _send(self, message: dict[str, Any], now: float) -> None:
        self._sent_at = now
        self._link.send(message)

    def end(self, *, send_pending: bool = True) -> None:
        """The run ended: send the report still held (``send_pending``; called just before its
        ``run_result``), or drop it (a run abandoned: its job is gone or cancelled), and drop
        every report after this."""
        if send_pending:
            self._flush()
        elif self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = None
        self._ended = True


# Which job the current task runs, for report_progress(); asyncio copies it into the task.
_current_run: contextvars.ContextVar[RunProgress | None] = \
    contextvars.ContextVar("pyjobq_current_run", default=None)


def report_progress(fraction: float, note: str | None = None) -> None:
    """From inside an executor: tell every job table how far along the job is.

    ``fraction`` is clamped to 0..1. Progress travels in a ``job-update`` and is not stored.
    Reports are coalesced: the first goes at once, then at most one per
    :data:`PROGRESS_EVERY_MS` (100 ms), the latest report each time, and the last one always
    (before the job's end). Outside an executor this raises :class:`PyjobqError`.
    """
    current = _current_run.get()
    if current is None:
        raise PyjobqError("report_progress() was called outside a running job's executor")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise InvalidJobError(f"progress must be a number between 0 and 1, got {fraction!r}")
    current.report(min(1.0, max(0.0, float(fraction))), None if note is None else str(note))


def current_job_id() -> str | None:
    """From inside an executor: the id of the job it runs; None outside one."""
    current = _current_run.get()
    return None if current is None else current.job_id
