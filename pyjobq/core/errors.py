"""Every error pyjobq raises derives from :class:`PyjobqError`.

Errors a caller can cause say what was wrong and what to do about it. The two
marker classes, :class:`Interrupted` and :class:`Terminal`, are raised *by
executors* to tell the queue how an attempt ended (spec: "Yielding").
"""

from __future__ import annotations

from typing import Any

from .codes import Code

__all__ = [
    "PyjobqError", "ConfigurationError", "InvalidJobError", "IllegalTransition",
    "NoTransportError", "JobError", "HTTPError", "Interrupted", "Terminal", "StoreInUseError",
    "LockStolen", "StorageError", "DatabaseUpgradedError", "OrphanedJobError",
    "WorkerUnavailable", "WORKER_ADVICE",
]


class PyjobqError(Exception):
    """Base class of every error raised by pyjobq."""


class ConfigurationError(PyjobqError):
    """``configure`` was called wrongly or too late."""


class InvalidJobError(PyjobqError, ValueError):
    """A job's arguments cannot be queued (wrong type, out of range, not storable)."""


class IllegalTransition(PyjobqError):
    """A status change that the transition table does not allow."""

    def __init__(self, status: str, event: str) -> None:
        super().__init__(
            f"a job in status {status!r} cannot take event {event!r}; "
            "the record was left unchanged"
        )
        self.status = status
        self.event = event


class NoTransportError(PyjobqError):
    """A fetch job was replayed but no transport is configured."""

    code = Code.NO_TRANSPORT

    def __init__(self) -> None:
        super().__init__(
            "no transport is configured, so this fetch job cannot be sent. "
            "Call pyjobq.configure(transport=send) before importing the queue, where "
            "`async def send(method, path, body)` builds the URL and credentials and "
            "returns the unread Response (see docs/guide.md, 'Transport')."
        )


class JobError(PyjobqError):
    """An attempt failed. Carries what the retry policy reads.

    Executors may raise it (or any exception with ``status``/``body``/``code``
    attributes) to join the HTTP-aware retry policy.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str | None = None,
        code: str | None = None,
        terminal: bool = False,
        interrupted: bool = False,
        retry_after_ms: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.code = code
        self.terminal = terminal
        self.interrupted = interrupted
        #: How long the server asked to wait before the next try (a 429's or 503's
        #: ``Retry-After``), in ms; None: it did not say.
        self.retry_after_ms = retry_after_ms


class HTTPError(JobError):
    """A transport answered with a non-ok response."""


class Interrupted(JobError):
    """Raise from an executor that stopped on request (an abort, a stolen lock).

    The attempt is given back and the job's ``done`` stays pending.
    """

    def __init__(self, message: str = "interrupted", **kw: Any) -> None:
        super().__init__(message, interrupted=True, **kw)


class Terminal(JobError):
    """Raise from an executor that knows repeating the work cannot help.

    The job is failed at once, like a 403, 409 or 422.
    """

    def __init__(self, message: str = "terminal failure", **kw: Any) -> None:
        super().__init__(message, terminal=True, **kw)


class StoreInUseError(PyjobqError):
    """An :class:`~pyjobq.Outbox` was given a store that holds the job queue's records.

    The outbox deletes entries it has no handler for, so sharing a database with the job
    queue would delete the queue's jobs: give the outbox a database of its own.
    """


class LockStolen(PyjobqError):
    """A Web Lock was taken from its holder by a request with ``steal: true``.

    Raised by a lock manager's ``request`` (:class:`~pyjobq.core.ports.LockManager`); the
    holder's callback keeps running, so the holder must stop itself.
    """


class StorageError(PyjobqError):
    """IndexedDB refused an operation (quota exceeded, blocked, closed by a newer version).

    Raised by the browser's store; importable on CPython too, to catch it in shared code.
    """


class DatabaseUpgradedError(StorageError):
    """Another tab opened the database at a newer version: this page's code is out of date."""


class OrphanedJobError(PyjobqError):
    """The page picking up a persistent job has no reconstructor for it."""

    code = Code.ORPHANED
    terminal = True

    def __init__(self, reconstructor: str) -> None:
        super().__init__(
            f"orphaned: no reconstructor {reconstructor!r} is registered on this page. "
            f"Register it with pyjobq.configure(reconstructors={{{reconstructor!r}: factory}}) "
            "or pyjobq.register_reconstructor before the queue runs; for a @pyjobq.task (stored "
            "under its name, module:qualname), define the task on this page: import the module "
            "that declares it before the queue runs."
        )
        self.reconstructor = reconstructor


#: What to do when the scheduler worker failed at each stage of its start (``worker_error.stage``).
WORKER_ADVICE = {
    "script": (
        "The browser refused or could not run the worker's script. If the page sends a "
        "Content-Security-Policy, allow `worker-src blob:` — or serve pyjobq's worker script "
        "yourself and pass its URL as pyjobq.configure(worker_url=...) (see the troubleshooting "
        "guide, 'The scheduler worker did not start')."
    ),
    "import": (
        "The worker loads the page's own Pyodide distribution and could not import pyodide.mjs "
        "from it. Check that the URL serves Pyodide to workers (CORS headers on another origin; "
        "`script-src` in a Content-Security-Policy), or name the distribution with "
        "pyjobq.configure(pyodide_url='https://.../full/')."
    ),
    "fetch": (
        "The worker could not fetch the distribution's files (pyodide.asm.mjs, pyodide.asm.wasm, "
        "python_stdlib.zip). A Content-Security-Policy must allow them: the distribution's "
        "origin in `script-src` and `connect-src`."
    ),
    "load": (
        "Pyodide failed to start inside the worker from the distribution's files. Check the "
        "browser console for the distribution's own error (a CSP without 'wasm-unsafe-eval', "
        "files of two Pyodide versions), or name another distribution with "
        "pyjobq.configure(pyodide_url=...)."
    ),
    "install": (
        "pyjobq could not be installed in the worker. By default the page hands the worker the "
        "very pyjobq files it imported; if pyjobq.configure(worker_packages=[...]) is set, check "
        "that each name is in the distribution's lock or each URL serves a wheel."
    ),
    "start": (
        "pyjobq's scheduler raised while starting. This is a bug in pyjobq: please report it "
        "with the message above."
    ),
}


class WorkerUnavailable(PyjobqError):
    """Persistent jobs cannot run on this page: the scheduler worker did not start, or stopped.

    ``code`` is ``worker_not_started`` or ``worker_stopped``; ``worker_message`` is what the
    worker (or the browser) said. Volatile jobs are not affected.
    """

    def __init__(self, message: str, *, code: str = Code.WORKER_NOT_STARTED,
                 worker_message: str = "", stage: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.worker_message = worker_message
        self.stage = stage

    @classmethod
    def not_started(cls, stage: str, worker_message: str) -> "WorkerUnavailable":
        advice = WORKER_ADVICE.get(stage, WORKER_ADVICE["start"])
        return cls(
            f"pyjobq's scheduler worker did not start ({stage}), so persistent jobs cannot run "
            f"on this page. The worker said: {worker_message.strip() or '(nothing)'}. {advice}",
            code=Code.WORKER_NOT_STARTED, worker_message=worker_message, stage=stage,
        )

