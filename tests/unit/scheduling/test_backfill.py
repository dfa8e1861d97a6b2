"""EASY backfill: later jobs start early only when they cannot delay the first blocked job."""

from __future__ import annotations

import math

import pytest

from corral.core.allocation import Allocation
from corral.scheduling.cycle import ClusterState, schedule
from tests.builders import allocation, job, legacy, node

BACKFILL = legacy(backfill=True)
NOW = 1000.0


def running(job_id: int, node_name: str, gpus: int, ends: float) -> Allocation:
    alloc = allocation(job_id)
    for i in range(gpus):
        alloc = alloc.task(node_name, gpus=[i])
    built = alloc.build()
    return Allocation(built.job_id, built.attempt, built.tasks, expected_end=ends)


def cluster_with(*allocs: Allocation) -> ClusterState:
    nodes = tuple(node(f"n{i}").gpus(8).build() for i in range(3))
    return ClusterState(nodes, allocs)


# n0 busy until NOW+100, n1 busy until NOW+500, n2 free: a 2-node gang reserves n0 and n2
# at NOW+100 (the earliest moment two whole nodes are free).
BUSY = (running(90, "n0", 8, NOW + 100), running(91, "n1", 8, NOW + 500))
GANG = job(1).gpus(8).nodes(2).priority(10)


@pytest.mark.parametrize(
    ("follower", "placed_on"),
    [
        pytest.param(job(2).gpus(8).runtime_estimate(50), "n2", id="ends-before-the-reservation"),
        pytest.param(job(2).gpus(8).runtime_estimate(500), None, id="would-delay-the-gang"),
        pytest.param(job(2).gpus(8), None, id="no-estimate-runs-forever"),
        pytest.param(job(2).gpus(8).time_limit(60), "n2", id="time-limit-as-estimate"),
    ],
)
def test_followers_backfill_only_when_they_end_in_time(follower, placed_on: str | None) -> None:
    decisions = schedule(cluster_with(*BUSY), [GANG.build(), follower.build()], BACKFILL, NOW)
    placed = {a.job_id: a.nodes for a in decisions.placements}
    assert 1 not in placed
    assert placed.get(2) == ((placed_on,) if placed_on else None)
    head = decisions.pending[1].reason
    assert head.startswith("next to start: n0, n2 reserved for it, expected in 1m40s")
    if placed_on is None:
        assert "reserved for job 1" in decisions.pending[2].reason


def test_without_backfill_everything_waits_behind_the_head() -> None:
    follower = job(2).gpus(8).runtime_estimate(50).build()
    decisions = schedule(cluster_with(*BUSY), [GANG.build(), follower], legacy(), NOW)
    assert decisions.placements == ()
    assert decisions.pending[2].reason == "waiting behind job 1 (ahead in priority order)"


def test_one_reservation_only_later_blocked_jobs_do_not_reserve() -> None:
    second = job(2).gpus(8).nodes(3).priority(5)
    third = job(3).gpus(8).runtime_estimate(50)
    decisions = schedule(
        cluster_with(*BUSY), [GANG.build(), second.build(), third.build()], BACKFILL, NOW
    )
    assert [a.job_id for a in decisions.placements] == [3]
    assert "reserved" not in decisions.pending[2].reason.split(";")[0]


def test_unknown_end_times_still_reserve_nodes_for_the_head() -> None:
    busy = (running(90, "n0", 8, math.inf), running(91, "n1", 8, math.inf))
    follower = job(2).gpus(8).build()
    decisions = schedule(cluster_with(*busy), [GANG.build(), follower], BACKFILL, NOW)
    assert decisions.placements == ()
    assert "when running jobs without estimates end" in decisions.pending[1].reason


def test_placements_carry_their_expected_end() -> None:
    decisions = schedule(
        cluster_with(), [job(1).gpus(1).runtime_estimate(30).build()], BACKFILL, NOW
    )
    assert decisions.placements[0].expected_end == NOW + 30
