"""The jobs table: the columns and status looks that ``<bg-jobs>`` and the notebook table share.

Theory of operation
-------------------
Two renderers draw one table (spec: "Inspecting jobs"): :func:`pyjobq.ui.jobs_html`, escaped
HTML for a notebook or a kernel without a DOM, and the ``<bg-jobs>`` element, live in a page.
Two copies of a status list, a heading or a wording drift apart, so both draw what this module
says, and nothing else:

- :data:`COLUMNS`, in order, each with its key and heading;
- :data:`STATUS_LOOKS`, in the order the caption counts them, each with its label and colours
  (light and dark); a status the table does not know is drawn as :data:`FALLBACK`;
- :func:`cells`: for one record, the value of every column — the name a row is known by, the
  progress text, "in 2 min 5 s", "3 / 5", the error's code, HTTP status and message.

The notebook renderer imports them. The element receives them from Python: the bridge hands it
:func:`definition` (JSON) when it connects and answers its calls for the cells of the rows it
draws, so the JavaScript holds no status, heading or wording of its own — only what the DOM
needs done: build the rows, patch them in place, keep focus, tick once a second.

Both tables believe the store, not news (docs/decisions.md, "The jobs tables believe the store,
not news"): :func:`confirm_first` says which news waits for a read, :func:`read_again` reads,
and :func:`read_is_news` / :func:`read_for_table` say what of the answer to draw.

Pure but for the reads, which go through the queue it is given (:class:`Reads`): the clock is
``now``, an argument (the element passes ``Date.now()``, a notebook nothing: times are then
absolute). Records are plain mappings as ``query_all`` lists them or as a
``job-update`` carries them; any field may be missing or of the wrong type (a record written by
other code), and a cell then reads as empty rather than raising.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Collection, Mapping, Protocol, TypedDict

from .messages import RECHECK_MS as _NEWS_RECHECK_MS
from .status import TERMINAL, TRANSITIONS, Event, Status

TITLE = "Background jobs"
"""What both tables are called (the element's title, the notebook table's caption)."""

EMPTY_TABLE = "No jobs yet."
"""The one row of a table with no jobs."""

NO_VALUE = "—"
"""What a cell with nothing to say shows (no retry due, no error)."""

VOLATILE_SCOPE = "this tab"
"""Beside a volatile job's name."""

VOLATILE_NOTE = "A volatile job: it lives in this tab only"
"""What :data:`VOLATILE_SCOPE` means, for a reader who asks (the element's tooltip)."""


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: its key in :func:`cells` and its heading."""

    key: str
    heading: str
    #: Buttons that ask the queue: only a live page (``<bg-jobs>``) has them.
    interactive: bool = False


COLUMNS: tuple[Column, ...] = (
    Column("job", "Job"),
    Column("type", "Type"),
    Column("status", "Status"),
    Column("attempts", "Attempts"),
    Column("retry", "Next retry"),
    Column("error", "Last error"),
    Column("actions", "Actions", interactive=True),
)
"""Every column, in order; the notebook table draws those that are not ``interactive``."""


@dataclasses.dataclass(frozen=True)
class Colours:
    """A status pill's CSS colours."""

    text: str
    background: str
    border: str


@dataclasses.dataclass(frozen=True)
class StatusLook:
    """How one status is drawn: its label and its colours on a light and a dark page."""

    status: Status
    label: str
    light: Colours
    dark: Colours
    #: The pill's dot pulses where the page can animate it: work is under way.
    pulse: bool = False


STATUS_LOOKS: tuple[StatusLook, ...] = (
    StatusLook(Status.PENDING, "pending",
               Colours("#7d4e00", "#fff3c4", "#f2d675"), Colours("#e3b341", "#3b2e0a", "#6c5314")),
    StatusLook(Status.RUNNING, "running",
               Colours("#0550ae", "#ddf4ff", "#9ecbff"), Colours("#79c0ff", "#0c2d6b", "#1f6feb"),
               pulse=True),
    StatusLook(Status.PAUSED, "paused",
               Colours("#6639ba", "#f3e8ff", "#d2b6f5"), Colours("#d2a8ff", "#2e1a52", "#6e40c9")),
    StatusLook(Status.DONE, "done",
               Colours("#116329", "#dafbe1", "#8ddb9e"), Colours("#56d364", "#0f2e1a", "#238636")),
    StatusLook(Status.FAILED, "failed",
               Colours("#a40e26", "#ffebe9", "#ffaba8"), Colours("#ff7b72", "#3d1114", "#da3633")),
    StatusLook(Status.CANCELLED, "cancelled",
               Colours("#57606a", "#eef1f4", "#d0d7de"), Colours("#9198a1", "#21262d", "#3d444d")),
)
"""Every status once, in the order the caption counts them."""

