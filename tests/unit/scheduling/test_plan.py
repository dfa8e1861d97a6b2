"""The forward plan: estimated start times of blocked jobs, as running work ends."""

from __future__ import annotations

import math
import random

import pytest

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.node import Node
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.framework import NodeRequest
from corral.scheduling.placement import place_gang
from corral.scheduling.plan import earliest_start, estimate_starts, release_steps
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot
from tests.builders import allocation, gpu_nodes, job, legacy, node

NOW = 1000.0
STRICT = legacy()
BACKFILL = legacy(backfill=True)


def busy(job_id: int, node: str, ends: float, gpus: int = 8) -> Allocation:
    """``node``'s first ``gpus`` GPUs held by ``job_id`` until ``ends``."""
    return allocation(job_id).task(node, gpus=range(gpus)).ends(ends).build()


def plan(
    nodes: list[Node],
    running: list[Allocation],
    blocked: list[Job],
    config: SchedulerConfig = STRICT,
    **bounds: int,
) -> dict[int, float]:
    snapshot = Snapshot.build(nodes, running)
    starts = estimate_starts(
        snapshot, running, blocked, build_profile(config), config, NOW, **bounds
    )
    return {job_id: at - NOW for job_id, at in starts.items()}  # relative, for the tables


THREE = gpu_nodes(3)
# n0 busy until +100, n1 until +500, n2 free: a 2-node gang fits at +100 (n0 and n2)
STAGGERED = [busy(90, "n0", NOW + 100), busy(91, "n1", NOW + 500)]
GANG = job(1).gpus(8).nodes(2)


@pytest.mark.parametrize(
    ("nodes", "running", "blocked", "config", "expected"),
    [
        pytest.param(
            gpu_nodes(1),
            [busy(90, "n0", NOW + 100)],
            [job(1).gpus(8)],
            STRICT,
            {1: 100},
            id="waits-for-the-running-job",
        ),
        pytest.param(
            gpu_nodes(1),
            [busy(90, "n0", NOW + 100)],
            [job(1).gpus(8).runtime_estimate(50), job(2).gpus(8)],
            STRICT,
            {1: 100, 2: 150},
            id="the-next-job-sees-the-first-one's-planned-use",
        ),
        pytest.param(
            gpu_nodes(1),
            [busy(90, "n0", NOW + 100)],
            [job(1).gpus(8).time_limit(60), job(2).gpus(8)],
            STRICT,
            {1: 100, 2: 160},
            id="time-limit-as-the-estimate",
        ),
        pytest.param(
            gpu_nodes(1),
            [busy(90, "n0", NOW + 100)],
            [job(1).gpus(8), job(2).gpus(8)],
            STRICT,
            {1: 100},
            id="a-job-without-estimate-holds-its-gpus-for-good",
        ),
        pytest.param(
            gpu_nodes(1),
            [busy(90, "n0", math.inf)],
            [job(1).gpus(8)],
            STRICT,
            {},
            id="behind-work-without-an-end-no-estimate",
        ),
        pytest.param(
            gpu_nodes(1),
            [busy(90, "n0", NOW - 30)],
            [job(1).gpus(8)],
            STRICT,
            {1: 0},
            id="overdue-work-ends-now-never-in-the-past",
        ),
        pytest.param(
            gpu_nodes(2),
            [busy(90, "n0", NOW + 100), busy(91, "n1", NOW + 100, gpus=4)],
            [job(1).gpus(4)],
            STRICT,
            {1: 0},
            id="fits-now",
        ),
        pytest.param(
            THREE,
            STAGGERED,
            [GANG, job(2).gpus(8).runtime_estimate(50)],
            STRICT,
            {1: 100, 2: 500},
            id="strict-order-the-small-job-waits-behind-the-gang",
        ),
        pytest.param(
            THREE,
            STAGGERED,
            [GANG, job(2).gpus(8).runtime_estimate(50)],
            BACKFILL,
            {1: 100, 2: 0},
            id="backfill-a-job-that-ends-before-the-reservation-starts-now",
        ),
        pytest.param(
            THREE,
            STAGGERED,
            [GANG, job(2).gpus(8).runtime_estimate(500)],
            BACKFILL,
            {1: 100, 2: 500},
            id="backfill-never-delays-the-reservation",
        ),
        pytest.param(
            THREE,
            STAGGERED,
            [GANG.runtime_estimate(1000), job(2).gpus(8), job(3).gpus(8)],
            BACKFILL,
            {1: 100, 2: 500, 3: 1100},
            id="backfill-later-jobs-in-order-behind-the-gang",
        ),
        pytest.param(
            gpu_nodes(2),
            [busy(90, "n0", NOW + 100)],
            [job(1).gpus(16), job(2).gpus(8).runtime_estimate(10), job(3).gpus(8)],
            STRICT,
            {2: 0, 3: 10},
            id="a-job-that-can-never-run-blocks-nobody",
        ),
        pytest.param(
            gpu_nodes(2),
            [busy(90, "n0", NOW + 100), busy(91, "n1", math.inf)],
            [job(1).gpus(8).nodes(2), job(2).gpus(8)],
            BACKFILL,
            {2: 100},
            id="backfill-a-job-that-never-fits-reserves-nothing",
        ),
        pytest.param(
            gpu_nodes(2),
            [busy(90, "n0", NOW + 100), busy(91, "n1", math.inf)],
            [job(1).gpus(8).nodes(2), job(2).gpus(8)],
            STRICT,
            {},
            id="strict-order-everything-waits-behind-a-job-that-never-fits",
        ),
    ],
)
def test_estimated_starts(nodes, running, blocked, config, expected) -> None:
    jobs = [b.build() for b in blocked]
    assert plan(nodes, running, jobs, config) == expected


