"""Messages between the executor side and its scheduler worker, and between tabs.

Every message is a small JSON-like dict with ``v`` (the protocol version) and
``type``. Anything that arrives from a worker or the BroadcastChannel goes
through :func:`parse` first: a foreign, malformed or newer-versioned message is
rejected with :class:`BadMessage` (the receivers log it and carry on), and
nothing read from a message is ever executed.

Every message type is one entry of :data:`SCHEMA`, with who sends it, what it says and the
fields :func:`parse` checks; docs/messages.md is the table generated from it
(``python scripts/vocab_docs.py``), and tests/core/test_messages.py fails when they differ.
A page's executor side and its scheduler worker speak over the worker's ``postMessage``;
other tabs hear only ``job-update``, on the BroadcastChannel.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, NamedTuple

from .errors import PyjobqError

VERSION = 1
#: The run protocol: a scheduler stamps every claim with an identifier (``claim``) that
#: ``run``, ``run_check`` and ``abandon_run`` carry and the page echoes in ``run_started``,
#: ``run_checked`` and ``run_result``; an answer for another claim is ignored, and a page
#: confirms an abandoned run's end with a ``run_result`` for its claim. ``run_result`` also
#: says ``offline`` (was the page offline when the attempt failed).
#: How long an abandoned run (deleted, cancelled, or its scheduler stopped) may take to end,
#: counted by the page from the moment it *handles* ``abandon_run``. The page aborts the run's
#: AbortSignal at once; an executor that heeds it (``signal.heeded``, as the built-in ``fetch``
#: does when its transport takes the signal) is waited for this long before it is cancelled,
#: one that does not is cancelled at once; then the page says the run ended. The scheduler keeps
#: the run's type and run lock busy until that word, with no clock of its own: a clock started
#: when the scheduler *sent* ``abandon_run`` would run out early on a page that was busy or
#: frozen meanwhile, and the type's next job would go on the wire beside the old one. The
#: scheduler lives and dies with its page (a dedicated worker), so the word always comes.
ABANDON_GRACE_MS = 30_000.0
#: How often the store is read again for what news may have missed: a page re-reads the records
#: of jobs it awaits, a scheduler those of the runs it has in flight. News of an end or a delete
#: is lost for good when the tab that stored it crashed (or froze) before broadcasting it.
RECHECK_MS = 30_000.0

# Field types: each field a message type lists is checked; fields not listed are ignored,
# never used.
_STR = (str,)
_OPT_STR = (str, type(None))
_ANY = (object,)

#: Who sends a message type (:attr:`MessageType.sender`).
PAGE = "page → scheduler"
SCHEDULER = "scheduler → page"
NEWS = "scheduler → page, and any tab → other tabs (BroadcastChannel)"
WAITING = "a tab in line for the lease → the others (the lease channel)"
HOLDER = "the lease holder → the tabs in line (the lease channel)"


class MessageType(NamedTuple):
    """One message type: who sends it, what it says, and ``fields``
    (name → allowed Python types)."""

    sender: str
    doc: str
    fields: Mapping[str, tuple[type, ...]]


def _type(sender: str, doc: str, **fields: tuple[type, ...]) -> MessageType:
    return MessageType(sender, doc, fields)


#: Every message type, by its ``type``.
SCHEMA: dict[str, MessageType] = {
    # ------------------------------------------------------------ requests (a page's calls)
    "enqueue": _type(PAGE, "New jobs (``NewJob.to_message``) to store in one transaction; "
                     "each job's ``params_json`` is its params' JSON text, checked when the job "
                     "was made (a job with ``params`` instead is checked whole).",
                     jobs=(list,), request_id=_OPT_STR),
    "query_all": _type(PAGE, "Every record, oldest first; answered in a ``reply``. With "
                       "``status``, ``job_type`` or ``group``, only the records that match "
                       "every one given (``pyjobq.jobs``).",
                       request_id=_STR, status=_OPT_STR, job_type=_OPT_STR, group=_OPT_STR),
    "get_job": _type(PAGE,
                     "One record (or None), for a handle's ``done``; answered in a ``reply``.",
                     job_id=_STR, request_id=_STR),
    "ended_jobs": _type(PAGE, "Which of ``job_ids`` have ended, for the handles a page awaits (its "
                        "recheck, every ``RECHECK_MS``): the record of each finished one, None "
                        "for each with no record; unfinished ones are left out. Answered in a "
                        "``reply``, from one read of them all.",
                        job_ids=(list,), request_id=_STR),
    "delete_job": _type(PAGE, "Delete a record in any status, ending its run anywhere.",
                        job_id=_STR, request_id=_OPT_STR),
    "delete_group": _type(PAGE, "Delete every record of a group.", group=_STR, request_id=_OPT_STR),
    "cancel_job": _type(PAGE, "Cancel an unfinished job, ending its run anywhere.",
                        job_id=_STR, request_id=_OPT_STR),
    "retry_job": _type(PAGE, "Revive a failed or cancelled job with a fresh budget.",
                       job_id=_STR, request_id=_OPT_STR),
    "retry_all": _type(PAGE, "Revive every failed and cancelled job.", request_id=_OPT_STR),
    "cleanup_old": _type(PAGE, "Delete ``done`` records older than 7 days.", request_id=_OPT_STR),
    "suspend_type": _type(PAGE, "Park a (volatile) type's pending jobs and abort its running one; "
                          "answered once that run settled.", job_type=_STR, request_id=_OPT_STR),
    "resume_type": _type(PAGE, "Unpark a suspended type's jobs.", job_type=_STR,
                         request_id=_OPT_STR),
    "schedule": _type(PAGE, "Store a periodic schedule's definition (``ScheduleDefinition."
                      "to_message``; pyjobq/core/periodic.py); answered with it as stored.",
                      schedule=(dict,), request_id=_OPT_STR),
    "unschedule": _type(PAGE, "Delete a periodic schedule by ``name`` (its jobs stay).",
                        name=_STR, request_id=_OPT_STR),
    "schedules": _type(PAGE, "Every stored periodic schedule; answered in a ``reply``.",
                       request_id=_STR),
    "debug_counts": _type(PAGE, "A debugging aid: the worker's live proxy and listener counts "
                          "(pyjobq/browser/proxies.py); answered in a ``reply``.",
                          request_id=_STR, trace=(bool, type(None))),
    "reply": _type(SCHEDULER, "The answer to a request with a ``request_id``: ``ok`` and its "
                   "``value``, or its ``error``.", request_id=_STR, ok=(bool,)),
    # ------------------------------------------------------------ nudges
    "wake": _type(PAGE, "Look for due work now (a page's own timer, a visibility change)."),
    "online": _type(PAGE,
                    "The browser is back online: jobs waiting out an offline failure are due now."),
    # ------------------------------------------------------------ running a job
    "run": _type(SCHEDULER, "Run this claimed job (``claim`` names the claim; the page rebuilds "
                 "the closure from ``reconstructor`` and ``params`` when it has none; "
                 "``timeout_ms`` bounds the attempt, or none).",
                 job_id=_STR, reconstructor=_STR, params=_ANY, job_type=_STR, attempt=(int,),
                 claim=_STR, timeout_ms=(int, float, type(None))),
    "run_started": _type(PAGE, "The page began the run (the handshake; when none came within "
                         "``handshake_timeout_ms`` the scheduler asks with ``run_check``).",
                         job_id=_STR, claim=_STR),
    "run_check": _type(SCHEDULER, "The handshake deadline passed with no ``run_started``: has this "
                       "claim's run begun? The link is FIFO, so the page handles the ``run`` "
                       "first; a busy or frozen page answers late, never wrongly.",
                       job_id=_STR, claim=_STR),
    "run_checked": _type(PAGE, "The answer to ``run_check``: ``started`` says whether the page has "
                         "this claim's run in hand; false fails the job ``handshake_timeout``.",
                         job_id=_STR, claim=_STR, started=(bool,)),
    "run_result": _type(PAGE, "How the run ended: ``ok`` and its ``result``, or its ``error``, "
                        "``status``, ``code``, ``terminal``, ``interrupted``, ``offline``, "
                        "``retry_after_ms``.",
                        job_id=_STR, ok=(bool,), claim=_STR, offline=(bool, type(None))),
    "progress": _type(PAGE, "An executor's ``report_progress``: published, never stored.",
                      job_id=_STR),
    "abandon_run": _type(SCHEDULER, "Stop this run: its job was deleted or cancelled, or the "
                         "scheduler stops; the page confirms its end with a ``run_result``.",
                         job_id=_STR, claim=_STR),
    "abort_run": _type(SCHEDULER, "Abort this run's signal (its type was suspended); its outcome "
                       "counts as interrupted.", job_id=_STR),
    # ------------------------------------------------------------ news
    "job-update": _type(NEWS, "Records as just stored or deleted (``jobs``: one transaction's "
                        "batch).", source=_STR, jobs=(list,)),
    "schedule-update": _type(NEWS, "A periodic schedule ``name`` was stored, changed or deleted: "
                             "the lease holder reads the schedules again.",
                             source=_STR, name=_STR),
    # ------------------------------------------------------------ the worker's life
    "worker_alive": _type(SCHEDULER, "The worker's script runs (no Pyodide yet): it fetches the "
                          "distribution's files now."),
    "worker_progress": _type(SCHEDULER, "Bytes of the distribution's files arrived (at most about "
                             "once a second): the boot is not stalled.", bytes=(int, float)),
    "worker_fetched": _type(SCHEDULER, "The worker holds every file it needs to boot, as bytes: "
                            "its page gets in line for the lease now."),
    "worker_attached": _type(SCHEDULER, "A preloaded worker's first word once its page attaches: "
                             "the ``index`` of the distribution it loads (the page ends it if "
                             "that is not its own).", index=_STR),
    "worker_preinstalled": _type(SCHEDULER, "A preloaded worker installed the distribution's "
                                 "pyjobq and imported its scheduler; ``record``: the digest of its "
                                 "RECORD (the page sends no files of its own when it is the "
                                 "page's).", record=_STR),
    "worker_booting": _type(SCHEDULER,
                            "The worker holds the lease and starts Pyodide from those bytes."),
    "worker_error": _type(SCHEDULER, "The bootstrap failed at ``stage`` (script, import, fetch, "
                          "load, install or start), with the worker's own ``message``; "
                          "``refused``: a Content-Security-Policy refused something it needed.",
                          message=_STR, stage=_OPT_STR, refused=(bool, type(None))),
    "ready": _type(SCHEDULER, "The scheduler runs and answers requests; ``source`` names it.",
                   source=_STR),
    "stopped": _type(SCHEDULER, "The worker stopped for good (another tab upgraded the database), "
                     "with the ``reason`` to show; the page fails its requests with it.",
                     reason=_STR),
    # ----------------------------------------- the lease, held by the page (pyjobq/engine/lease.py)
    "lease_request": _type(SCHEDULER, "Take the processor lease's Web Lock for me."),
    "lease_granted": _type(PAGE, "The page holds the lock: grant number ``epoch``.", epoch=(int,)),
    "lease_revoked": _type(PAGE, "The page let grant ``epoch`` go (``freeze`` or ``pagehide``).",
                           epoch=(int,)),
    "lease_released": _type(SCHEDULER,
                            "Done with grant ``epoch``, or acknowledging its revocation.",
                            epoch=(int,)),
    "lease_steal": _type(PAGE, "A worker host's page found the holder silent while this worker "
                         "waits in line: take the lock from it (``steal``; pyjobq/engine/lease.py, "
                         "LeaseWatch)."),
    # ------------------------------------------------------ the holder's health (the lease channel)
    "lease_ping": _type(WAITING, "A tab in line for the lease asks whether the holder is alive "
                        "(every ``PING_MS``).", source=_STR),
    "lease_pong": _type(HOLDER, "The holder answers a ping, from the thread that holds the lock "
                        "(a frozen one cannot).", source=_STR),
    "lease_stolen": _type(WAITING, "This tab takes the lease from a holder silent for "
                          "``SILENT_PINGS`` pings: the others count the new holder's silence from "
                          "zero.", source=_STR),
}


def updated_jobs(msg: dict[str, Any]) -> list[dict[str, Any]]:
    """The records a parsed ``job-update`` carries: the objects in its batch ``jobs``."""
    return [job for job in msg["jobs"] if isinstance(job, dict)]


def job_update_prefix(source: str) -> str:
    """How the JSON text of every ``job-update`` that ``source`` sends begins (:func:`make`'s key
    order): a receiver drops its own echoes by this, before parsing them."""
    return json.dumps({"v": VERSION, "type": "job-update", "source": source})[:-1] + ", "


class BadMessage(PyjobqError):
    """A message that is not one of pyjobq's (or not of this version)."""