LOOKS: dict[str, StatusLook] = {str(look.status): look for look in STATUS_LOOKS}
""":data:`STATUS_LOOKS` by status."""

FALLBACK = Status.CANCELLED
"""A status the table does not know (a record written by other code) is drawn like this one."""

RETRYABLE = frozenset(status for status, event in TRANSITIONS if event is Event.REVIVE)
"""The statuses a row offers "Retry" for: those ``retry_job`` / ``retry_all`` revive."""

#: How often (ms) ``<bg-jobs>`` reads its unfinished rows' records again while it shows one:
#: news of an end or a delete is lost for good when the tab that stored it crashed or froze
#: before broadcasting it (:data:`pyjobq.core.messages.RECHECK_MS`), and the store is the truth.
RECHECK_MS = _NEWS_RECHECK_MS


#: The most jobs a table holds on news alone, waiting for the store's word: news of an end, of
#: a deletion, of a finished job running again, or of a job the table did not know. Any
#: same-origin script can post news under any id, so beyond this the oldest waiting are let go
#: (with a row known only from that news), and the notebook table says it is no longer the
#: whole store until it is read again.
MAX_UNCONFIRMED = 1000


class JobCell(TypedDict):
    """The ``job`` column: the name a row is known by, the id, and its scope."""

    name: str
    id: str
    short_id: str
    scope: str  # VOLATILE_SCOPE, or "" for a persistent job


class StatusCell(TypedDict):
    """The ``status`` column: a pill drawn as ``look``, and a running job's progress."""

    look: str  # a status of STATUS_LOOKS: the record's own, else FALLBACK
    label: str
    progress: float | None  # 0 to 1
    progress_text: str


class ErrorCell(TypedDict):
    """The ``error`` column: each part is ``""`` when the record has none."""

    code: str
    http: str
    message: str


class ActionsCell(TypedDict):
    """The ``actions`` column: whether the row offers "Retry" (it always offers "Delete")."""

    retry: bool


class Cells(TypedDict):
    """Every column's value for one record (keys: :data:`COLUMNS`' keys), and ``ticks``."""

    job: JobCell
    type: str
    status: StatusCell
    attempts: str
    retry: str  # "" when no retry is due
    error: ErrorCell | None  # None: nothing went wrong (or the job is done)
    actions: ActionsCell
    ticks: bool  # the retry cell changes with ``now`` alone: redraw it as time passes


#: The fields a table keeps of a record or a ``job-update``, by kind (:func:`row`).
ROW_TEXTS = ("id", "type", "status", "group", "label", "error", "code", "yield_lock",
             "progress_note", "key")
ROW_NUMBERS = ("created_at", "updated_at", "next_retry_at", "attempts", "max_attempts",
               "http_status", "progress")
ROW_FLAGS = ("volatile", "deleted", "progress_only", "result_truncated")


