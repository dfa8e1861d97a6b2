"""Fair share: decayed usage, weighted dominant shares, and the order within a cycle."""

from __future__ import annotations

import math

import pytest

from corral.scheduling.fairshare import (
    Capacity,
    Usage,
    UsageLedger,
    accrued,
    decay,
    dominant_share,
    fair_order,
    weighted_share,
)
from tests.builders import GB, allocation, job

HOUR = 3600.0
CAPACITY = Capacity(gpus=64, cpus=1024, memory=8000 * GB)


@pytest.mark.parametrize(
    ("usage", "elapsed", "half_life", "expected"),
    [
        pytest.param(100.0, HOUR, HOUR, 50.0, id="one-half-life-halves"),
        pytest.param(100.0, 3 * HOUR, HOUR, 12.5, id="three-half-lives"),
        pytest.param(100.0, 0.0, HOUR, 100.0, id="no-time-no-decay"),
        pytest.param(100.0, HOUR, math.inf, 100.0, id="infinite-half-life-keeps-all"),
        pytest.param(100.0, HOUR, 0.0, 0.0, id="zero-half-life-forgets"),
    ],
)
def test_decay(usage: float, elapsed: float, half_life: float, expected: float) -> None:
    assert decay(usage, elapsed, half_life) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rate", "elapsed", "half_life"),
    [
        pytest.param(8.0, HOUR, HOUR, id="one-half-life"),
        pytest.param(1.0, 10 * HOUR, 2 * HOUR, id="long"),
        pytest.param(3.0, 60.0, 7 * 86400.0, id="short-against-a-week"),
    ],
)
def test_accrued_is_the_integral_of_constant_usage(
    rate: float, elapsed: float, half_life: float
) -> None:
    steps = 20_000  # midpoint rule: every slice decays from its midpoint to the end
    dt = elapsed / steps
    numeric = sum(rate * dt * 0.5 ** ((elapsed - (i + 0.5) * dt) / half_life) for i in range(steps))
    assert accrued(rate, elapsed, half_life) == pytest.approx(numeric, rel=1e-6)


def test_accrued_without_decay_is_rate_times_time() -> None:
    assert accrued(4.0, HOUR, math.inf) == 4.0 * HOUR


def test_ledger_advance_decays_and_adds_the_exact_integral() -> None:
    busy = allocation(1).task("n0", gpus=range(8), cpus=16).queue("a").started(0).build()
    ledger = UsageLedger.start(0.0, HOUR).advance(HOUR, [busy])
    assert ledger.of("a").gpu == pytest.approx(accrued(8, HOUR, HOUR))
    assert ledger.of("a").cpu == pytest.approx(accrued(16, HOUR, HOUR))
    idle = ledger.advance(2 * HOUR, [])
    assert idle.of("a").gpu == pytest.approx(ledger.of("a").gpu / 2)
    # split into two steps, the same as one
    stepped = UsageLedger.start(0.0, HOUR).advance(HOUR / 2, [busy]).advance(HOUR, [busy])
    assert stepped.of("a").gpu == pytest.approx(ledger.of("a").gpu)
    assert ledger.of("b") == Usage()


def test_ledger_advance_by_rates_equals_advance_by_allocations() -> None:
    busy = allocation(1).task("n0", gpus=range(8), cpus=16).queue("a").started(0).build()
    small = allocation(2).task("n1", gpus=[0]).queue("b").started(0).build()
    by_allocations = UsageLedger.start(0.0, HOUR).advance(HOUR, [busy, small])
    rates = {"a": Usage(8, 16, 0), "b": Usage(1, 0, 0), "c": Usage()}
    by_rates = UsageLedger.start(0.0, HOUR).advance_rates(HOUR, rates)
    for queue in ("a", "b", "c"):
        assert by_rates.of(queue).gpu == pytest.approx(by_allocations.of(queue).gpu)
        assert by_rates.of(queue).cpu == pytest.approx(by_allocations.of(queue).cpu)
    assert by_rates.advance_rates(HOUR, rates) is by_rates


def test_ledger_counts_an_allocation_from_its_start() -> None:
    late = allocation(1).task("n0", gpus=[0]).queue("a").started(HOUR / 2).build()
    ledger = UsageLedger.start(0.0, math.inf).advance(HOUR, [late])
    assert ledger.of("a").gpu == pytest.approx(HOUR / 2)
    assert ledger.advance(HOUR - 1, [late]) is ledger  # time does not run backwards


