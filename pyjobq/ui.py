"""Seeing what the queue is doing: the ``<bg-jobs>`` element and a notebook table.

``await pyjobq.ui.install()`` defines ``<bg-jobs>`` on the current page (call it
after :func:`pyjobq.configure`: it uses the queue). Drop ``<bg-jobs></bg-jobs>``
anywhere in the page's HTML — before or after the call — and it shows this tab's
volatile jobs and the origin's persistent ones, live, with retry and delete
buttons that ask the queue. No page JavaScript is needed.

:func:`jobs_html` renders records as an escaped HTML table, for notebooks
(``_repr_html_``) and anywhere without a DOM, such as JupyterLite's kernel.
"""

from __future__ import annotations

import asyncio
import html
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from .core.status import Status
from .errors import PyjobqError

STATUSES = tuple(Status)
"""Every status, in the order the table's caption counts them."""

_bridge: Any = None
_installing: asyncio.Future[Any] | None = None


async def install(queue: Any = None) -> None:
    """Define ``<bg-jobs>`` on this page and connect it to ``queue``. Idempotent.

    Args:
        queue: what the table asks (``query_all``, ``on_update``, ``retry_job``,
            ``delete_job``, ``retry_all``); default :mod:`pyjobq.queue`.

    Raises:
        PyjobqError: there is no DOM here (a worker, e.g. JupyterLite's kernel:
            display :func:`jobs_html` of ``await query_all()`` instead).
    """
    global _bridge, _installing
    if _bridge is not None:
        return
    if _installing is not None:
        await asyncio.shield(_installing)
        return
    from .browser import bg_jobs

    if not bg_jobs.has_dom():
        raise PyjobqError(
            "<bg-jobs> needs a page with a DOM; here there is none (a worker or a notebook "
            "kernel). Display pyjobq.ui.jobs_html(await pyjobq.query_all()) instead."
        )
    if queue is None:
        from . import queue as default_queue

        queue = default_queue
    _installing = asyncio.get_event_loop().create_future()
    try:
        module = await bg_jobs.load_module()
        _bridge = bg_jobs.Bridge(module, queue)
        _installing.set_result(None)
    except BaseException as exc:
        _installing.set_exception(exc)
        _installing.exception()  # retrieved: the caller below re-raises it
        raise
    finally:
        _installing = None


def uninstall() -> None:
    """Disconnect every ``<bg-jobs>`` from the queue and release the bridge's proxy.

    The element stays defined (custom elements cannot be undefined); it shows
    "waiting for the queue" until :func:`install` runs again."""
    global _bridge
    if _bridge is not None:
        bridge, _bridge = _bridge, None
        bridge.close()


def _text(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _name(record: Mapping[str, Any]) -> str:
    label = record.get("label")
    if isinstance(label, str) and label:
        return label
    return f"{record.get('type') or 'job'} {str(record.get('id', ''))[:8]}"


def _when(ms: Any, now: float | None) -> str:
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return ""
    if now is None:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    seconds = int(-(-(ms - now) // 1000))
    return "due now" if seconds <= 0 else f"in {seconds} s"


_PILL = {
    "pending": "#7d4e00;background:#fff3c4",
    "running": "#0550ae;background:#ddf4ff",
    "paused": "#6639ba;background:#f3e8ff",
    "done": "#116329;background:#dafbe1",
    "failed": "#a40e26;background:#ffebe9",
    "cancelled": "#57606a;background:#eef1f4",
}


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
    counts = {s: 0 for s in STATUSES}
    for r in rows:
        if r.get("status") in counts:
            counts[r["status"]] += 1
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no jobs"
    cell = 'style="padding:4px 10px;text-align:left;vertical-align:top;border-bottom:1px solid #d8dee4"'
    out = [
        '<table class="pyjobq-jobs" style="border-collapse:collapse;font:13px system-ui,sans-serif">',
        f'<caption style="text-align:left;font-weight:600;padding:4px 10px">Background jobs '
        f'<span style="font-weight:400;color:#656d76">({_text(summary)})</span></caption>',
        "<thead><tr>",
        *(f'<th scope="col" {cell}>{h}</th>' for h in
          ("Job", "Type", "Status", "Attempts", "Next retry", "Last error")),
        "</tr></thead><tbody>",
    ]
    for r in rows:
        status = str(r.get("status", ""))
        pill = _PILL.get(status, _PILL["cancelled"])
        progress = r.get("progress")
        extra = ""
        if status == "running" and isinstance(progress, (int, float)) and not isinstance(progress, bool):
            p = min(1.0, max(0.0, float(progress)))
            extra = f' <progress max="1" value="{p:.3f}">{_text(round(p * 100))}%</progress>'
        error_bits = [b for b in (
            r.get("code") and f"[{r['code']}]",
            r.get("http_status") and f"HTTP {r['http_status']}",
            r.get("error"),
        ) if b] if status != "done" else []
        retry = _when(r.get("next_retry_at"), now) if status == "pending" else ""
        scope = " (this tab)" if r.get("volatile") is True else ""
        out.append(
            "<tr>"
            f'<th scope="row" {cell}>{_text(_name(r))}{_text(scope)}<br>'
            f'<small style="color:#656d76;font-family:monospace">{_text(r.get("id"))}</small></th>'
            f"<td {cell}><code>{_text(r.get('type'))}</code></td>"
            f'<td {cell}><span style="color:{pill};border-radius:999px;padding:1px 8px;'
            f'font-weight:600">{_text(status)}</span>{extra}</td>'
            f"<td {cell}>{_text(r.get('attempts', 0))} / {_text(r.get('max_attempts', '?'))}</td>"
            f"<td {cell}>{_text(retry or '—')}</td>"
            f"<td {cell}>{_text(' '.join(str(b) for b in error_bits) or '—')}</td>"
            "</tr>"
        )
    if not rows:
        out.append(f'<tr><td colspan="6" {cell}>No jobs yet.</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)
