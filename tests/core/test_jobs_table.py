"""pyjobq.core.jobs_table: the one definition both job tables draw, and every cell's value."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import listed  # tests/ is on sys.path
from pyjobq.core import jobs_table
from pyjobq.core.jobs_table import cells, countdown, job_name, retry_text
from pyjobq.core.status import TERMINAL, Status

NOW = 1_000_000.0


def record(**over):
    """A row as ``query_all`` lists it, with a 16-character id."""
    return listed("a1b2c3d4e5f6a7b8", **over)


def test_every_status_has_one_look_in_the_status_order() -> None:
    assert [look.status for look in jobs_table.STATUS_LOOKS] == list(Status)
    assert [look.label for look in jobs_table.STATUS_LOOKS] == [str(s) for s in Status]
    assert set(jobs_table.LOOKS) == {str(s) for s in Status}
    assert jobs_table.FALLBACK in TERMINAL
    assert [look.status for look in jobs_table.STATUS_LOOKS if look.pulse] == [Status.RUNNING]


def test_retryable_is_what_the_transition_table_revives() -> None:
    assert jobs_table.RETRYABLE == {Status.FAILED, Status.CANCELLED}
    assert jobs_table.RETRYABLE < TERMINAL


def test_columns_in_order_and_only_actions_needs_a_page() -> None:
    assert [(c.key, c.heading) for c in jobs_table.COLUMNS] == [
        ("job", "Job"), ("type", "Type"), ("status", "Status"), ("attempts", "Attempts"),
        ("retry", "Next retry"), ("error", "Last error"), ("actions", "Actions")]
    assert [c.key for c in jobs_table.COLUMNS if c.interactive] == ["actions"]
    # Every column has its value in cells(), and cells() has nothing but columns and "ticks".
    assert set(cells(record())) == {c.key for c in jobs_table.COLUMNS} | {"ticks"}


def test_definition_is_json_and_says_what_the_constants_say() -> None:
    definition = json.loads(json.dumps(jobs_table.definition()))
    assert definition["title"] == jobs_table.TITLE == "Background jobs"
    assert definition["empty"] == jobs_table.EMPTY_TABLE
    assert definition["no_value"] == jobs_table.NO_VALUE
    assert definition["volatile_note"] == jobs_table.VOLATILE_NOTE
    assert definition["columns"] == [
        {"key": c.key, "heading": c.heading, "interactive": c.interactive}
        for c in jobs_table.COLUMNS]
    assert [s["status"] for s in definition["statuses"]] == [str(s) for s in Status]
    pending = definition["statuses"][0]
    assert pending == {"status": "pending", "label": "pending", "pulse": False,
                       "light": {"text": "#7d4e00", "background": "#fff3c4", "border": "#f2d675"},
                       "dark": {"text": "#e3b341", "background": "#3b2e0a", "border": "#6c5314"}}
    assert definition["retryable"] == ["failed", "cancelled"]


@pytest.mark.parametrize("ms,text", [
    (0, "due now"), (-5_000, "due now"), (1, "in 1 s"), (500, "in 1 s"), (89_000, "in 89 s"),
    (90_000, "in 1 min 30 s"), (125_000, "in 2 min 5 s"), (89 * 60_000 + 59_000, "in 89 min 59 s"),
    (90 * 60_000, "in 2 h"), (149 * 60_000, "in 2 h"), (150 * 60_000, "in 3 h"),
])
def test_countdown_seconds_then_minutes_then_hours(ms: float, text: str) -> None:
    assert countdown(NOW + ms, NOW) == text


def test_retry_text_for_each_status() -> None:
    due = NOW + 10_500
    assert retry_text(record(status="pending", next_retry_at=due), NOW) == "in 11 s"
    assert retry_text(record(status="pending", next_retry_at=10_000.0), None) == (
        "1970-01-01 00:00:10 UTC")
    assert retry_text(record(status="pending", next_retry_at=None), NOW) == ""
    assert retry_text(record(status="paused", yield_lock="fg-lock"), NOW) == "when fg-lock is free"
    assert retry_text(record(status="paused"), NOW) == "type suspended"
    for status in ("running", "done", "failed", "cancelled"):
        assert retry_text(record(status=status, next_retry_at=due), NOW) == ""


@pytest.mark.parametrize("at", [float("inf"), float("nan"), True, "soon"])
def test_a_retry_time_no_clock_can_read_is_no_retry_time(at: object) -> None:
    assert retry_text(record(status="pending", next_retry_at=at), NOW) == ""
    assert retry_text(record(status="pending", next_retry_at=at), None) == ""
    # no calendar's year
    assert retry_text(record(status="pending", next_retry_at=1e300), None) == ""


def test_job_name_is_the_label_else_type_and_short_id() -> None:
    assert job_name(record()) == "save note"
    assert job_name(record(label="")) == "notes a1b2c3d4"
    assert job_name(record(label=None, type=None)) == "job a1b2c3d4"
    assert job_name(record(label=7)) == "notes a1b2c3d4"


def test_cells_of_a_pending_persistent_job_waiting_for_its_retry() -> None:
    assert cells(record(status="pending", attempts=2, max_attempts=5, next_retry_at=NOW + 3_000,
                        error="HTTP 503", code="status_503", http_status=503), NOW) == {
        "job": {"name": "save note", "id": "a1b2c3d4e5f6a7b8", "short_id": "a1b2c3d4e5f6",
                "scope": ""},
        "type": "notes",
        "status": {"look": "pending", "label": "pending", "progress": None, "progress_text": ""},
        "attempts": "2 / 5",
        "retry": "in 3 s",
        "error": {"code": "status_503", "http": "", "message": "HTTP 503"},
        "actions": {"retry": False},
        "ticks": True,
    }


def test_cells_of_a_running_volatile_job_with_progress() -> None:
    assert cells(record(status="running", volatile=True, attempts=1, progress=0.42,
                        progress_note="3 of 7 tiles"), NOW) == {
        "job": {"name": "save note", "id": "a1b2c3d4e5f6a7b8", "short_id": "a1b2c3d4e5f6",
                "scope": "this tab"},
        "type": "notes",
        "status": {"look": "running", "label": "running", "progress": 0.42,
                   "progress_text": "42% · 3 of 7 tiles"},
        "attempts": "1 / 5",
        "retry": "",
        "error": None,
        "actions": {"retry": False},
        "ticks": False,
    }


def test_cells_of_a_cancelled_job_show_its_code_alone_and_offer_retry() -> None:
    c = cells(record(status="cancelled", error="cancelled", code="cancelled"), NOW)
    assert c["error"] == {"code": "cancelled", "http": "", "message": ""}
    assert c["actions"] == {"retry": True}
    assert c["status"]["look"] == "cancelled" and c["ticks"] is False


def test_a_done_job_has_no_error_cell_whatever_it_carries() -> None:
    assert cells(record(status="done", http_status=200, code="ok", error="fine"))["error"] is None
    assert cells(record(status="failed", code=None, error=None, http_status=None))["error"] is None


@pytest.mark.parametrize("progress,shown", [
    (0.25, 0.25), (2, 1.0), (-1, 0.0), (True, None), (float("nan"), None), ("half", None)])
def test_progress_is_clamped_and_shown_for_running_jobs_only(progress: object,
                                                             shown: float | None) -> None:
    assert cells(record(status="running", progress=progress))["status"]["progress"] == shown
    assert cells(record(status="pending", progress=0.5))["status"]["progress"] is None


def test_an_unknown_or_malformed_record_reads_as_empty_cells_in_the_fallback_look() -> None:
    odd = cells({"id": 7, "status": ["x"], "attempts": None, "max_attempts": None, "label": None})
    assert odd["status"] == {"look": "cancelled", "label": "['x']", "progress": None,
                             "progress_text": ""}
    assert odd["attempts"] == "0 / ?"
    assert odd["job"] == {"name": "job 7", "id": "7", "short_id": "7", "scope": ""}
    assert odd["actions"] == {"retry": False} and odd["retry"] == "" and odd["error"] is None
    assert cells({})["job"]["id"] == ""


def test_only_a_countdown_ticks() -> None:
    waiting = record(status="pending", next_retry_at=NOW + 60_000)
    assert cells(waiting, NOW)["ticks"] is True
    assert cells(waiting, None)["ticks"] is False  # an absolute time does not change
    assert cells(record(status="paused", yield_lock="x"), NOW)["ticks"] is False


def test_the_table_imports_on_plain_cpython_without_the_browser() -> None:
    script = ("import sys, pyjobq.core.jobs_table, pyjobq.notebook, pyjobq.ui\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('js', 'pyodide')"
              " or m.startswith('pyjobq.browser') or m == 'pyjobq.queue'))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
