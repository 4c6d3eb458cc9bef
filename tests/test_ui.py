"""pyjobq.ui.jobs_html: the notebook table, on CPython."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from helpers import listed as record  # tests/ is on sys.path
from pyjobq import notebook, ui
from pyjobq.core import jobs_table
from pyjobq.core.status import Status
from pyjobq.ui import jobs_html

ROOT = Path(__file__).resolve().parent.parent

XSS = "<img src=x onerror=window.xss=1>"


class Parsed(HTMLParser):
    def __init__(self, text):
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)

    def handle_data(self, data):
        self.text.append(data)


def test_escapes_every_value():
    html = jobs_html([record(label=XSS, type='"><script>x()</script>', error="<b>boom</b>",
                             code="<c>", id="<id>", status="failed", http_status=500)])
    parsed = Parsed(html)
    assert "img" not in parsed.tags and "script" not in parsed.tags and "b" not in parsed.tags
    assert not any(name.startswith("on") for name, _ in parsed.attrs)
    text = "".join(parsed.text)
    assert XSS in text and "<b>boom</b>" in text and "[<c>]" in text and "<id>" in text


def test_structure_caption_and_scoped_headers():
    html = jobs_html([record()])
    assert html.startswith("<table") and html.endswith("</table>")
    assert "<caption" in html and "<thead>" in html
    headers = re.findall(r'<th scope="col"[^>]*>([^<]*)</th>', html)
    assert headers == ["Job", "Type", "Status", "Attempts", "Next retry", "Last error"]
    assert html.count('<th scope="row"') == 1


def test_counts_per_status_in_caption_and_newest_first():
    recs = [record(id="old", status="done", created_at=1),
            record(id="new", status="failed", created_at=3),
            record(id="mid", status="failed", created_at=2), record(id="gone", deleted=True)]
    html = jobs_html(recs)
    assert "(1 done, 2 failed)" in html
    assert html.index(">new<") < html.index(">mid<") < html.index(">old<")
    assert ">gone<" not in html


def test_label_falls_back_to_type_and_short_id():
    html = jobs_html([record(label=None, type="thumb", id="0123456789abcdef")])
    assert "thumb 01234567" in html


def test_next_retry_relative_when_now_given():
    rec = record(next_retry_at=10_500.0)
    assert "in 1 s" in jobs_html([rec], now=10_000.0)
    assert "due now" in jobs_html([rec], now=11_000.0)
    assert "1970-01-01 00:00:10 UTC" in jobs_html([rec])
    # Only a pending job waits for a retry.
    assert "in 1 s" not in jobs_html([record(status="failed", next_retry_at=10_500.0)],
                                     now=10_000.0)


def test_error_shows_code_and_http_status_but_not_for_done():
    failed = jobs_html([record(status="failed", error="HTTP 403", code="read_only",
                               http_status=403)])
    assert "[read_only] HTTP 403</td>" in failed  # the message says 403: said once
    other = jobs_html([record(status="failed", error="boom", code="read_only", http_status=403)])
    assert "[read_only] HTTP 403 boom</td>" in other


def test_a_failed_fetch_job_s_error_reads_once():
    """One wording: never "[E403] HTTP 403 POST /x answered 403 (E403)"."""
    html = jobs_html([record(status="failed", code="E403", http_status=403,
                             error="POST /api/x answered 403 (E403)")])
    assert ">POST /api/x answered 403 (E403)</td>" in html
    assert "[E403]" not in html and "HTTP 403" not in html
    done = jobs_html([record(status="done", http_status=200, code=None)])
    assert "HTTP 200" not in done


@pytest.mark.parametrize("progress,shown",
                         [(0.25, 'value="0.250"'), (2, 'value="1.000"'), (True, None)])
def test_progress_bar_for_running_jobs(progress, shown):
    html = jobs_html([record(status="running", progress=progress)])
    if shown:
        assert "<progress" in html and shown in html
    else:
        assert "<progress" not in html


def test_volatile_marked_and_empty_table():
    assert "(this tab)" in jobs_html([record(volatile=True)])
    assert "No jobs yet." in jobs_html([])
    assert "(no jobs)" in jobs_html([])


# One table: jobs_html draws pyjobq.core.jobs_table, the definition <bg-jobs> receives.

def pills(html: str) -> list[tuple[str, str]]:
    """Each status pill's (style, text), in order."""
    return re.findall(r'<span style="(color:[^"]*)">([^<]*)</span>', html)


def test_headings_are_the_definitions_columns_but_the_interactive_ones():
    headers = re.findall(r'<th scope="col"[^>]*>([^<]*)</th>', jobs_html([record()]))
    assert headers == [c.heading for c in jobs_table.COLUMNS if not c.interactive]
    assert [c.key for c in notebook.COLUMNS] == list(notebook.CELL_HTML)
    assert 'colspan="6"' in jobs_html([])


