"""The notebook table: :func:`jobs_html`, the jobs table as one escaped HTML string.

One of the two renderers of :mod:`pyjobq.core.jobs_table` (the other is ``<bg-jobs>``): the
columns, headings, status labels, colours and cell values are that module's; this one only
turns them into markup, styled inline so it survives notebook sanitisers. Public as
``pyjobq.ui.jobs_html``; :func:`pyjobq.queue._repr_html_` draws with it too, which is why it
lives apart from :mod:`pyjobq.ui` (that module imports the queue).
"""

from __future__ import annotations

import html
from typing import Any, Callable, Iterable, Mapping

from .core import jobs_table
from .core.jobs_table import Cells

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


def jobs_html(records: Iterable[Mapping[str, Any]], *, now: float | None = None) -> str:
    """An HTML table of job records (what ``query_all`` returns), every value escaped.

    Args:
        records: job records or ``job-update`` dicts.
        now: milliseconds since the epoch; when given, the next retry reads
            "in 12 s", otherwise it is an absolute UTC time.

    Returns:
        A ``<table>`` with a caption counting jobs per status, one row per job
        (newest first), styled inline so it survives notebook sanitisers.
    """
    rows = [dict(r) for r in records if not r.get("deleted")]
    rows.sort(key=lambda r: (-(r.get("created_at") or 0), str(r.get("id"))))
    counts = {str(look.status): 0 for look in jobs_table.STATUS_LOOKS}
    for r in rows:
        status = str(r.get("status"))
        if status in counts:
            counts[status] += 1
    summary = (", ".join(f"{n} {jobs_table.LOOKS[s].label}" for s, n in counts.items() if n)
               or "no jobs")
    out = [
        '<table class="pyjobq-jobs" style="border-collapse:collapse;font:13px '
        'system-ui,sans-serif">',
        f'<caption style="text-align:left;font-weight:600;padding:4px 10px">'
        f'{_text(jobs_table.TITLE)} <span style="font-weight:400;color:{_MUTED}">'
        f"({_text(summary)})</span></caption>",
        "<thead><tr>",
        *(f'<th scope="col" {_CELL}>{_text(column.heading)}</th>' for column in COLUMNS),
        "</tr></thead><tbody>",
    ]
    for r in rows:
        c = jobs_table.cells(r, now)
        out.append("<tr>" + "".join(CELL_HTML[column.key](c) for column in COLUMNS) + "</tr>")
    if not rows:
        out.append(
            f'<tr><td colspan="{len(COLUMNS)}" {_CELL}>{_text(jobs_table.EMPTY_TABLE)}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)
