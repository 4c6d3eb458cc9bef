"""pyjobq: a background job queue for Python in the browser.

``import pyjobq`` does not read the queue's names: :func:`configure` first,
then use the queue (``pyjobq.enqueue_fetch`` and the rest load
:mod:`pyjobq.queue` on first access).
"""

from __future__ import annotations

import logging
from typing import Any

from .abort import AbortSignal
from .config import configure
from .core.records import Outcome
from .errors import (
    ConfigurationError,
    HTTPError,
    IllegalTransition,
    Interrupted,
    InvalidJobError,
    JobError,
    NoTransportError,
    OrphanedJobError,
    PyjobqError,
    StoreInUseError,
    Terminal,
    WorkerUnavailable,
)

__version__ = "0.1.0"

# Silent by default: the host decides where pyjobq's log records go.
logging.getLogger("pyjobq").addHandler(logging.NullHandler())

_QUEUE_NAMES = frozenset({
    "enqueue", "suspend_type", "resume_type", "report_progress", "enqueue_fetch", "enqueue_persistent", "register_reconstructor", "set_transport", "job",
    "query_all", "delete_job", "delete_group", "cancel_job", "retry_job", "retry_all",
    "cleanup_old", "on_update", "updates", "wake", "stop", "Job", "JobUpdate",
})

_OUTBOX_NAMES = frozenset({"Outbox", "OutboxEntry", "OutboxHandler", "Prune"})

__all__ = sorted({
    "AbortSignal", "ConfigurationError", "HTTPError", "IllegalTransition", "Interrupted",
    "InvalidJobError", "JobError", "NoTransportError", "OrphanedJobError", "Outcome", "StoreInUseError",
    "PyjobqError", "Terminal", "WorkerUnavailable", "configure", *_QUEUE_NAMES, *_OUTBOX_NAMES,
})


def __getattr__(name: str) -> Any:
    # PEP 562: the queue is imported on first use, after the page had its chance to configure().
    if name in _QUEUE_NAMES:
        from . import queue

        return getattr(queue, name)
    if name in _OUTBOX_NAMES:
        # The outbox reads no configured names: importing it leaves configure() open.
        from . import outbox

        return getattr(outbox, name)
    raise AttributeError(f"module 'pyjobq' has no attribute {name!r}")
