"""The error codes pyjobq itself sets: one table, :class:`Code`.

A job's ``code`` (on its :class:`~pyjobq.Outcome`, its record, a ``job-update``) names the
specific error, and is what to explain a failure by: several errors with different remedies
can share one HTTP status (spec: "code identifies the specific error"). Every code pyjobq
sets is a member of :class:`Code`, with what it means and what a user does about it. Any
other code is the server's own (a JSON body's ``code`` or ``error.code``) or one an executor
raised with.

Pure data that imports nothing, in the core because the core reads it (the retry policy sets
``offline`` and ``page_gone``) and so do the errors that carry a code. ``pyjobq.Code``,
``pyjobq.codes.Code`` and ``pyjobq.core.Code`` are this class.

docs/troubleshooting.md's table of codes is generated from this one
(``python scripts/vocab_docs.py``); tests/core/test_codes.py fails when the two differ, or
when a ``code="..."`` literal appears anywhere else in pyjobq.
"""

from __future__ import annotations

import enum


class Code(str, enum.Enum):
    """An error code pyjobq sets, as ``pyjobq.Code``: a ``str`` enum, so ``outcome.code ==
    "deleted"`` holds too, and JSON, IndexedDB and messages carry the plain string.

    Each member has ``meaning`` (what happened) and ``remedy`` (what to do about it), the
    rows of docs/troubleshooting.md's table.
    """

    meaning: str
    remedy: str

    def __new__(cls, value: str, meaning: str, remedy: str) -> "Code":
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        member.remedy = remedy
        return member

    def __str__(self) -> str:
        return str.__str__(self)

    # ------------------------------------------------------------ a job that could not run
    ORPHANED = (
        "orphaned",
        "The page that picked the job up has no reconstructor of its kind; the error names it.",
        "Register it with `configure(reconstructors=...)` on every page that may process jobs, "
        "then `retry_job(id)`.")
    HANDSHAKE_TIMEOUT = (
        "handshake_timeout",
        "No `run_started` came within `handshake_timeout_ms`, and the page, asked then, said it "
        "handled `run` without beginning it. A busy or frozen page is not this: it is waited for.",
        "Its executor side did not take the run (its handler for the job's kind is missing); "
        "`retry_job(id)` once it does.")
    TIMEOUT = (
        "timeout",
        "The attempt ran longer than the job's timeout (`timeout_s=`, `@pyjobq.task(timeout=)`, "
        "`configure(timeout_s=)`): its signal was aborted and, unless the executor heeds it, "
        "its task cancelled (one that heeds it, after 30 s). It counts as an attempt and is "
        "retried with backoff, up to `max_attempts`.",
        "Raise the timeout if the work needs longer, or make the transport honour the signal "
        "so a slow server's request ends when the attempt does.")
    RECONSTRUCTOR_FAILED = (
        "reconstructor_failed",
        "The factory raised while rebuilding the job.",
        "Fix the factory; `retry_job(id)`.")
    RECONSTRUCTOR_RETURNED_NO_EXECUTOR = (
        "reconstructor_returned_no_executor",
        "The factory rebuilding the job returned something that is not callable (None, say: a "
        "factory with no `return`) instead of its executor; the job failed at once, the value "
        "named in `error`.",
        "Have the factory return the executor, an `async def run(signal)`; then "
        "`retry_job(id)`.")
    NO_TRANSPORT = (
        "no_transport",
        "A fetch job replayed with no transport.",
        "`configure(transport=send)` or `set_transport(send)`; the job retries on its own.")
    BAD_TRANSPORT_RESULT = (
        "bad_transport_result",
        "The transport returned something other than a Response.",
        "Return the unread response of your fetch call; don't parse it.")
    TRANSPORT_NOT_ASYNC = (
        "transport_not_async",
        "The transport returned something that is not awaitable when called (a plain `def` "
        "returning its response): it is not an `async def`; the fetch job failed at once, the "
        "transport named in `error`.",
        "Define the transport with `async def` (or have it return an awaitable of the unread "
        "response); then `retry_job(id)`.")
    EXECUTOR_NOT_ASYNC = (
        "executor_not_async",
        "The executor (a volatile job's function, or what its reconstructor built) returned "
        "something that is not awaitable when called: it is not an `async def`; the job failed "
        "at once.",
        "Define the executor with `async def` (or have it return an awaitable); then "
        "`retry_job(id)`.")
    # ------------------------------------------------------------ a result that cannot be kept
    RESULT_NOT_CLONEABLE = (
        "result_not_cloneable",
        "The executor returned something that is not JSON-like; the job failed at once.",
        "Return plain data (dict, list, str, int, float, bool, None).")
    RESULT_NOT_STORABLE = (
        "result_not_storable",
        "The scheduler could not store the executor's result (not JSON-like, too deep, or "
        "refused by the store); the job failed at once.",
        "Return smaller, plain data; check the storage quota if `error` names the store.")
    # ------------------------------------------------------------ the budget
    ATTEMPTS_EXHAUSTED = (
        "attempts_exhausted",
        "The job came up to run with no attempts left (its stored record had already spent "
        "`max_attempts`: written so by other code or an older pyjobq); it failed unrun.",
        "`retry_job(id)` gives a fresh budget.")
    PAGE_GONE = (
        "page_gone",
        "The page running the job's last allowed attempt went away mid-run (closed, crashed or "
        "discarded), so that attempt is spent and none is left; `http_status` is empty, as no "
        "answer was stored.",
        "If it happens every time, the job itself may crash its page (memory, say): look there; "
        "`retry_job(id)` gives a fresh budget.")
    UNAUTHORIZED = (
        "unauthorized",
        "Every attempt for 24 hours was answered 401 (each retried a minute later, its attempt "
        "given back): the token was never renewed.",
        "Renew the credentials the transport sends, then `retry_job(id)` (or `retry_all()`).")
    INTERRUPTED_UNASKED = (
        "interrupted_unasked",
        "The executor raised `Interrupted` while its signal was not aborted: nothing asked it to "
        "stop, so the attempt counts, like any failure, and is retried with backoff up to "
        "`max_attempts`.",
        "Raise `Interrupted` only once the signal is aborted (`signal.raise_if_aborted()`); "
        "raise another error for a failure.")
    OFFLINE = (
        "offline",
        "The last attempt failed with no network below; the job waits (its attempt given back) "
        "and runs at once when the browser is back online.",
        "Nothing: it retries on its own.")
    # ------------------------------------------------------------ the caller's own doing
    CANCELLED = (
        "cancelled",
        "`cancel_job(id)` stopped the job; its record is kept.",
        "`retry_job(id)` runs it again; `delete_job(id)` removes it.")
    DELETED = (
        "deleted",
        "The job was deleted while someone awaited it; `done` resolves cancelled (\"deleted\" "
        "is not a record status, so it rides on `code`).",
        "—")
    REPLACED = (
        "replaced",
        "A newer job with the same `key` was enqueued while this one waited (pending, delayed, "
        "in retry backoff or paused); its record was deleted in the transaction that stored the "
        "newer one, and its `done` resolves cancelled (\"replaced\" is not a record status, so "
        "it rides on `code`).",
        "Nothing: the newer job (the last one enqueued with the key) carries the work. Await "
        "that one's handle.")
    NOT_FOUND = (
        "not_found",
        "`job(id)` was given an id with no record (never stored, or deleted since).",
        "Check the id; a finished job's record is kept until deleted (`done` ones for 7 days).")
    NOT_STORED = (
        "not_stored",
        "This page could not store the job (`enqueue` failed); the job never existed.",
        "See `await job.stored`'s error; enqueue it again.")
    # ------------------------------------------------------------ the scheduler worker
    WORKER_NOT_STARTED = (
        "worker_not_started",
        "The scheduler worker did not start, so persistent jobs cannot run on this page "
        "(`WorkerUnavailable.stage` says where it failed).",
        "See 'The scheduler worker did not start' above; volatile jobs are not affected.")
    WORKER_STOPPED = (
        "worker_stopped",
        "The scheduler worker stopped for good (another tab upgraded the database).",
        "Reload the page.")
    # ------------------------------------------------------------ runs given back, unspent
    LEASE_REVOKED = (
        "lease_revoked",
        "The page let the processor lease go (frozen or hidden) before the run began; the "
        "attempt was given back.",
        "Nothing: whoever holds the lease now runs it.")
    ALREADY_RUNNING = (
        "already_running",
        "The page was still running an earlier claim of the job; the second was given back.",
        "Nothing: the first run settles it.")
    ABANDONED = (
        "abandoned",
        "A run the scheduler gave up on (the job was deleted or cancelled, or its scheduler "
        "stopped) ended; nothing of it is stored.",
        "Nothing.")
    # ------------------------------------------------------------ the store
    MALFORMED_RECORD = (
        "malformed_record",
        "A stored value was not a job record; it was failed so the queue runs on, its value kept "
        "under `_params`.",
        "Inspect `_params` (other code wrote it?); `delete_job(id)`.")


#: The ``error`` of a job a newer job of its key replaced (its ``code`` is :attr:`Code.REPLACED`).
REPLACED_ERROR = "replaced by a newer job of its key"