def test_only_the_first_limit_jobs_are_planned() -> None:
    jobs = [job(i).gpus(1).runtime_estimate(10).build() for i in range(1, 6)]
    assert plan(gpu_nodes(1), [busy(90, "n0", NOW + 100)], jobs, limit=2) == {1: 100, 2: 100}


def test_releases_past_max_steps_are_merged_and_estimates_err_late() -> None:
    running = [busy(90 + i, f"n{i}", NOW + 10 * (i + 1)) for i in range(10)]
    blocked = [job(1).gpus(8).build()]
    assert plan(gpu_nodes(10), running, blocked) == {1: 10}
    # 2 steps for 10 ends: the first releases 5 of them, at the latest of their ends
    assert plan(gpu_nodes(10), running, blocked, max_steps=2) == {1: 50}
    # one step in all: it releases everything at the last end, and nothing is planned past it
    two = [job(1).gpus(8).runtime_estimate(5).build(), job(2).gpus(8).nodes(10).build()]
    assert plan(gpu_nodes(10), running, two, max_steps=1) == {1: 100}
    assert plan(gpu_nodes(10), running, two, max_steps=3) == {1: 40, 2: 100}  # 4 a step


def _state(snapshot: Snapshot) -> list[tuple]:
    return [
        (v.name, list(v.used_milli), list(v.shared), v.free_cpus, v.free_memory, v.mig_used)
        for v in snapshot.views()
    ]


@pytest.mark.parametrize("config", [STRICT, BACKFILL], ids=["strict", "backfill"])
def test_the_snapshot_is_left_as_it_was(config: SchedulerConfig) -> None:
    running = [
        busy(90, "n0", NOW + 100),
        busy(91, "n1", NOW + 500, gpus=4),
        busy(92, "n2", math.inf, gpus=2),
        allocation(93).task("n3", gpus=[0], share=0.5, cpus=4).ends(NOW + 50).build(),
    ]
    snapshot = Snapshot.build(gpu_nodes(4), running)
    profile = build_profile(config)
    before = _state(snapshot)
    probe = job(99).gpus(2).build()  # fits: the same placement before and after
    request = NodeRequest.of(probe.spec, config.policy.placement)
    placed_before = place_gang(probe, request, snapshot, profile)
    blocked = [
        job(1).gpus(8).nodes(3).runtime_estimate(100).build(),
        job(2).gpus(4).runtime_estimate(30).build(),
        job(3).gpus(0.5).build(),
        job(4).gpus(8).nodes(2).build(),
    ]
    starts = estimate_starts(snapshot, running, blocked, profile, config, NOW)
    assert starts  # it planned something
    assert _state(snapshot) == before
    assert isinstance(placed_before, Allocation)
    assert place_gang(probe, request, snapshot, profile) == placed_before


@pytest.mark.parametrize(
    ("config", "follower_start"),
    [(STRICT, 500.0), (BACKFILL, 0.0)],
    ids=["strict", "backfill"],
)
def test_after_a_cycle_the_head_starts_when_its_reservation_says(
    config: SchedulerConfig, follower_start: float
) -> None:
    """End to end as the cycle will call it: schedule(), then estimate the jobs left."""
    state = ClusterState(tuple(THREE), tuple(STAGGERED))
    pending = [GANG.build(), job(2).gpus(8).runtime_estimate(50).build()]
    decisions = schedule(state, pending, config, NOW)
    placed = decisions.placements
    left = [j for j in pending if j.id in decisions.pending]
    snapshot = Snapshot.build(state.nodes, state.allocations + placed)
    starts = estimate_starts(
        snapshot, state.allocations + placed, left, build_profile(config), config, NOW
    )
    assert starts[1] == NOW + 100
    if config.policy.backfill:
        assert "expected in 1m40s" in decisions.pending[1].reason
        assert [a.job_id for a in placed] == [2]  # it backfilled: not left to estimate
        assert 2 not in starts
    else:
        assert starts[2] == NOW + follower_start


