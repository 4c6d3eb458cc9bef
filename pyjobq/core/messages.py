"""Messages between the executor side and its scheduler worker, and between tabs.

Every message is a small JSON-like dict with ``v`` (the protocol version) and
``type``. Anything that arrives from a worker or the BroadcastChannel goes
through :func:`parse` first: a foreign, malformed or newer-versioned message is
rejected with :class:`BadMessage` (the receivers log it and carry on), and
nothing read from a message is ever executed.

Executor → scheduler: ``enqueue``, ``wake``, ``run_started``, ``run_result``,
``delete_job``, ``delete_group``, ``cancel_job``, ``retry_job``, ``retry_all``,
``query_all``, ``get_job``, ``cleanup_old``, ``debug_counts`` (a debugging aid: the
worker's live proxy and listener counts, see :mod:`pyjobq.browser.proxies`).
Scheduler → executor: ``worker_alive`` (the worker's script runs; it may now wait for the lease
without Pyodide), ``worker_booting`` (it holds the lease and loads Pyodide), ``worker_error`` (the
bootstrap failed at ``stage``: script, import, load, install or start, with the worker's own
``message``), ``ready``, ``run``, ``abandon_run``, ``reply``, ``job-update``,
``stopped`` (the worker stopped for good — another tab upgraded the database — with the
reason to show; the executor side fails its requests with it).
The processor lease, when the page holds it for its worker (see :mod:`pyjobq.lease`):
scheduler → executor ``lease_request`` (take the lock for me) and ``lease_released``
(done with grant ``epoch``, or acknowledging its revocation); executor → scheduler
``lease_granted`` (the page holds the lock, grant number ``epoch``) and ``lease_revoked``
(the page let it go on ``freeze``/``pagehide``).
Across tabs (BroadcastChannel): ``job-update``.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import PyjobqError

VERSION = 1
#: The run protocol's revision, within version 1. Revision 2: a scheduler stamps every claim
#: with an identifier (``claim``) that ``run`` and ``abandon_run`` carry and the page echoes in
#: ``run_started`` and ``run_result``; an answer for another claim is ignored, and a page
#: confirms an abandoned run's end with a ``run_result`` for its claim. ``run_result`` also
#: says ``offline`` (was the page offline when the attempt failed). Both sides stay compatible
#: with revision 1 in either direction: a ``run`` with no claim is answered with none, and an
#: answer with no claim is taken for the job's current claim, as revision 1 did.
RUN_REVISION = 2
#: How long an abandoned run (deleted, cancelled, or its scheduler stopped) may take to end.
#: The page aborts the run's AbortSignal at once; an executor that heeds it
#: (``signal.heeded``, as the built-in ``fetch`` does when its transport takes the signal) is
#: waited for this long before it is cancelled, one that does not is cancelled at once. The
#: scheduler keeps the run's type and run lock busy until the page says the run ended, or
#: for this grace plus the handshake at most.
ABANDON_GRACE_MS = 30_000.0
#: How often the store is read again for what news may have missed: a page re-reads the records
#: of jobs it awaits, a scheduler those of the runs it has in flight. News of an end or a delete
#: is lost for good when the tab that stored it crashed (or froze) before broadcasting it.
RECHECK_MS = 30_000.0

# type -> {field: allowed python types}. Fields not listed are ignored, never used.
_STR = (str,)
_OPT_STR = (str, type(None))
_ANY = (object,)
_SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "enqueue": {"jobs": (list,), "request_id": _OPT_STR},
    "wake": {},
    "online": {},
    "run": {"job_id": _STR, "reconstructor": _STR, "params": _ANY, "job_type": _STR, "attempt": (int,),
            "claim": _OPT_STR},
    "run_started": {"job_id": _STR, "claim": _OPT_STR},
    "run_result": {"job_id": _STR, "ok": (bool,), "claim": _OPT_STR, "offline": (bool, type(None))},
    "abandon_run": {"job_id": _STR, "claim": _OPT_STR},
    "delete_job": {"job_id": _STR, "request_id": _OPT_STR},
    "delete_group": {"group": _STR, "request_id": _OPT_STR},
    "cancel_job": {"job_id": _STR, "request_id": _OPT_STR},
    "retry_job": {"job_id": _STR, "request_id": _OPT_STR},
    "retry_all": {"request_id": _OPT_STR},
    "query_all": {"request_id": _STR},
    "get_job": {"job_id": _STR, "request_id": _STR},
    "cleanup_old": {"request_id": _OPT_STR},
    "reply": {"request_id": _STR, "ok": (bool,)},
    "ready": {"source": _STR},
    # ``jobs``: a batch (one transaction's records), ``job`` its first for older receivers.
    "job-update": {"job": (dict,), "source": _STR, "jobs": (list, type(None))},
    "progress": {"job_id": _STR},
    "worker_error": {"message": _STR, "stage": _OPT_STR},
    "worker_alive": {},
    "worker_booting": {},
    "abort_run": {"job_id": _STR},
    "suspend_type": {"job_type": _STR, "request_id": _OPT_STR},
    "resume_type": {"job_type": _STR, "request_id": _OPT_STR},
    "lease_request": {},
    "lease_granted": {"epoch": (int,)},
    "lease_revoked": {"epoch": (int,)},
    "lease_released": {"epoch": (int,)},
    "stopped": {"reason": _STR},
    "debug_counts": {"request_id": _STR, "trace": (bool, type(None))},
}


def updated_jobs(msg: dict[str, Any]) -> list[dict[str, Any]]:
    """The records a parsed ``job-update`` carries: its batch ``jobs`` (the objects in it), or
    its one ``job``."""
    batch = msg.get("jobs")
    if isinstance(batch, list):
        return [job for job in batch if isinstance(job, dict)]
    return [msg["job"]]


def job_update_prefix(source: str) -> str:
    """How the JSON text of every ``job-update`` that ``source`` sends begins (:func:`make`'s key
    order): a receiver drops its own echoes by this, before parsing them."""
    return json.dumps({"v": VERSION, "type": "job-update", "source": source})[:-1] + ", "


class BadMessage(PyjobqError):
    """A message that is not one of pyjobq's (or not of this version)."""


def make(type_: str, **fields: Any) -> dict[str, Any]:
    """Build a message. The caller passes only JSON-like values."""
    if type_ not in _SCHEMA:
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
    schema = _SCHEMA.get(type_) if isinstance(type_, str) else None
    if schema is None:
        raise BadMessage(f"unknown message type {type_!r}")
    for name, kinds in schema.items():
        value = data.get(name)
        if kinds is _ANY:
            continue
        if isinstance(value, bool) and bool not in kinds:
            raise BadMessage(f"{type_}.{name} must be {kinds[0].__name__}, got {value!r}")
        if not isinstance(value, kinds):
            raise BadMessage(f"{type_}.{name} must be {kinds[0].__name__}, got {type(value).__name__}")
    return data
