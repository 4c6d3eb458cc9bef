"""Which failed boots of the scheduler worker are retried, and when (pyjobq/core/boot.py)."""

from __future__ import annotations

import pytest

from pyjobq.core import boot
from pyjobq.core.backoff import make_backoff

BACKOFF = make_backoff(lambda: 0.0)  # exact steps: 1 s, 2 s, 4 s, ... 30 s


def failure(stage: str, *, online: bool = True, refused: bool = False) -> boot.BootFailure:
    return boot.BootFailure(stage=stage, message="the worker's words", online=online,
                            refused=refused)


def test_a_stalled_boot_is_retried_on_the_ladder() -> None:
    assert boot.after_failure(failure("timeout"), 1, BACKOFF) == boot.Retry(delay_ms=1000.0)
    assert boot.after_failure(failure("timeout"), 2, BACKOFF) == boot.Retry(delay_ms=2000.0)
    assert boot.after_failure(failure("timeout"), 5, BACKOFF) == boot.Retry(delay_ms=16_000.0)
    assert boot.after_failure(failure("timeout"), 40, BACKOFF) == boot.Retry(delay_ms=30_000.0)


def test_a_dropped_download_is_retried_online_too() -> None:
    assert boot.after_failure(failure("fetch", online=True), 1, BACKOFF) == boot.Retry(
        delay_ms=1000.0)


@pytest.mark.parametrize("stage",
                         ["script", "import", "fetch", "load", "install", "start", "timeout"])
def test_any_failure_while_offline_is_retried(stage: str) -> None:
    # Nothing could be fetched: it says nothing about the distribution or the page.
    assert boot.after_failure(failure(stage, online=False), 3, BACKOFF) == boot.Retry(
        delay_ms=4000.0)


@pytest.mark.parametrize("stage", ["script", "import", "load", "install", "start"])
def test_a_failure_online_that_the_network_did_not_cause_is_permanent(stage: str) -> None:
    # A script that throws, no Pyodide where the page says, a package not in the lock, a bug.
    assert boot.after_failure(failure(stage, online=True), 1, BACKOFF) is None


@pytest.mark.parametrize("online", [True, False])
@pytest.mark.parametrize("stage", ["script", "fetch", "load", "timeout"])
def test_a_content_security_policy_refusal_is_permanent_even_offline(stage: str,
                                                                     online: bool) -> None:
    assert boot.after_failure(failure(stage, online=online, refused=True), 1, BACKOFF) is None


def test_the_stages_are_the_ones_the_worker_reports() -> None:
    # worker.mjs sets these in this order; pyjobq.errors has advice for each.
    from pyjobq.errors import WORKER_ADVICE

    assert boot.STAGES == ("script", "import", "fetch", "load", "install", "start")
    assert set(WORKER_ADVICE) == set(boot.STAGES)
    assert boot.TIMEOUT not in boot.STAGES and boot.is_transient(failure(boot.TIMEOUT))


def test_a_deadline_that_fires_on_time_ends_the_boot() -> None:
    assert boot.is_stalled(0.0, 60_000.0, 60_000.0, armed_again=False)
    assert boot.is_stalled(0.0, 60_000.0 + boot.LATE_MS, 60_000.0, armed_again=False)  # timer slack


def test_a_deadline_that_fires_late_is_armed_once_more_then_ends_the_boot() -> None:
    # Fired late: the page was frozen (its worker with it) or busy; judged again from then.
    assert not boot.is_stalled(0.0, 60_000.0 + boot.LATE_MS + 1, 60_000.0, armed_again=False)
    assert not boot.is_stalled(0.0, 600_000.0, 60_000.0, armed_again=False)
    # Once: a hidden tab's timers run late every time, and its stalled boot must still end.
    assert boot.is_stalled(0.0, 600_000.0, 60_000.0, armed_again=True)