def row(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a table keeps of a record or a ``job-update``: the fields it reads, each of its kind
    (:data:`ROW_TEXTS` a str, :data:`ROW_NUMBERS` a finite number that is not a bool,
    :data:`ROW_FLAGS` a bool), and nothing else.

    A field of another kind is left out, as if missing: a record written by other code, or news
    any same-origin script posted, draws with that cell empty and sorts as undated, and never
    stops the table (``created_at="2024-01-01"`` beside numbers would make sorting raise).

    Returns:
        The row; None when ``record`` is not a mapping or has no str ``id`` (no row at all).
    """
    if not isinstance(record, Mapping) or not isinstance(record.get("id"), str):
        return None
    kept: dict[str, Any] = {}
    for name in ROW_TEXTS:
        value = record.get(name)
        if isinstance(value, str):
            kept[name] = value
    for name in ROW_NUMBERS:
        number = _number(record.get(name))
        if number is not None:
            kept[name] = record[name]
    for name in ROW_FLAGS:
        if isinstance(record.get(name), bool):
            kept[name] = record[name]
    return kept


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def job_name(record: Mapping[str, Any]) -> str:
    """The name a row is known by: its label, else its type and the first 8 characters of its id."""
    label = record.get("label")
    if isinstance(label, str) and label:
        return label
    return f"{record.get('type') or 'job'} {_text(record.get('id'))[:8]}"


def countdown(at_ms: float, now: float) -> str:
    """How long until ``at_ms``, read at ``now`` (both ms since the epoch): "in 5 s", "due now".

    Seconds up to 90 s, then minutes and seconds up to 90 min, then whole hours.
    """
    seconds = math.ceil((at_ms - now) / 1000)
    if seconds <= 0:
        return "due now"
    if seconds < 90:
        return f"in {seconds} s"
    minutes = seconds // 60
    if minutes < 90:
        return f"in {minutes} min {seconds % 60} s"
    return f"in {(minutes + 30) // 60} h"


def retry_text(record: Mapping[str, Any], now: float | None) -> str:
    """The ``retry`` column: when a pending job runs next, or what a paused one waits for.

    Args:
        record: a job record.
        now: ms since the epoch; ``None`` gives an absolute UTC time instead of a countdown.

    Returns:
        ``""`` for every other status, and for a pending job with no (finite) ``next_retry_at``.
    """
    status = _text(record.get("status"))
    if status == Status.PAUSED:
        lock = record.get("yield_lock")
        return f"when {lock} is free" if lock else "type suspended"
    at = _number(record.get("next_retry_at"))
    if status != Status.PENDING or at is None:
        return ""
    if now is not None:
        return countdown(at, now)
    try:
        return datetime.fromtimestamp(at / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):  # a year no calendar reaches
        return ""


def _status_cell(record: Mapping[str, Any]) -> StatusCell:
    status = _text(record.get("status"))
    look = LOOKS.get(status)
    progress = _number(record.get("progress"))
    cell: StatusCell = {"look": str(look.status if look else FALLBACK),
                        "label": look.label if look else status, "progress": None,
                        "progress_text": ""}
    if status == Status.RUNNING and progress is not None:
        p = min(1.0, max(0.0, progress))
        note = record.get("progress_note")
        cell["progress"] = p
        cell["progress_text"] = f"{round(p * 100)}%" + (f" · {note}" if note else "")
    return cell


def _error_cell(record: Mapping[str, Any]) -> ErrorCell | None:
    code, http, error = record.get("code"), record.get("http_status"), record.get("error")
    if _text(record.get("status")) == Status.DONE or not (code or http or error):
        return None
    # One wording: the code and the HTTP status are shown on their own only when the message
    # does not already say them ("POST /x answered 403 (E403)" is shown as it is, never
    # "[E403] HTTP 403 POST /x answered 403 (E403)"). "cancelled" / "deleted" say no more than
    # their code: the code alone is shown.
    message = _text(error) if error and error != code else ""
    return {
        "code": _text(code) if code and not _says(message, _text(code)) else "",
        "http": f"HTTP {http}" if http and not _says(message, _text(http)) else "",
        "message": message,
    }


def _says(message: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", message) is not None


def cells(record: Mapping[str, Any], now: float | None = None) -> Cells:
    """Every column's value for one job record (what ``query_all`` lists, or a ``job-update``).

    Args:
        record: the record; fields of the wrong type read as missing.
        now: ms since the epoch, for the retry countdown (see :func:`retry_text`).
    """
    job_id = _text(record.get("id"))
    status = _text(record.get("status"))
    attempts = record.get("attempts")
    max_attempts = record.get("max_attempts")
    retry = retry_text(record, now)
    return {
        "job": {"name": job_name(record), "id": job_id, "short_id": job_id[:12],
                "scope": VOLATILE_SCOPE if record.get("volatile") is True else ""},
        "type": _text(record.get("type")),
        "status": _status_cell(record),
        "attempts": f"{0 if attempts is None else attempts} / "
                    f"{'?' if max_attempts is None else max_attempts}",
        "retry": retry,
        "error": _error_cell(record),
        "actions": {"retry": status in RETRYABLE},
        "ticks": bool(retry) and now is not None and status == Status.PENDING,
    }


def definition() -> dict[str, Any]:
    """The table's definition as JSON-like data, for ``<bg-jobs>``:
    everything above but :func:`cells`."""
    return {
        "title": TITLE,
        "empty": EMPTY_TABLE,
        "no_value": NO_VALUE,
        "volatile_note": VOLATILE_NOTE,
        "columns": [dataclasses.asdict(column) for column in COLUMNS],
        "statuses": [{**dataclasses.asdict(look), "status": str(look.status)}
                     for look in STATUS_LOOKS],
        "retryable": [str(look.status) for look in STATUS_LOOKS if look.status in RETRYABLE],
        "finished": [str(status) for status in TERMINAL],
        "recheck_ms": RECHECK_MS,
        "max_unconfirmed": MAX_UNCONFIRMED,
    }


# -- reading the store again: what both tables show of the jobs they read -----------------

class Reads(Protocol):
    """What :func:`read_again` asks of a queue (:mod:`pyjobq.queue` answers it)."""

    def jobs(self, *, status: str | None = None) -> Awaitable[list[dict[str, Any]]]: ...

    def get_job(self, job_id: str) -> Awaitable[dict[str, Any] | None]: ...


#: The statuses of a job that has not ended, as a table shows them.
UNFINISHED = tuple(str(status) for status in Status if status not in TERMINAL)


#: Up to this many jobs, :func:`read_again` reads each by id; more, the unfinished ones by status.
READ_BY_ID = 100


async def read_again(queue: Reads, job_ids: Collection[str]) -> dict[str, dict[str, Any] | None]:
    """The stored record of each of ``job_ids`` now (None: it has none), for a table that shows
    them unfinished. Up to :data:`READ_BY_ID` of them, each by itself; more, the records of each
    unfinished status through its index, then each of ``job_ids`` not among them — it ended, or
    was deleted — by itself. The finished records a table does not ask about are never read, and
    what is read grows with the unfinished jobs, never with the store. Of two states of one job
    (it moved between the status reads) the newer is kept."""
    wanted = set(job_ids)
    found: dict[str, dict[str, Any] | None] = {}
    listings = [] if len(wanted) <= READ_BY_ID else \
        await asyncio.gather(*(queue.jobs(status=s) for s in UNFINISHED))
    for listed in listings:
        for record in listed:
            job_id = record.get("id")
            if isinstance(job_id, str) and job_id in wanted:
                seen = found.get(job_id)
                if seen is None or updated_at(record) >= updated_at(seen):
                    found[job_id] = record
    missing = [job_id for job_id in wanted if job_id not in found]
    for job_id, stored in zip(missing, await asyncio.gather(*map(queue.get_job, missing))):
        found[job_id] = stored
    return found


def updated_at(record: Mapping[str, Any]) -> float:
    """A record's ``updated_at`` (0 when it has none that is a finite number)."""
    at = record.get("updated_at")
    return float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) \
        and math.isfinite(at) else 0.0


