"""pyjobq.ui.jobs_html: the notebook table, on CPython."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from pyjobq.testing import record as stored
from pyjobq.ui import jobs_html

XSS = "<img src=x onerror=window.xss=1>"


def record(**over):
    """A row as ``query_all`` lists it: a stored record's fields, then ``over`` (any key)."""
    base = stored("a1b2c3d4e5f6", type="notes", label="save note", created_at=1_000.0,
                  next_retry_at=None).to_dict()
    return {**base, **over}


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
    recs = [record(id="old", status="done", created_at=1), record(id="new", status="failed", created_at=3),
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
    assert "in 1 s" not in jobs_html([record(status="failed", next_retry_at=10_500.0)], now=10_000.0)


def test_error_shows_code_and_http_status_but_not_for_done():
    failed = jobs_html([record(status="failed", error="HTTP 403", code="read_only", http_status=403)])
    assert "[read_only] HTTP 403 HTTP 403" in failed
    done = jobs_html([record(status="done", http_status=200, code=None)])
    assert "HTTP 200" not in done


@pytest.mark.parametrize("progress,shown", [(0.25, 'value="0.250"'), (2, 'value="1.000"'), (True, None)])
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
