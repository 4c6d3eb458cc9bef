"""Which job the current task runs: :func:`current_job_id` and :func:`report_progress`.

Runs on the page only (the executor side), in the task that runs a job's executor (asyncio
copies the context into it). The :class:`~pyjobq.executor.runner.Runner` sets the run; the
built-in ``fetch`` executor and user code read it.
"""

from __future__ import annotations

import contextvars

from ..core.errors import InvalidJobError, PyjobqError
from ..core.messages import make
from ..core.ports import Link

# Which job the current task runs, for report_progress(); asyncio copies it into the task.
_current_run: contextvars.ContextVar[tuple[Link, str] | None] = \
    contextvars.ContextVar("pyjobq_current_run", default=None)


def report_progress(fraction: float, note: str | None = None) -> None:
    """From inside an executor: tell every job table how far along the job is.

    ``fraction`` is clamped to 0..1. Progress travels in a ``job-update`` and is
    not stored. Outside an executor this raises :class:`PyjobqError`.
    """
    current = _current_run.get()
    if current is None:
        raise PyjobqError("report_progress() was called outside a running job's executor")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise InvalidJobError(f"progress must be a number between 0 and 1, got {fraction!r}")
    link, job_id = current
    link.send(make("progress", job_id=job_id, progress=min(1.0, max(0.0, float(fraction))),
                   note=None if note is None else str(note)))


def current_job_id() -> str | None:
    """From inside an executor: the id of the job it runs; None outside one."""
    current = _current_run.get()
    return None if current is None else current[1]
