"""Preemption events say why: the victim's lost work, why it was eligible and chosen."""

from __future__ import annotations

import math

import pytest

from corral.core.allocation import Allocation
from corral.scheduling.config import Policy, QueueConfig, SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.plugins.preemption_reasons import (
    choice,
    eligibility,
    explain_victim,
    lost_work,
)
from corral.scheduling.plugins.victims import Plan, Victim
from tests.builders import allocation, gpu_nodes, job

NOW = 100_000.0
HOUR = 3600.0
PREEMPT = SchedulerConfig(policy=Policy(order="priority-fifo", backfill=False, preemption=True))


def running(
    job_id: int,
    node: str,
    started: float | None,
    checkpoint: float | None = None,
    priority: int = 100,
    queue: str = "default",
    gpus: int = 8,
) -> Allocation:
    alloc = allocation(job_id).task(node, gpus=range(gpus)).priority(priority).queue(queue)
    alloc = alloc.started(started) if started is not None else alloc
    return (alloc.checkpoint(checkpoint) if checkpoint is not None else alloc).build()


@pytest.mark.parametrize(
    ("alloc", "expected"),
    [
        pytest.param(
            running(10, "n0", NOW - 2 * HOUR, checkpoint=NOW - HOUR / 2),
            "loses 4.0 GPU-hours since its last checkpoint 30m00s ago",
            id="since-its-checkpoint",
        ),
        pytest.param(
            running(10, "n0", NOW - 600),
            "never checkpointed: loses 1.3 GPU-hours since its start 10m00s ago",
            id="never-checkpointed",
        ),
        pytest.param(
            running(10, "n0", NOW - 60, gpus=1),
            "never checkpointed: loses 0.02 GPU-hours since its start 1m00s ago",
            id="little-work-keeps-two-digits",
        ),
        pytest.param(
            running(10, "n0", NOW - HOUR, checkpoint=math.inf),
            "loses nothing: it saves its state when signalled",
            id="saves-when-signalled",
        ),
        pytest.param(
            running(10, "n0", None),
            "never checkpointed; its start, and so the work it loses, is unknown",
            id="start-unknown",
        ),
    ],
)
def test_lost_work(alloc: Allocation, expected: str) -> None:
    assert lost_work(alloc, NOW) == expected


def victim(priority: int = 100, loss_hours: float = 1.0, **kind: bool) -> Victim:
    alloc = running(10, "n0", NOW - HOUR, priority=priority, queue="b")
    return Victim(alloc, loss_hours * HOUR, **kind)


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        pytest.param(victim(), "priority 1000 > 100", id="lower-priority"),
        pytest.param(
            victim(reclaim=True),
            "reclaimed: queue b borrows beyond its quota",
            id="reclaim-names-the-borrower",
        ),
        pytest.param(
            victim(priority=1000, for_jct=True),
            "equal priority 1000, for completion time: it has far more work left",
            id="for-completion-time",
        ),
    ],
)
def test_eligibility(chosen: Victim, expected: str) -> None:
    assert eligibility(job(1).priority(1000).build(), chosen) == expected


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        pytest.param(Plan((victim(),), ("n0",)), "the only candidate set", id="only-one"),
        pytest.param(
            Plan((victim(),), ("n0",), candidates=4, runner_up=(100, 3 * HOUR, 2)),
            "chosen as the cheapest of 4 candidate sets (the next would lose 3.0 GPU-hours "
            "over 2 jobs)",
            id="the-next-loses-more",
        ),
        pytest.param(
            Plan((victim(),), ("n0",), candidates=3, runner_up=(500, 0.5 * HOUR, 1)),
            "chosen as the cheapest of 3 candidate sets (the next would preempt priority 500 "
            "and lose 0.5 GPU-hours over 1 job)",
            id="the-next-preempts-higher-priority",
        ),
        pytest.param(
            Plan((victim(),), ("n0",), candidates=4, passed=2),
            "chosen as the cheapest of 4 candidate sets that let it start (2 cheaper ones did not)",
            id="cheaper-ones-did-not-fit",
        ),
    ],
)
def test_choice(plan: Plan, expected: str) -> None:
    assert choice(plan) == expected


def test_explain_victim_takes_the_reason_for_eligibility() -> None:
    line = explain_victim(3, "why it may go", "loses 1.0 GPU-hours", "the only one")
    assert line == "preempted for job 3 (why it may go): loses 1.0 GPU-hours; the only one"
    line = explain_victim(3, "why", "loses nothing", "")
    assert line == "preempted for job 3 (why): loses nothing"


def test_the_cycle_records_why_each_victim_was_chosen() -> None:
    held = [
        running(10, "n0", NOW - 2 * HOUR, checkpoint=NOW - HOUR / 2),  # loses 4.0
        running(11, "n1", NOW - HOUR),  # 8.0
        running(12, "n2", NOW - 3 * HOUR, checkpoint=NOW - HOUR / 4),  # 2.0
        running(13, "n3", NOW - 600),  # 1.3: the cheapest
    ]
    pending = [job(1).gpus(8).priority(1000).build()]
    decisions = schedule(ClusterState(tuple(gpu_nodes(4)), tuple(held)), pending, PREEMPT, NOW)
    assert decisions.preemptions == (
        (
            13,
            "preempted for job 1 (priority 1000 > 100): never checkpointed: loses 1.3 "
            "GPU-hours since its start 10m00s ago; chosen as the cheapest of 4 candidate sets "
            "(the next would lose 2.0 GPU-hours over 1 job)",
        ),
    )


def test_a_reclaimed_victim_says_its_queue_borrows() -> None:
    config = SchedulerConfig(
        queues=(
            QueueConfig("a", quota=(("gpus", 8.0),), cohort="lab"),
            QueueConfig("b", quota=(("gpus", 8.0),), cohort="lab"),
        ),
        policy=PREEMPT.policy,
    )
    held = [
        running(20, "n0", NOW - HOUR, queue="b", priority=100),
        running(21, "n1", NOW - HOUR, queue="b", priority=100, checkpoint=NOW - 60),
    ]
    pending = [job(1).gpus(8).queue("a").priority(0).build()]
    decisions = schedule(ClusterState(tuple(gpu_nodes(2)), tuple(held)), pending, config, NOW)
    [(victim_id, why)] = decisions.preemptions
    assert victim_id == 21
    assert why == (
        "preempted for job 1 (reclaimed: queue b borrows beyond its quota): loses 0.1 "
        "GPU-hours since its last checkpoint 1m00s ago; chosen as the cheapest of 2 candidate "
        "sets (the next would lose 8.0 GPU-hours over 1 job)"
    )
