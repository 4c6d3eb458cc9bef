"""The retry ladder (spec: "Retry timing"): min(1000·2^(a−1), 30000) plus 0–30 % jitter."""

from __future__ import annotations

import pytest

from pyjobq.core.backoff import Backoff, make_backoff

LADDER = {1: 1000.0, 2: 2000.0, 3: 4000.0, 4: 8000.0, 5: 16000.0, 6: 30000.0, 7: 30000.0,
          100: 30000.0}


@pytest.mark.parametrize("attempt,step", sorted(LADDER.items()))
def test_step_follows_the_ladder_and_caps_at_30_s(attempt: int, step: float) -> None:
    assert make_backoff(lambda: 0.0).step(attempt) == step


def test_attempt_below_one_is_treated_as_the_first() -> None:
    assert [make_backoff(lambda: 0.0).step(a) for a in (0, -3)] == [1000.0, 1000.0]


def test_zero_random_gives_the_exact_step() -> None:
    backoff = make_backoff(lambda: 0.0)
    assert [backoff(a) for a in range(1, 8)] == [
        1000.0, 2000.0, 4000.0, 8000.0, 16000.0, 30000.0, 30000.0]


def test_jitter_stays_below_thirty_percent() -> None:
    backoff = make_backoff(lambda: 0.9999999)
    for attempt in range(1, 10):
        step = backoff.step(attempt)
        assert step <= backoff(attempt) < step * 1.3


def test_jitter_on_the_cap_stays_below_39_s() -> None:
    assert 30000.0 <= make_backoff(lambda: 0.9999999)(50) < 39000.0


def test_half_random_adds_fifteen_percent() -> None:
    assert make_backoff(lambda: 0.5)(3) == pytest.approx(4600.0)


def test_negative_jitter_subtracts_up_to_twenty_percent() -> None:
    outbox_low = Backoff(jitter=-0.20, random=lambda: 0.9999999)
    outbox_high = Backoff(jitter=-0.20, random=lambda: 0.0)
    assert outbox_high(4) == 8000.0
    assert 8000.0 * 0.8 < outbox_low(4) <= 8000.0


def test_base_and_cap_are_configurable() -> None:
    backoff = Backoff(base_ms=10.0, cap_ms=50.0, random=lambda: 0.0)
    assert [backoff(a) for a in range(1, 6)] == [10.0, 20.0, 40.0, 50.0, 50.0]
