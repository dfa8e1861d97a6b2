"""corral.retry.backoff: exponential growth, a cap, and full jitter within the bounds."""

from __future__ import annotations

import random

import pytest

from corral.retry import backoff


@pytest.mark.parametrize(
    ("attempt", "ceiling"), [(1, 0.25), (2, 0.5), (3, 1.0), (4, 2.0), (5, 4.0), (6, 5.0)]
)
def test_the_ceiling_doubles_up_to_the_cap(attempt: int, ceiling: float) -> None:
    assert backoff(attempt, 0.25, 5.0, draw=lambda: 0.0) == 0.0
    almost_one = 1.0 - 2**-53  # random.random()'s largest value
    assert backoff(attempt, 0.25, 5.0, draw=lambda: almost_one) == pytest.approx(ceiling)


def test_pauses_are_spread_over_the_whole_range() -> None:
    rng = random.Random(1)
    pauses = [backoff(3, 0.5, 10.0, draw=rng.random) for _ in range(2000)]
    assert all(0.0 <= p < 2.0 for p in pauses)
    assert min(pauses) < 0.1 and max(pauses) > 1.9  # full jitter: from 0 to the ceiling
    assert len({round(p, 6) for p in pauses}) > 1900  # no two agents in step


def test_a_long_outage_stays_at_the_cap() -> None:
    assert backoff(10_000, 0.2, 5.0, draw=lambda: 0.5) == 2.5
    assert 0.0 <= backoff(10_000, 0.2, 5.0) < 5.0  # the default draw


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        backoff(0, 0.2, 5.0)
