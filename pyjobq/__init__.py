"""pyjobq: a background job queue for Python in the browser.

``import pyjobq`` does not read the queue's names: :func:`configure` first,
then use the queue. :func:`task` (``@pyjobq.task``) reads none either: tasks may be
declared before the queue starts. The queue's functions (``pyjobq.enqueue_fetch`` and the
rest) load :mod:`pyjobq.queue` on first access — importing it reads the
configured names for good and, in a browser, starts the queue — and the outbox's
classes load :mod:`pyjobq.outbox`, which leaves :func:`configure` open. Type
checkers see every name statically (the lazy loading is hidden from them).

Also public: :mod:`pyjobq.ui` (``<bg-jobs>`` and the notebook table),
:mod:`pyjobq.testing` (a Response for CPython transports), :mod:`pyjobq.services`,
and, for your own store or tests, :mod:`pyjobq.core.ports` and :mod:`pyjobq.memory`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .abort import AbortSignal
from .config import configure
from .core.codes import Code
from .core.errors import (
    ConfigurationError,
    HTTPError,
    IllegalTransition,
    Interrupted,
    InvalidJobError,
    JobError,
    NoTransportError,
    OrphanedJobError,
    PyjobqError,
    StorageError,
    StoreInUseError,
    Terminal,
    WorkerUnavailable,
)
from .core.outcome import JobFailed, Outcome
from .core.status import Status
from .handle import Completion, Job, JobUpdate, StorageState
from .tasks import Task, task
from .tasks.periodic import Periodic, periodic

if TYPE_CHECKING:
    # What the lazy loading below hands out, for mypy and pyright; the same objects.
    from .executor import current_job_id, report_progress
    from .outbox import Outbox, OutboxEntry, OutboxHandler, Prune
    from .queue import (
        cancel_job,
        cleanup_old,
        delete_group,
        delete_job,
        enqueue,
        enqueue_fetch,
        enqueue_persistent,
        get_job,
        job,
        jobs,
        on_update,
        query_all,
        register_reconstructor,
        resume_type,
        retry_all,
        retry_job,
        schedules,
        set_transport,
        stop,
        storage,
        suspend_type,
        unschedule,
        updates,
        wake,
    )

__version__ = "0.1.0"

# Silent by default: the host decides where pyjobq's log records go.
logging.getLogger("pyjobq").addHandler(logging.NullHandler())

_QUEUE_NAMES = frozenset({
    "enqueue", "suspend_type", "resume_type", "enqueue_fetch", "enqueue_persistent",
    "register_reconstructor", "set_transport", "job", "get_job", "jobs", "query_all", "delete_job",
    "delete_group",
    "cancel_job", "retry_job", "retry_all", "cleanup_old", "on_update", "updates", "wake", "stop",
    "unschedule", "schedules", "storage",
})

# Called from inside an executor; reading them starts nothing (an outbox's handler may call them).
_EXECUTOR_NAMES = frozenset({"current_job_id", "report_progress"})

_OUTBOX_NAMES = frozenset({"Outbox", "OutboxEntry", "OutboxHandler", "Prune"})

# A literal list: type checkers read it to know what the package re-exports.
__all__ = [
    "AbortSignal", "Code", "Completion", "ConfigurationError", "HTTPError", "IllegalTransition",
    "Interrupted", "InvalidJobError", "Job", "JobError", "JobFailed", "JobUpdate",
    "NoTransportError", "OrphanedJobError", "Outbox", "OutboxEntry", "OutboxHandler", "Outcome",
    "Periodic", "Prune", "PyjobqError", "Status", "StorageError", "StorageState",
    "StoreInUseError", "Task",
    "Terminal", "WorkerUnavailable", "cancel_job", "cleanup_old", "configure", "current_job_id",
    "delete_group", "delete_job", "enqueue", "enqueue_fetch", "enqueue_persistent", "get_job",
    "job", "jobs", "on_update", "periodic", "query_all", "register_reconstructor",
    "report_progress", "resume_type", "retry_all", "retry_job", "schedules", "set_transport",
    "stop", "storage", "suspend_type", "task", "unschedule", "updates", "wake",
]

if not TYPE_CHECKING:
    # Hidden from type checkers: a module __getattr__ would make every misspelt name pass as Any.

    def __getattr__(name: str):
        # PEP 562: the queue is imported on first use, after the page had its chance to configure().
        if name in _QUEUE_NAMES:
            from . import queue as module
        elif name in _EXECUTOR_NAMES:
            from . import executor as module
        elif name in _OUTBOX_NAMES:
            # The outbox reads no configured names: importing it leaves configure() open.
            from . import outbox as module
        else:
            raise AttributeError(f"module 'pyjobq' has no attribute {name!r}")
        value = getattr(module, name)
        globals()[name] = value  # loaded: later reads (and pdoc, which reads __dict__) find it
        return value

    def __dir__():
        return sorted(set(globals()) | set(__all__))
