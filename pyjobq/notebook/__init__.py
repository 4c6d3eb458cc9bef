"""The notebook table: :func:`jobs_html`, and the live tables a notebook displays.

One of the two renderers of :mod:`pyjobq.core.jobs_table` (the other is ``<bg-jobs>``): the
columns, headings, status labels, colours and cell values are that module's; this one only
turns them into markup, styled inline so it survives notebook sanitisers. Public as
``pyjobq.ui.jobs_html``; :mod:`pyjobq.queue` draws with it too, which is why it lives apart
from :mod:`pyjobq.ui` (that module imports the queue).

Theory of operation: the live table
-----------------------------------
A cell ending in ``queue`` (or ``queue.table(...)``) shows a :class:`JobsTable`. Through
IPython's display handles (``display(..., display_id=True)``, then ``update_display``), which
every Jupyter front end routes to the output that showed the handle — JupyterLite's Pyodide
kernel included, with no widget library — that output is redrawn in place as jobs change,
from any tab, with no cell run again. A widget would buy two-way events (buttons); the table
has none (``<bg-jobs>`` is the interactive one), so plain display data is enough, and it also
survives a saved notebook as the last HTML drawn.

- **Throttled.** A change only marks the tables stale; they are redrawn at most once per
  :data:`UPDATE_INTERVAL_S`, with everything that changed meanwhile, so a burst of 10,000
  updates costs a handful of redraws, not 10,000 messages to the notebook. The timer is kept
  with its event loop: a loop that ended (CPython's ``asyncio.run``) or is not the one running
  now cannot fire it, so the next change arms another instead of waiting on it for good.
- **Never a part shown as the whole.** The queue draws the records it has heard of at once,
  and asks the store for every record (whichever kernel or tab wrote it); until the store has
  answered, the caption says the table is still being read — or, where no event loop can read
  it, that it is not read yet and how to read it — and the table is redrawn whole when the
  answer comes.
- **The store is the truth.** News of a job's end or deletion is lost for good when the tab that
  stored it crashed or froze before broadcasting it, so while a live table shows an unfinished
  job the queue reads those jobs' records again each
  :data:`~pyjobq.core.jobs_table.RECHECK_MS` (30 s, ``<bg-jobs>``'s too) with
  :func:`read_again` — by id, or for many, the unfinished records through their status index;
  never the finished ones — and takes each answer that says more than what it shows
  (:func:`read_is_news`), unless news of that job came meanwhile; a job with no record any more
  leaves the table. A read is given one period to answer. Once
  no table shows an unfinished job it stops until the next change. ``<bg-jobs>`` does the same
  through its bridge.
- **News is a prompt, never the truth.** Any same-origin script can post a ``job-update``
  on any channel name. News of an unfinished job is drawn as it comes (the re-read above
  corrects it); news of an end, a deletion or a finished job running again is drawn only
  once a read of that job's record confirms it (:func:`confirm_first`), and a job the table
  did not know is read too — no record, no row. Each row keeps only the fields the table
  reads, each of its kind (:func:`pyjobq.core.jobs_table.row`), so no field stops the table.
  At most :data:`MAX_UNCONFIRMED` jobs wait on news alone. A done volatile job is the one end
  no read can confirm (its engine forgets it): its news stands when this tab's volatile
  engine ran the job.
- **Small redraws.** Every redraw sends the whole table, so at most :data:`MAX_ROWS` rows are
  drawn: the unfinished jobs first, then the newest finished ones; the caption still counts
  every job and says how many are shown.
- **Bounded.** The newest :data:`MAX_LIVE` displays stay live (a kernel cannot tell which
  outputs a user cleared or re-ran); an older one is drawn a last time saying it no longer
  updates.

:class:`LiveTables` is given only what it needs: a renderer, a way to show and update a
display, and a timer. The queue owns the records and the store's state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import importlib
import math
import sys
from typing import Any, Callable, Iterable, Mapping, Protocol

from ..core import jobs_table
from ..core.jobs_table import Cells
from ..core.status import TERMINAL

_CELL = ('style="padding:4px 10px;text-align:left;vertical-align:top;'
         'border-bottom:1px solid #d8dee4"')
_MUTED = "#656d76"


def _text(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _or_none(text: str) -> str:
    return _text(text or jobs_table.NO_VALUE)


def pill_style(status: str) -> str:
    """The inline style of a status pill drawn as ``status`` (a status of ``STATUS_LOOKS``)."""
    colours = jobs_table.LOOKS[status].light
    return (f"color:{colours.text};background:{colours.background};"
            f"border:1px solid {colours.border};border-radius:999px;"
            "padding:1px 8px;font-weight:600")


def _job(c: Cells) -> str:
    job = c["job"]
    scope = (f' <span title="{_text(jobs_table.VOLATILE_NOTE)}">({_text(job["scope"])})</span>'
             if job["scope"] else "")
    return (f'<th scope="row" {_CELL}>{_text(job["name"])}{scope}<br>'
            f'<small style="color:{_MUTED};font-family:monospace">{_text(job["id"])}</small></th>')


def _status(c: Cells) -> str:
    status = c["status"]
    extra = ""
    if status["progress"] is not None:
        extra = (f' <progress max="1" value="{status["progress"]:.3f}">'
                 f'{_text(status["progress_text"])}</progress>')
    return (f'<td {_CELL}><span style="{pill_style(status["look"])}">{_text(status["label"])}'
            f"</span>{extra}</td>")


def _error(c: Cells) -> str:
    error = c["error"]
    parts = [] if error is None else [
        f"[{error['code']}]" if error["code"] else "", error["http"], error["message"]]
    return f"<td {_CELL}>{_or_none(' '.join(p for p in parts if p))}</td>"


#: How each column the notebook draws becomes a cell (``actions`` needs a live page).
CELL_HTML: dict[str, Callable[[Cells], str]] = {
    "job": _job,
    "type": lambda c: f"<td {_CELL}><code>{_text(c['type'])}</code></td>",
    "status": _status,
    "attempts": lambda c: f"<td {_CELL}>{_text(c['attempts'])}</td>",
    "retry": lambda c: f"<td {_CELL}>{_or_none(c['retry'])}</td>",
    "error": _error,
}

COLUMNS = tuple(column for column in jobs_table.COLUMNS if not column.interactive)
"""The columns the notebook table draws, in order."""


def status_counts(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many of ``records`` have each status of :data:`~pyjobq.core.jobs_table.STATUS_LOOKS`
    (every one, in the caption's order; deleted records and unknown statuses are not counted)."""
    counts = {str(look.status): 0 for look in jobs_table.STATUS_LOOKS}
    for r in records:
        status = str(r.get("status"))
        if status in counts and not r.get("deleted"):
            counts[status] += 1
    return counts