def test_dominant_share_takes_the_largest_resource() -> None:
    usage = Usage(gpu=16, cpu=512, memory=1000 * GB)
    assert dominant_share(usage, CAPACITY) == 0.5  # CPUs: 512 of 1024
    assert weighted_share(usage, CAPACITY, weight=2) == 0.25
    assert dominant_share(usage, Capacity(0, 0, 0)) == 0


def test_ledger_shares_are_fractions_of_the_cluster_over_the_mean_life() -> None:
    everything = allocation(1).task("n0", gpus=range(64)).queue("a").started(0).build()
    ledger = UsageLedger.start(0.0, HOUR).advance(1000 * HOUR, [everything])
    assert ledger.shares(CAPACITY)["a"] == pytest.approx(1.0)


def order_of(jobs, shares=None, weights=None) -> list[int]:  # noqa: ANN001
    built = [j.build() for j in jobs]
    return [j.id for j in fair_order(built, shares or {}, weights or {}, CAPACITY)]


def queue_jobs(queue: str, first_id: int, count: int, gpus: int = 1, priority: int = 0):  # noqa: ANN201
    return [
        job(first_id + i).gpus(gpus).queue(queue).priority(priority).submitted(i)
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("jobs", "shares", "weights", "expected"),
    [
        pytest.param(
            [job(1).queue("a").priority(0), job(2).queue("b").priority(10)],
            {"b": 0.9},
            {},
            [2, 1],
            id="priority-first-whatever-the-share",
        ),
        pytest.param(
            [job(1).gpus(1).queue("a").submitted(0), job(2).gpus(1).queue("b").submitted(5)],
            {"a": 0.5, "b": 0.1},
            {},
            [2, 1],
            id="lower-share-first",
        ),
        pytest.param(
            [job(1).gpus(1).queue("a").submitted(0), job(2).gpus(1).queue("b").submitted(5)],
            {"a": 0.5, "b": 0.3},
            {"a": 2.0},
            [1, 2],
            id="weight-divides-the-share",
        ),
        pytest.param(
            [job(3).gpus(1).queue("a").submitted(9), job(2).gpus(1).queue("a").submitted(1)],
            {},
            {},
            [2, 3],
            id="submission-time-within-a-queue",
        ),
        pytest.param(
            [job(5).gpus(1).queue("a").submitted(1), job(4).gpus(1).queue("a").submitted(1)],
            {},
            {},
            [4, 5],
            id="then-id",
        ),
        pytest.param(
            [*queue_jobs("a", 1, 2, gpus=8), *queue_jobs("b", 10, 4, gpus=2)],
            {},
            {},
            [1, 10, 11, 12, 13, 2],
            id="a-big-job-counts-for-its-size",
        ),
    ],
)
def test_fair_order(jobs, shares, weights, expected: list[int]) -> None:  # noqa: ANN001
    assert order_of(jobs, shares, weights) == expected


def test_weights_one_to_three_interleave_one_to_three() -> None:
    jobs = [*queue_jobs("a", 1, 100), *queue_jobs("b", 1001, 100)]
    order = order_of(jobs, weights={"a": 1.0, "b": 3.0})
    first = order[:40]
    from_b = sum(1 for i in first if i > 1000)
    assert from_b == 30
    for start in range(0, 40, 4):  # every window of four: one of a, three of b
        window = order[start : start + 4]
        assert sum(1 for i in window if i > 1000) == 3


def test_shares_carry_over_to_lower_priorities() -> None:
    jobs = [*queue_jobs("a", 1, 4, gpus=8, priority=5), job(9).gpus(1).queue("a").submitted(0)]
    jobs.append(job(10).gpus(1).queue("b").submitted(50))
    assert order_of(jobs) == [1, 2, 3, 4, 10, 9]  # a got 32 GPUs handed out above


def test_fair_order_scales_to_a_large_cycle() -> None:
    jobs = [
        job(i).gpus(1 + i % 8).queue(f"q{i % 50}").priority(i % 3).submitted(i).build()
        for i in range(20_000)
    ]
    weights = {f"q{i}": 1.0 + i % 4 for i in range(50)}
    order = fair_order(jobs, {}, weights, CAPACITY)  # a heap of 50 queue heads (bench/policy.py)
    assert len(order) == 20_000 and len({j.id for j in order}) == 20_000
    assert [j.priority for j in order] == sorted((j.priority for j in jobs), reverse=True)