@pytest.mark.parametrize(
    ("ends", "batch", "expected"),
    [
        pytest.param([10, 20, 30], 1, [(10, 1), (20, 1), (30, 1)], id="one-per-end"),
        pytest.param([10, 10, 20], 1, [(10, 2), (20, 1)], id="equal-ends-together"),
        pytest.param([10, 20, 30, 40, 50], 2, [(20, 2), (40, 2), (50, 1)], id="batched"),
        pytest.param([10, 20, 20, 20, 30], 2, [(20, 4), (30, 1)], id="a-batch-keeps-equal-ends"),
        pytest.param([-10, 5], 1, [(0, 1), (5, 1)], id="never-before-now"),
        pytest.param([10, math.inf, math.inf], 1, [(10, 1), (math.inf, 2)], id="unknown-last"),
    ],
)
def test_release_steps(ends: list[float], batch: int, expected: list[tuple]) -> None:
    allocs = [busy(i, "n0", NOW + end, gpus=1) for i, end in enumerate(ends)]
    steps = [(at - NOW, len(group)) for at, group in release_steps(allocs, NOW, batch)]
    assert steps == expected


def test_earliest_start_restores_what_it_released() -> None:
    running = [busy(90, "n0", NOW + 100), busy(91, "n1", NOW + 200)]
    snapshot = Snapshot.build(gpu_nodes(2), running)
    profile = build_profile(STRICT)
    gang = job(1).gpus(8).nodes(2).build()
    request = NodeRequest.of(gang.spec, STRICT.policy.placement)
    before = _state(snapshot)
    tries: list[float] = []

    def place():  # type: ignore[no-untyped-def]
        tries.append(len(tries))
        return place_gang(gang, request, snapshot, profile)

    found = earliest_start(place, release_steps(running, NOW), snapshot.release)
    assert found is not None and found[0] == NOW + 200
    assert set(found[1].nodes) == {"n0", "n1"} and len(tries) == 2
    assert _state(snapshot) == before
    # may_fit skips trials; a job that can never fit stops the walk at once
    never = job(2).gpus(16).build()
    big = NodeRequest.of(never.spec, STRICT.policy.placement)
    tries.clear()
    assert (
        earliest_start(
            lambda: place_gang(never, big, snapshot, profile),
            release_steps(running, NOW),
            snapshot.release,
        )
        is None
    )
    assert (
        earliest_start(place, release_steps(running, NOW), snapshot.release, lambda: False) is None
    )
    assert tries == [] and _state(snapshot) == before


def _simulate(
    nodes: list[Node], running: list[Allocation], pending: list[Job], config: SchedulerConfig
) -> dict[int, float]:
    """When each job really starts if cycles run at every expected end, nothing new
    arrives and every job runs for exactly its estimate."""
    at, held, waiting, starts = NOW, list(running), list(pending), {}
    while waiting:
        decisions = schedule(ClusterState(tuple(nodes), tuple(held)), waiting, config, at)
        for placed in decisions.placements:
            starts[placed.job_id] = at
            held.append(placed)
        waiting = [j for j in waiting if j.id not in starts]
        later = [a.expected_end for a in held if at < a.expected_end < math.inf]
        if not later:
            break
        at = min(later)
        held = [a for a in held if a.expected_end > at]
    return starts


def _workload(seed: int) -> tuple[list[Node], list[Allocation], list[Job]]:
    rng = random.Random(seed)
    nodes = [node(f"n{i}").gpus(8).network("z", "s", f"l{i // 2}").build() for i in range(4)]
    running = []
    for i, each in enumerate(nodes):
        used = rng.choice([0, 2, 4, 8])
        if used:
            running.append(busy(900 + i, each.name, NOW + rng.choice([30, 60, 90, 120]), used))
    pending = []
    for job_id in range(1, 13):
        gpus, count = rng.choice([(1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (4, 2)])
        pending.append(
            job(job_id)
            .gpus(gpus)
            .nodes(count)
            .priority(rng.choice([0, 10]))
            .runtime_estimate(rng.choice([20, 45, 60, 100]))
            .build()
        )
    return nodes, running, pending


@pytest.mark.parametrize("config", [STRICT, BACKFILL], ids=["strict", "backfill"])
@pytest.mark.parametrize("seed", range(12))
def test_estimates_match_the_cycles_when_jobs_run_as_estimated(
    config: SchedulerConfig, seed: int
) -> None:
    """With no arrivals and exact estimates, the plan predicts the cycle's own starts."""
    nodes, running, pending = _workload(seed)
    real = _simulate(nodes, running, pending, config)
    decisions = schedule(ClusterState(tuple(nodes), tuple(running)), pending, config, NOW)
    held = tuple(running) + decisions.placements
    profile = build_profile(config)
    left = [
        j for j in sorted(pending, key=profile.queue_sort.sort_key) if j.id in decisions.pending
    ]
    snapshot = Snapshot.build(nodes, held)
    planned = estimate_starts(snapshot, held, left, profile, config, NOW)
    assert planned == {j.id: real[j.id] for j in left if j.id in real}


def test_without_look_ahead_budget_later_jobs_are_not_held_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocked = [GANG.build(), job(2).gpus(8).runtime_estimate(500).build()]
    assert plan(THREE, STAGGERED, blocked, BACKFILL) == {1: 100, 2: 500}
    monkeypatch.setattr("corral.scheduling.plan.LOOKAHEAD_FACTOR", 0)
    assert plan(THREE, STAGGERED, blocked, BACKFILL) == {1: 500, 2: 0}