def make(type_: str, **fields: Any) -> dict[str, Any]:
    """Build a message. The caller passes only JSON-like values."""
    if type_ not in SCHEMA:
        raise ValueError(f"unknown message type {type_!r}")
    return {"v": VERSION, "type": type_, **fields}


def parse(data: Any) -> dict[str, Any]:
    """Validate a received message and return it.

    Raises:
        BadMessage: not a dict, unknown type, other version, or a field of the wrong type.
    """
    if not isinstance(data, dict):
        raise BadMessage(f"expected an object, got {type(data).__name__}")
    if data.get("v") != VERSION:
        raise BadMessage(f"protocol version {data.get('v')!r}, this page speaks {VERSION}")
    type_ = data.get("type")
    kind = SCHEMA.get(type_) if isinstance(type_, str) else None
    if kind is None:
        raise BadMessage(f"unknown message type {type_!r}")
    for name, kinds in kind.fields.items():
        value = data.get(name)
        if kinds is _ANY:
            continue
        if isinstance(value, bool) and bool not in kinds:
            raise BadMessage(f"{type_}.{name} must be {kinds[0].__name__}, got {value!r}")
        if not isinstance(value, kinds):
            raise BadMessage(
                f"{type_}.{name} must be {kinds[0].__name__}, got {type(value).__name__}")
    return data