def read_is_news(read: Mapping[str, Any], shown: Mapping[str, Any]) -> bool:
    """Whether a record :func:`read_again` read says something other than the row ``shown``:
    another moment (``updated_at``) or another status. A read begins after every news already
    applied, so it is never the older of the two — and the row may come from news any
    same-origin script posted, stamped in the future: the store's word replaces it whatever its
    stamp. The same state read again leaves the row (and its progress) as it is."""
    return updated_at(read) != updated_at(shown) or read.get("status") != shown.get("status")


def confirm_first(news: Mapping[str, Any], shown: Mapping[str, Any] | None) -> bool:
    """Whether news (a :func:`~pyjobq.core.jobs_table.row`) is shown only once a read of the
    store confirms it, never on its own word: it says the job ended or was deleted, or takes a
    finished row back. News of an unfinished job is shown as it comes (a job the table does not
    know is read too, and dropped if the store has no record of it); the re-read of unfinished
    rows corrects what it got wrong (see the module's header)."""
    if news.get("deleted") is True or news.get("status") in TERMINAL:
        return True
    return shown is not None and shown.get("status") in TERMINAL


def late_progress(news: Mapping[str, Any], shown: Mapping[str, Any] | None) -> bool:
    """Whether news is a run's progress arriving after the row shows that run ended: dropped."""
    return (news.get("progress_only") is True and shown is not None
            and shown.get("status") in TERMINAL)


async def read_for_table(queue: Reads, shown: Mapping[str, Mapping[str, Any]],
                         asked: Mapping[str, Mapping[str, Any] | None],
                         volatile_here: Callable[[str], bool]) -> dict[str, dict[str, Any] | None]:
    """What a table should show of the jobs it reads again, from one :func:`read_again`.

    Args:
        shown: the rows it shows of them (at least ``status`` and ``updated_at``), by id.
        asked: the ids news asked about (:func:`confirm_first`, or a job the table did not
            know), each with the news of its end, or None.
        volatile_here: whether an id is one of this tab's volatile jobs, whose engine forgets
            it once done (no read can confirm that end; its news comes from this tab).

    Returns:
        By id: the row to show (a :func:`~pyjobq.core.jobs_table.row`), or None for a job
        with no record (it leaves the table). Left out: a shown row the read says nothing new
        of (its progress stays), and a done volatile job its engine forgot.
    """
    found = await read_again(queue, [*dict.fromkeys([*shown, *asked])])
    answer: dict[str, dict[str, Any] | None] = {}
    for job_id, stored in found.items():
        record = None if stored is None else row(stored)
        drawn = shown.get(job_id)
        news = asked.get(job_id)
        if record is None and news is not None and news.get("status") == Status.DONE \
                and volatile_here(job_id):
            record = dict(news)
        if record is None and drawn is not None and drawn.get("volatile") is True \
                and drawn.get("status") == Status.DONE:
            continue
        if record is not None and drawn is not None and not read_is_news(record, drawn):
            continue
        if record is None and drawn is None and job_id not in asked:
            continue
        answer[job_id] = record
    return answer