@pytest.mark.parametrize("look", jobs_table.STATUS_LOOKS, ids=lambda look: str(look.status))
def test_each_status_pill_has_the_definitions_label_and_colours(look):
    [(style, text)] = pills(jobs_html([record(status=str(look.status))]))
    assert text == look.label
    assert style.startswith(f"color:{look.light.text};background:{look.light.background};"
                            f"border:1px solid {look.light.border};")
    assert style == notebook.pill_style(str(look.status))


def test_an_unknown_status_is_drawn_in_the_fallback_look_under_its_own_name():
    [(style, text)] = pills(jobs_html([record(status="exploded")]))
    assert text == "exploded" and style == notebook.pill_style(str(jobs_table.FALLBACK))


def test_the_caption_counts_in_the_definitions_order_and_labels():
    recs = [record(id=str(s), status=str(s)) for s in reversed(list(Status))]
    summary = ", ".join(f"1 {look.label}" for look in jobs_table.STATUS_LOOKS)
    assert f"({summary})" in jobs_html(recs)
    assert ui.STATUSES == tuple(look.status for look in jobs_table.STATUS_LOOKS) == tuple(Status)


def test_a_row_shows_the_definitions_cells():
    rec = record(status="pending", attempts=2, max_attempts=4, next_retry_at=70_000.0,
                 code="status_503", http_status=503, error="server busy", volatile=True)
    c = jobs_table.cells(rec, 10_000.0)
    html = jobs_html([rec], now=10_000.0)
    for value in (c["job"]["name"], c["job"]["id"], f"({c['job']['scope']})", c["type"],
                  c["attempts"], c["retry"]):
        assert re.search(rf">\s*{re.escape(value)}\s*<", html), value
    error = c["error"]
    assert f">[{error['code']}] {error['http']} {error['message']}<" in html
    assert f'title="{jobs_table.VOLATILE_NOTE}"' in html
    assert c["retry"] == "in 60 s"


def test_a_paused_row_says_what_it_waits_for_as_the_element_does():
    assert "when fg-lock is free" in jobs_html([record(status="paused", yield_lock="fg-lock")])
    assert "type suspended" in jobs_html([record(status="paused")])


def test_a_cancelled_row_shows_its_code_once():
    html = jobs_html([record(status="cancelled", code="cancelled", error="cancelled")])
    assert "[cancelled]</td>" in html and "[cancelled] cancelled" not in html


def test_the_element_holds_no_copy_of_the_definition():
    source = (ROOT / "pyjobq" / "browser" / "bg_jobs.mjs").read_text()
    words = [c.heading for c in jobs_table.COLUMNS] + [
        jobs_table.TITLE, jobs_table.EMPTY_TABLE, jobs_table.NO_VALUE, jobs_table.VOLATILE_SCOPE,
        jobs_table.VOLATILE_NOTE]
    assert [w for w in words
            if f'"{w}"' in source or f"`{w}`" in source or f">{w}<" in source] == []
    wordings = ["due now", "type suspended", "is free", " min ", "HTTP ", " / "]
    assert [w for w in wordings if w in source] == []
    # The pills' backgrounds and borders (their text colours are shared with the element's chrome).
    colours = [colour for look in jobs_table.STATUS_LOOKS for scheme in (look.light, look.dark)
               for colour in (scheme.background, scheme.border)]
    assert [c for c in colours if c in source] == []
    assert [str(s) for s in Status if f".s-{s}" in source] == []
    # Statuses appear only in the job-update merge ("running": progress implies a run).
    assert [str(s) for s in Status if f'"{s}"' in source] == ["running"]


def test_queue_draws_its_table_without_importing_ui():
    tree = ast.parse((ROOT / "pyjobq" / "queue.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {f".{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                 and node.module is None for alias in node.names}
    assert not imported & {"ui", ".ui", "pyjobq.ui"}
    # On CPython, in a fresh interpreter (importing the queue reads the names for good).
    script = ("import sys, pyjobq.queue as q\n"
              "q._known.remember({'id': 'j1', 'type': 'notes', 'status': 'pending',"
              " 'code': 'gone'})\n"
              "html = q._repr_html_()\n"
              "print('pyjobq.ui' in sys.modules, html.startswith('<table'), '[gone]' in html)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.split() == ["False", "True", "True"]


def test_ui_keeps_its_public_names():
    assert ui.jobs_html is notebook.jobs_html
    assert sorted(ui.__all__) == ["STATUSES", "install", "jobs_html", "uninstall"]
    assert callable(ui.install) and callable(ui.uninstall)
