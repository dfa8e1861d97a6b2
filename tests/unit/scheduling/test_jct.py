"""The ``jct`` order (the default): expected size first, starvation guard, and preemption
for job completion time only where it pays."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.scheduling.config import JctPolicy, Policy, SchedulerConfig
from corral.scheduling.cycle import schedule
from corral.scheduling.plugins.jct import (
    ShortestExpectedFirst,
    expected_size,
    jct_victim,
    remaining_size,
    restore_cost,
    starving,
)
from tests.builders import allocation, cluster, job, node

NOW = 100_000.0
POLICY = JctPolicy()


def predicted(builder, seconds: float | None, ran: float = 0.0) -> Job:  # noqa: ANN001
    return replace(builder.build(), predicted_runtime=seconds, ran=ran)


@pytest.mark.parametrize(
    ("built", "size"),
    [
        pytest.param(job(1).gpus(2).runtime_estimate(100).build(), 200.0, id="estimate"),
        pytest.param(predicted(job(1).gpus(4), 50.0), 200.0, id="prediction"),
        pytest.param(predicted(job(1).gpus(1).time_limit(30), 50.0), 30.0, id="limit-caps"),
        pytest.param(predicted(job(1).gpus(1), 100.0, ran=40.0), 60.0, id="work-kept"),
        pytest.param(predicted(job(1).gpus(1), 100.0, ran=500.0), 500.0, id="outran-it"),
        pytest.param(job(1).gpus(1).build(), float("inf"), id="unknown"),
    ],
)
def test_expected_size(built: Job, size: float) -> None:
    assert expected_size(built) == size


def test_order_shortest_expected_first_then_submission() -> None:
    order = ShortestExpectedFirst()
    jobs = [
        predicted(job(1).gpus(8).submitted(0), 3600.0),  # 8 GPU-hours
        predicted(job(2).gpus(1).submitted(10), 600.0),
        job(3).gpus(1).submitted(5).build(),  # unknown: last
        predicted(job(4).gpus(1).submitted(20), 600.0),
    ]
    key = order.key_at(100.0)
    assert [j.id for j in sorted(jobs, key=key)] == [2, 4, 1, 3]
    assert [j.id for j in sorted(jobs, key=order.sort_key)] == [2, 4, 1, 3]


@pytest.mark.parametrize(
    ("seconds", "waited", "starved"),
    [
        pytest.param(60.0, 3000.0, False, id="short-job-under-the-floor"),
        pytest.param(60.0, 3600.0, True, id="short-job-at-the-floor"),
        pytest.param(3600.0, 8 * 3600.0 - 1, False, id="long-job-under-8x"),
        pytest.param(3600.0, 8 * 3600.0, True, id="long-job-at-8x"),
        pytest.param(None, 8 * 86400.0, True, id="unknown-counts-a-day"),
    ],
)
def test_starvation_guard(seconds: float | None, waited: float, starved: bool) -> None:
    waiting = predicted(job(1).gpus(1).submitted(NOW - waited), seconds)
    assert starving(waiting, NOW, POLICY) is starved
    fresh = predicted(job(2).gpus(1).submitted(NOW), 1.0)
    first = sorted([fresh, waiting], key=ShortestExpectedFirst().key_at(NOW))[0]
    assert (first.id == 1) is starved


def long_running(
    ends: float,
    checkpoint: float | None = NOW - 60,
    started: float = NOW - 7200,
    queue: str = "default",
    priority: int = 100,
    requeue: bool = True,
) -> Allocation:
    built = allocation(9).whole_node("n0", 8).priority(priority).queue(queue).started(started)
    if checkpoint is not None:
        built = built.checkpoint(checkpoint)
    return replace(built.build(), expected_end=ends, requeue=requeue)


SHORT = predicted(job(1).gpus(8).priority(100), 600.0)  # 8 x 600 = 4,800 GPU-s


@pytest.mark.parametrize(
    ("alloc", "eligible"),
    [
        pytest.param(long_running(NOW + 86400), True, id="far-longer-checkpointed"),
        pytest.param(long_running(NOW + 1200), False, id="not-margin-times-longer"),
        pytest.param(long_running(NOW + 86400, checkpoint=None), False, id="never-checkpointed"),
        pytest.param(long_running(NOW + 86400, started=NOW - 60), False, id="just-started"),
        pytest.param(long_running(NOW + 86400, queue="other"), False, id="other-queue"),
        pytest.param(long_running(NOW + 86400, priority=1000), False, id="higher-priority"),
        pytest.param(long_running(NOW - 10), True, id="overdue-counts-as-long-as-it-ran"),
        pytest.param(long_running(NOW + 86400, requeue=False), False, id="would-fail-not-requeue"),
    ],
)
def test_jct_victim(alloc: Allocation, eligible: bool) -> None:
    assert jct_victim(SHORT, alloc, NOW, POLICY) is eligible


def test_remaining_size_of_overdue_allocation() -> None:
    assert remaining_size(long_running(NOW - 10), NOW) == 8 * 7200.0


@pytest.mark.parametrize(
    ("gpus", "seconds"), [(1, 7.0), (0.5, 7.0), (4, 30.0), (8, 30.0), (16, 60.0)]
)
def test_restore_cost(gpus: float, seconds: float) -> None:
    assert restore_cost(gpus) == seconds


def test_short_job_preempts_far_longer_checkpointed_job_by_default() -> None:
    state = cluster(node("n0").gpus(8), allocations=[long_running(NOW + 86400)])
    decisions = schedule(state, [SHORT], SchedulerConfig(), NOW)
    assert [v for v, _ in decisions.preemptions] == [9]
    assert not decisions.placements
    why = decisions.preemptions[0][1]
    assert why.startswith("preempted for job 1 (equal priority 100, for completion time")
    assert "about 192.0 GPU-hours against 1.3" in why  # 8 GPUs x 24h left; 8 x 10m
    assert "loses 0.1 GPU-hours since its last checkpoint 1m00s ago" in why


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(SchedulerConfig(policy=Policy(jct=JctPolicy(preempt=False))), id="off"),
        pytest.param(SchedulerConfig(policy=Policy(preemption=False)), id="no-preemption"),
        pytest.param(SchedulerConfig(policy=Policy(order="fair-share")), id="fifo-order"),
    ],
)
def test_jct_preemption_can_be_turned_off(config: SchedulerConfig) -> None:
    state = cluster(node("n0").gpus(8), allocations=[long_running(NOW + 86400)])
    assert not schedule(state, [SHORT], config, NOW).preemptions


def test_job_without_checkpoints_is_never_a_jct_victim() -> None:
    state = cluster(node("n0").gpus(8), allocations=[long_running(NOW + 86400, checkpoint=None)])
    assert not schedule(state, [SHORT], SchedulerConfig(), NOW).preemptions