def jobs_html(records: Iterable[Mapping[str, Any]], *, now: float | None = None,
              note: str = "", empty: str = jobs_table.EMPTY_TABLE,
              counts: Mapping[str, int] | None = None) -> str:
    """An HTML table of job records (what ``query_all`` returns), every value escaped.

    Args:
        records: job records or ``job-update`` dicts.
        now: milliseconds since the epoch; when given, the next retry reads
            "in 12 s", otherwise it is an absolute UTC time.
        note: said after the caption's counts (e.g. that the store is still being read).
        empty: the one row of a table with no jobs.
        counts: what the caption counts per status, when ``records`` are only some of the
            jobs (see :func:`status_counts`); default: ``records`` counted.

    Returns:
        A ``<table>`` with a caption counting jobs per status, one row per job
        (newest first), styled inline so it survives notebook sanitisers.
    """
    rows = [dict(r) for r in records if not r.get("deleted")]
    # A created_at of another kind (a record written by other code) sorts as undated.
    rows.sort(key=lambda r: (-created_at(r), str(r.get("id"))))
    counts = status_counts(rows) if counts is None else counts
    summary = (", ".join(f"{n} {jobs_table.LOOKS[s].label}" for s, n in counts.items()
                         if n and s in jobs_table.LOOKS)
               or "no jobs")
    out = [
        '<table class="pyjobq-jobs" style="border-collapse:collapse;font:13px '
        'system-ui,sans-serif">',
        f'<caption style="text-align:left;font-weight:600;padding:4px 10px">'
        f'{_text(jobs_table.TITLE)} <span style="font-weight:400;color:{_MUTED}">'
        f"({_text(summary)}){_text(' — ' + note if note else '')}</span></caption>",
        "<thead><tr>",
        *(f'<th scope="col" {_CELL}>{_text(column.heading)}</th>' for column in COLUMNS),
        "</tr></thead><tbody>",
    ]
    for r in rows:
        c = jobs_table.cells(r, now)
        out.append("<tr>" + "".join(CELL_HTML[column.key](c) for column in COLUMNS) + "</tr>")
    if not rows:
        out.append(
            f'<tr><td colspan="{len(COLUMNS)}" {_CELL}>{_text(empty)}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


UPDATE_INTERVAL_S = 0.5
"""The longest a live table lags behind a change, and the shortest time between two redraws."""

MAX_LIVE = 4
"""How many of the newest displayed tables stay live."""

MAX_ROWS = 200
"""The most rows a table draws (every redraw sends them all): the unfinished jobs first, then
the newest finished ones. The caption counts every job all the same."""

READING = "reading every stored job…"
"""The caption's note while the store is being read: what is drawn is not yet the whole queue."""

READING_EMPTY = "Reading the stored jobs…"
"""The one row of a table with no jobs yet, while the store is being read."""

NOT_READ = "not read yet: `await queue.query_all()` lists every stored job"
"""The caption's note when nothing reads the store (no event loop could start the read): what
is drawn is only what this kernel heard of."""

NOT_READ_EMPTY = "The stored jobs are not read yet."
"""The one row of a table with no jobs, when the store was not read (or could not be)."""

UNREADABLE = ("the stored jobs could not be read ({error}); showing the jobs this kernel heard "
              "of only — display the queue again to retry")
"""The caption's note when the store's answer was an error."""

OLDER_LEFT_OUT = ("this kernel keeps only the newest {kept} finished jobs; the store keeps the "
                  "older ones (query_all() lists them)")
"""The caption's note when older finished records were left out of memory."""

SHOWING = "showing {shown} of {total}: the unfinished jobs, then the newest finished"
"""The caption's note when the table has more jobs than :data:`MAX_ROWS`."""

STOPPED = ("queue.stop() was called: news from other tabs no longer reaches this table "
           "(`await queue.query_all()` reads every job again)")
"""The caption's note once the queue's channel is closed (:func:`pyjobq.queue.stop`)."""

RETIRED = "no longer live: display the queue again for a live table"
"""The caption's note of a display drawn for the last time (beyond :data:`MAX_LIVE`)."""


@dataclasses.dataclass(frozen=True)
class View:
    """Which jobs one table shows: each given field must match (``None``: any)."""

    type: str | None = None
    group: str | None = None
    status: str | None = None

    def shows(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` is one of this view's jobs."""
        return all(want is None or record.get(key) == want
                   for key, want in (("type", self.type), ("group", self.group),
                                     ("status", self.status)))

    def describe(self) -> str:
        """``type 'notes', status 'failed'``; ``""`` for the whole queue."""
        return ", ".join(f"{key} {want!r}" for key, want in dataclasses.asdict(self).items()
                         if want is not None)


@dataclasses.dataclass(frozen=True)
class StoreState:
    """What the table knows of its sources: whether the store answered with every record, is
    being read or failed, and whether other tabs' changes still reach it."""

    answered: bool = False
    #: A read of every record is under way (its answer will be laid over what is drawn).
    reading: bool = False
    error: str | None = None
    #: Set when finished records beyond the newest this many were forgotten (memory stays
    #: flat): the table then says older finished jobs are left out.
    finished_kept: int | None = None
    #: False once the queue's channel is closed: other tabs' changes no longer arrive.
    hears_other_tabs: bool = True


def rows_to_draw(records: Iterable[Mapping[str, Any]],
                 limit: int = MAX_ROWS) -> list[Mapping[str, Any]]:
    """At most ``limit`` of ``records``: the unfinished ones first, then the newest finished
    ones (each newest first, by ``created_at``)."""
    ranked = sorted(records, key=lambda r: (str(r.get("status")) in TERMINAL, -created_at(r)))
    return ranked[:limit]


def created_at(record: Mapping[str, Any]) -> float:
    """A record's ``created_at`` (0 when it has none that is a finite number)."""
    at = record.get("created_at")
    return float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) \
        and math.isfinite(at) else 0.0


def table_bundle(records: Iterable[Mapping[str, Any]], view: View, store: StoreState,
                 *, retired: bool = False, max_rows: int = MAX_ROWS) -> dict[str, str]:
    """The display data of one table: ``text/html`` and a ``text/plain`` summary.

    Args:
        records: every record the queue knows of (the view picks its own).
        view: which of them to show.
        store: whether they are every stored record yet.
        retired: drawn for the last time (see :data:`RETIRED`).
        max_rows: the most rows drawn (see :data:`MAX_ROWS`); the counts are of every row.
    """
    rows = [r for r in records if view.shows(r) and not r.get("deleted")]
    drawn = rows if len(rows) <= max_rows else rows_to_draw(rows, max_rows)
    notes = [view.describe()] if view.describe() else []
    if store.error is not None:
        notes.append(UNREADABLE.format(error=store.error))
    elif store.reading and not store.answered:
        notes.append(READING)
    elif not store.answered:
        notes.append(NOT_READ)
    if store.finished_kept is not None:
        notes.append(OLDER_LEFT_OUT.format(kept=store.finished_kept))
    if len(drawn) < len(rows):
        notes.append(SHOWING.format(shown=len(drawn), total=len(rows)))
    if not store.hears_other_tabs:
        notes.append(STOPPED)
    if retired:
        notes.append(RETIRED)
    note = "; ".join(notes)
    empty = (jobs_table.EMPTY_TABLE if store.answered
             else READING_EMPTY if store.reading and store.error is None else NOT_READ_EMPTY)
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r.get("status"))] = counts.get(str(r.get("status")), 0) + 1
    plain = (f"{jobs_table.TITLE}: "
             + (", ".join(f"{n} {s}" for s, n in counts.items()) or "no jobs")
             + (f" ({note})" if note else ""))
    return {"text/html": jobs_html(drawn, note=note, empty=empty, counts=status_counts(rows)),
            "text/plain": plain}


class Handle(Protocol):
    """A shown display that can be redrawn in place."""

    def update(self, bundle: Mapping[str, str]) -> None: ...


class Timer(Protocol):
    """A call armed by :data:`CallLater`."""

    def pending(self) -> bool:
        """Whether it will still call back: not called yet, and its event loop open and the one
        that runs now (a loop that ended, or is not running, would never call)."""
        ...


Show = Callable[[Mapping[str, str]], Handle]
"""Show display data as a new output; return its handle."""

CallLater = Callable[[float, Callable[[], None]], Timer | None]
"""Call a function once, that many seconds from now; ``None`` when nothing can (no event loop)."""


class _IPythonHandle:
    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def update(self, bundle: Mapping[str, str]) -> None:
        self._handle.update(dict(bundle), raw=True)


def ipython_show(bundle: Mapping[str, str]) -> Handle:
    """Show ``bundle`` through IPython's ``display(..., display_id=True)``.

    Raises:
        ModuleNotFoundError: IPython is not installed (this is not a notebook).
    """
    display = importlib.import_module("IPython.display").display
    return _IPythonHandle(display(dict(bundle), raw=True, display_id=True))


def event_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop this code runs on: the running one; in Pyodide, its WebLoop even outside
    a task; ``None`` on plain CPython outside asyncio (nothing would run a timer or a task)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        if sys.platform != "emscripten":  # as pyjobq.hosts.IN_PYODIDE
            return None
        return asyncio.get_event_loop()  # Pyodide's WebLoop, outside a task


class _LoopTimer:
    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float,
                 callback: Callable[[], None]) -> None:
        self._loop = loop
        self._called = False
        self._callback = callback
        self._handle = loop.call_later(delay, self._call)

    def _call(self) -> None:
        self._called = True
        self._callback()

    def pending(self) -> bool:
        return (not self._called and not self._handle.cancelled()
                and not self._loop.is_closed() and self._loop is event_loop())


def loop_call_later(delay: float, callback: Callable[[], None]) -> Timer | None:
    """:data:`CallLater` on :func:`event_loop` (Pyodide's, in a notebook)."""
    loop = event_loop()
    return None if loop is None else _LoopTimer(loop, delay, callback)


class LiveTables:
    """Every live table of one queue: shows new ones, and redraws them, throttled, on change.

    Args:
        render: a view's display data now (the queue's records and store state).
        show: shows display data, returns its handle (:func:`ipython_show`).
        call_later: a timer (:func:`loop_call_later`).
        on_show: called whenever a table is shown or drawn on request (:meth:`draw`): the
            queue asks the store then.
        interval_s: see :data:`UPDATE_INTERVAL_S`.
        max_live: see :data:`MAX_LIVE`.
    """

    def __init__(self, render: Callable[[View, bool], Mapping[str, str]], *,
                 show: Show = ipython_show, call_later: CallLater = loop_call_later,
                 on_show: Callable[[], None] = lambda: None,
                 interval_s: float = UPDATE_INTERVAL_S, max_live: int = MAX_LIVE) -> None:
        self._render = render
        self._show = show
        self._call_later = call_later
        self._on_show = on_show
        self._interval_s = interval_s
        self._max_live = max_live
        self._live: list[tuple[View, Handle]] = []
        #: The armed redraw, if any: kept to tell whether it can still fire.
        self._timer: Timer | None = None
        #: How many times the live tables were redrawn (each a round of updates).
        self.redraws = 0

    @property
    def live(self) -> int:
        """How many displays are live."""
        return len(self._live)

    def shows(self, record: Mapping[str, Any]) -> bool:
        """Whether a live table shows ``record`` (its view is one of ``record``'s)."""
        return any(view.shows(record) for view, _ in self._live)

    def draw(self, view: View) -> Mapping[str, str]:
        """The display data of ``view`` now, as a table shown now would have it (the queue is
        asked to read the store first), for a renderer with no live display."""
        self._on_show()
        return self._render(view, False)

    def show(self, view: View) -> None:
        """Show a new table of ``view``, drawn now, kept live from then on."""
        self._live.append((view, self._show(self.draw(view))))
        while len(self._live) > self._max_live:
            old_view, old = self._live.pop(0)
            old.update(self._render(old_view, True))

    def changed(self) -> None:
        """Something a table shows changed: redraw the live tables within the interval."""
        if not self._live or (self._timer is not None and self._timer.pending()):
            return
        self._timer = self._call_later(self._interval_s, self._redraw)

    def _redraw(self) -> None:
        self._timer = None
        self.redraws += 1
        drawn: dict[View, Mapping[str, str]] = {}
        for view, handle in list(self._live):
            if view not in drawn:
                drawn[view] = self._render(view, False)
            handle.update(drawn[view])


class JobsTable:
    """What ``queue`` and ``queue.table(...)`` display in a notebook: a live jobs table.

    In IPython (a Jupyter kernel, JupyterLite's included) it shows as a table that redraws
    itself as jobs change; elsewhere ``_repr_html_`` (and ``repr``) give the table as it is
    now. Each starts the read of the store where an event loop runs.
    """

    def __init__(self, view: View, tables: LiveTables) -> None:
        self.view = view
        self._tables = tables

    def _ipython_display_(self) -> None:
        self._tables.show(self.view)

    def _repr_html_(self) -> str:
        return self._tables.draw(self.view)["text/html"]

    def __repr__(self) -> str:
        return self._tables.draw(self.view)["text/plain"]
