"""pyjobq.testing.playwright's refusals and messages, without a browser (a stand-in page):
what each says when a test gives it a bad argument or the queue does not answer."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("playwright")

from playwright.sync_api import Error  # noqa: E402

from pyjobq.testing.playwright import STATUSES, Tab, TabError  # noqa: E402


class Page:
    """Just enough of a Playwright page for a Tab."""

    url = "http://127.0.0.1:1/app.html"

    def on(self, event: str, handler: Any) -> None:
        pass


def tab(run: Any = None) -> Tab:
    return Tab(None, Page(), run=run)  # type: ignore[arg-type]


def test_a_timeout_of_zero_or_less_is_refused_naming_it() -> None:
    for bad in (0, -1, 0.0):
        with pytest.raises(ValueError, match=r"timeout_s must be a number of seconds greater "
                                             r"than 0.*no timeout at all"):
            Tab(None, Page(), timeout_s=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout_s must be"):
            tab().py("1", timeout_s=bad)
        with pytest.raises(ValueError, match="timeout_s must be"):
            tab().queue_ready(timeout_s=bad)
        with pytest.raises(ValueError, match="timeout_s must be"):
            tab().wait_for_python(timeout_s=bad)
        with pytest.raises(ValueError, match="interval_s must be"):
            tab().wait_for_status("x", "done", interval_s=bad)


def test_wait_for_status_names_the_valid_statuses_at_once() -> None:
    assert "done" in STATUSES and "pending" in STATUSES
    with pytest.raises(ValueError, match=r"unknown status 'finished'; give one or more of "
                                         r"'pending'.*'done'"):
        tab().wait_for_status("x", ["done", "finished"])
    with pytest.raises(ValueError, match="no status; give one or more of"):
        tab().wait_for_status("x", ())


def test_a_queue_that_does_not_answer_is_named_with_what_to_check() -> None:
    def run(page: Any, code: str) -> Any:
        raise Error("TimeoutError")

    with pytest.raises(TabError, match=r"the queue on http://127.0.0.1:1/app.html did not "
                                       r"answer pyjobq.query_all\(\) within 7 s\. Check that "
                                       r"the page installs and imports pyjobq"):
        tab(run).queue_ready(timeout_s=7)
