"""Every error pyjobq raises derives from :class:`PyjobqError` (defined in
:mod:`pyjobq.core.errors`).

This is their public home: ``from pyjobq.errors import WorkerUnavailable`` as before the
errors moved into the core, which raises most of them.
"""

from .core.errors import (
    WORKER_ADVICE,
    ConfigurationError,
    DatabaseUpgradedError,
    HTTPError,
    IllegalTransition,
    Interrupted,
    InvalidJobError,
    JobError,
    LockStolen,
    NoTransportError,
    OrphanedJobError,
    PyjobqError,
    StorageError,
    StoreInUseError,
    Terminal,
    WorkerUnavailable,
)

__all__ = [
    "PyjobqError",
    "ConfigurationError",
    "InvalidJobError",
    "IllegalTransition",
    "NoTransportError",
    "JobError",
    "HTTPError",
    "Interrupted",
    "Terminal",
    "StoreInUseError",
    "LockStolen",
    "StorageError",
    "DatabaseUpgradedError",
    "OrphanedJobError",
    "WorkerUnavailable",
    "WORKER_ADVICE",
]
