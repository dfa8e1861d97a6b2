"""One scheduling cycle, ``schedule(state, pending, config, now)``, as tables of scenarios."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.job import Job, PlacementPolicy
from corral.core.node import Device, Node, NodeState
from corral.scheduling.config import Policy, QueueConfig, SchedulerConfig
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.scheduling.framework import NodeRequest, Unschedulable
from corral.scheduling.placement import place_gang
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot
from tests.builders import GB, allocation, cluster, gpu_nodes, job, legacy, node

DEFAULT = legacy()  # the cycle's mechanics, strict order (the new defaults: test_jct.py)
SPREAD = legacy(placement=PlacementPolicy.SPREAD)


def run(state: ClusterState, jobs: Sequence[Job], config: SchedulerConfig = DEFAULT) -> Decisions:
    return schedule(state, list(jobs), config, now=100.0)


def placed(decisions: Decisions) -> dict[int, tuple[str, ...]]:
    """Job id -> its nodes in node-rank order."""
    return {a.job_id: a.nodes for a in decisions.placements}


def by_job(decisions: Decisions, job_id: int) -> Allocation:
    return next(a for a in decisions.placements if a.job_id == job_id)


def gpus_of(decisions: Decisions, job_id: int) -> list[tuple[str, tuple[int, ...]]]:
    return [(t.node, t.gpus) for t in by_job(decisions, job_id).tasks]


def one_node(gpus: int = 8, **kwargs: object) -> ClusterState:
    return cluster(*gpu_nodes(1, gpus, **kwargs))


# --- order: priority first, then submission time, then id ----------------------------------


@pytest.mark.parametrize(
    ("jobs", "winner", "positions"),
    [
        pytest.param(
            [job(1).gpus(8).priority(0).submitted(1), job(2).gpus(8).priority(10).submitted(9)],
            2,
            {1: 2},
            id="higher-priority-first-though-later",
        ),
        pytest.param(
            [job(1).gpus(8).priority(5).submitted(9), job(2).gpus(8).priority(5).submitted(1)],
            2,
            {1: 2},
            id="same-priority-earlier-submission-first",
        ),
        pytest.param(
            [job(7).gpus(8).submitted(3), job(4).gpus(8).submitted(3)],
            4,
            {7: 2},
            id="tie-broken-by-id",
        ),
        pytest.param(
            [
                job(1).gpus(8).priority(-5).submitted(0),
                job(2).gpus(8).priority(100).submitted(50),
                job(3).gpus(8).priority(100).submitted(20),
                job(4).gpus(8).priority(7).submitted(0),
            ],
            3,
            {2: 2, 4: 3, 1: 4},
            id="mixed",
        ),
    ],
)
def test_priority_then_submission_order(jobs: list, winner: int, positions: dict[int, int]) -> None:
    decisions = run(one_node(8), [j.build() for j in jobs])
    assert list(placed(decisions)) == [winner]
    assert {i: r.position for i, r in decisions.pending.items()} == positions


def test_input_order_does_not_matter() -> None:
    jobs = [job(i).gpus(2).priority(i % 3).submitted(10 - i).build() for i in range(1, 7)]
    forward = run(cluster(*gpu_nodes(2)), jobs)
    backward = run(cluster(*gpu_nodes(2)), list(reversed(jobs)))
    assert forward == backward
    assert [a.job_id for a in forward.placements] == [5, 2, 4, 1, 6, 3]


# --- gang: all tasks on all nodes, or nothing ----------------------------------------------

FULL_N0 = allocation(90).task("n0", gpus=range(8)).build()


@pytest.mark.parametrize(
    ("nodes", "held", "builder", "expected"),
    [
        pytest.param(
            gpu_nodes(2),
            [FULL_N0],
            job(1).gpus(8).nodes(2),
            None,
            id="one-of-two-free-places-nothing",
        ),
        pytest.param(
            gpu_nodes(3), [FULL_N0], job(1).gpus(8).nodes(2), ("n1", "n2"), id="two-free-of-three"
        ),
        pytest.param(
            gpu_nodes(2), [], job(1).gpus(8).nodes(2).tasks(8), ("n0", "n1"), id="two-full-nodes"
        ),
        pytest.param(
            gpu_nodes(2),
            [allocation(90).task("n0", gpus=[0, 1, 2, 3]).build()],
            job(1).gpus(4).nodes(2),
            ("n0", "n1"),
            id="half-of-each-fits",
        ),
        pytest.param(
            gpu_nodes(2),
            [allocation(90).task("n0", gpus=[0, 1, 2, 3, 4]).build()],
            job(1).gpus(4).nodes(2),
            None,
            id="one-node-short-by-one-gpu",
        ),
        pytest.param(
            gpu_nodes(4), [], job(1).gpus(1).nodes(4), ("n0", "n1", "n2", "n3"), id="four-small"
        ),
    ],
)
def test_gang_is_all_or_nothing(
    nodes: list[Node],
    held: list[Allocation],
    builder,
    expected: tuple[str, ...] | None,
) -> None:
    decisions = run(cluster(*nodes, allocations=held), [builder.build()])
    if expected is None:
        assert decisions.placements == ()
        assert 1 in decisions.pending
    else:
        assert placed(decisions) == {1: expected}
        assert decisions.pending == {}
        spec = builder.spec()
        assert len(by_job(decisions, 1).tasks) == spec.world_size


def test_blocked_gang_takes_nothing_from_the_snapshot() -> None:
    snapshot = Snapshot.build(gpu_nodes(2), [FULL_N0])
    before = {n: list(v.used_milli) for n, v in snapshot.nodes.items()}
    gang = job(1).gpus(8).nodes(2).build()
    request = NodeRequest.of(gang.spec, PlacementPolicy.BINPACK)
    outcome = place_gang(gang, request, snapshot, build_profile(DEFAULT))
    assert isinstance(outcome, Unschedulable)
    assert {n: list(v.used_milli) for n, v in snapshot.nodes.items()} == before


# --- strict order: a blocked head blocks every job behind it -------------------------------

HALF_HELD = [allocation(90).task("n0", gpus=[0, 1, 2, 3]).build()]


@pytest.mark.parametrize(
    ("jobs", "placed_ids", "behind"),
    [
        pytest.param([job(1).gpus(8), job(2).gpus(1)], [], {2: 1}, id="small-job-waits-behind-big"),
        pytest.param(
            [
                job(1).gpus(2).priority(9),
                job(2).gpus(8).priority(5),
                job(3).gpus(1),
                job(4).gpus(1),
            ],
            [1],
            {3: 2, 4: 2},
            id="blocker-is-the-first-that-failed",
        ),
        pytest.param(
            [job(1).gpus(8).priority(1), job(2).cpus(1)],
            [],
            {2: 1},
            id="cpu-only-job-waits-too",
        ),
        pytest.param(
            [job(1).gpus(2), job(2).gpus(1), job(3).gpus(1)], [1, 2, 3], {}, id="nothing-blocked"
        ),
    ],
)
def test_strict_order(jobs: list, placed_ids: list[int], behind: dict[int, int]) -> None:
    # one 8-GPU node with 4 GPUs held: every head job here could run once they are freed
    decisions = run(cluster(*gpu_nodes(1), allocations=HALF_HELD), [j.build() for j in jobs])
    assert sorted(placed(decisions)) == placed_ids
    for job_id, blocker in behind.items():
        assert decisions.pending[blocker].unresolvable is False
        reason = decisions.pending[job_id]
        assert reason.reason == f"waiting behind job {blocker} (ahead in priority order)"
        assert reason.unresolvable is False


# --- binpack and spread --------------------------------------------------------------------

HALF_USED = [allocation(90).task("n0", gpus=[0, 1, 2, 3]).build()]
SMALL_THEN_BIG = [job(1).gpus(4).priority(10), job(2).gpus(8)]


@pytest.mark.parametrize(
    ("config", "jobs", "expected", "pending"),
    [
        pytest.param(
            DEFAULT,
            SMALL_THEN_BIG,
            {1: ("n0",), 2: ("n1",)},
            [],
            id="binpack-keeps-empty-node-whole",
        ),
        pytest.param(SPREAD, SMALL_THEN_BIG, {1: ("n1",)}, [2], id="spread-breaks-the-empty-node"),
        pytest.param(
            SPREAD,
            [job(1).gpus(4).priority(10).placement("binpack"), job(2).gpus(8)],
            {1: ("n0",), 2: ("n1",)},
            [],
            id="job-placement-overrides-cluster",
        ),
        pytest.param(
            DEFAULT,
            [job(1).gpus(4).priority(10).placement("spread"), job(2).gpus(8)],
            {1: ("n1",)},
            [2],
            id="job-spread-overrides-binpack",
        ),
        pytest.param(
            SchedulerConfig(queues=(QueueConfig("default", placement=PlacementPolicy.SPREAD),)),
            SMALL_THEN_BIG,
            {1: ("n1",)},
            [2],
            id="queue-placement-overrides-cluster",
        ),
        pytest.param(DEFAULT, [job(1).gpus(2)], {1: ("n0",)}, [], id="binpack-fuller-node"),
        pytest.param(SPREAD, [job(1).gpus(2)], {1: ("n1",)}, [], id="spread-emptier-node"),
    ],
)
def test_binpack_and_spread(
    config: SchedulerConfig, jobs: list, expected: dict[int, tuple[str, ...]], pending: list[int]
) -> None:
    decisions = run(
        cluster(*gpu_nodes(2), allocations=HALF_USED), [j.build() for j in jobs], config
    )
    assert placed(decisions) == expected
    assert sorted(decisions.pending) == pending


@pytest.mark.parametrize(
    ("config", "nodes"),
    [
        pytest.param(DEFAULT, ("n0", "n0", "n0", "n0"), id="binpack-stacks"),
        pytest.param(SPREAD, ("n0", "n1", "n2", "n3"), id="spread-fans-out"),
    ],
)
def test_successive_small_jobs(config: SchedulerConfig, nodes: tuple[str, ...]) -> None:
    jobs = [job(i).gpus(1).build() for i in range(4)]
    decisions = run(cluster(*gpu_nodes(4)), jobs, config)
    assert tuple(placed(decisions)[i][0] for i in range(4)) == nodes


def test_cpu_only_binpack_uses_cpu_load() -> None:
    state = cluster(
        node("c0").cpus(16),
        node("c1").cpus(16),
        allocations=[allocation(90).task("c1", cpus=8).build()],
    )
    assert placed(run(state, [job(1).cpus(4).build()])) == {1: ("c1",)}
    assert placed(run(state, [job(1).cpus(4).build()], SPREAD)) == {1: ("c0",)}


# --- ranks and devices ---------------------------------------------------------------------

NVL2 = [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize(
    ("nodes", "tasks", "gpus"),
    [
        pytest.param(1, 1, 8, id="1x1"),
        pytest.param(1, 2, 8, id="1x2"),
        pytest.param(1, 8, 8, id="1x8"),
        pytest.param(2, 4, 8, id="2x4"),
        pytest.param(3, 2, 4, id="3x2-half-nodes"),
        pytest.param(4, 8, 8, id="4x8"),
        pytest.param(2, 3, 0, id="cpu-only-2x3"),
    ],
)
def test_ranks_and_disjoint_gpus(nodes: int, tasks: int, gpus: int) -> None:
    state = cluster(*gpu_nodes(4, 8, nvlink=NVL2))
    decisions = run(state, [job(1).gpus(gpus).nodes(nodes).tasks(tasks).build()])
    alloc = by_job(decisions, 1)
    assert len(alloc.tasks) == nodes * tasks
    assert [t.rank for t in alloc.tasks] == list(range(nodes * tasks))
    for t in alloc.tasks:
        assert t.rank == t.node_rank * tasks + t.local_rank
        assert alloc.nodes[t.node_rank] == t.node
        assert 0 <= t.local_rank < tasks
        assert len(t.gpus) == gpus // tasks
    for name in alloc.nodes:
        on_node = [i for t in alloc.tasks if t.node == name for i in t.gpus]
        assert len(on_node) == len(set(on_node)) == gpus
        if gpus // tasks <= 4:  # fits in one NVLink domain
            for t in alloc.tasks:
                if t.node == name:
                    assert len({i // 4 for i in t.gpus}) <= 1
    assert len(set(alloc.nodes)) == nodes


def test_allocation_carries_job_identity() -> None:
    built = job(5).gpus(1).priority(42).preemptible(False).attempt(3).build()
    alloc = by_job(run(one_node(), [built]), 5)
    assert (alloc.job_id, alloc.attempt, alloc.priority, alloc.preemptible) == (5, 3, 42, False)


def test_tasks_stay_in_one_nvlink_domain_and_keep_the_other_whole() -> None:
    state = cluster(
        node("n0").gpus(8, nvlink=NVL2),
        allocations=[allocation(90).task("n0", gpus=[0, 1]).build()],
    )
    decisions = run(state, [job(1).gpus(2).priority(1).build(), job(2).gpus(4).build()])
    assert gpus_of(decisions, 1) == [("n0", (2, 3))]
    assert gpus_of(decisions, 2) == [("n0", (4, 5, 6, 7))]


def test_task_spans_fewest_domains_when_none_fits() -> None:
    four_domains = [[0, 1], [2, 3], [4, 5], [6, 7]]
    state = cluster(
        node("n0").gpus(8, nvlink=four_domains),
        allocations=[allocation(90).task("n0", gpus=[0, 2, 4]).build()],
    )
    decisions = run(state, [job(1).gpus(3).build()])
    assert gpus_of(decisions, 1) == [("n0", (1, 6, 7))]


def test_cpus_and_memory_split_among_tasks() -> None:
    decisions = run(one_node(), [job(1).gpus(4).tasks(2).cpus(16).memory("64GB").build()])
    for t in by_job(decisions, 1).tasks:
        assert (t.cpus, t.memory, len(t.gpus), t.gpu_milli) == (8.0, 32 * GB, 2, 1000)


# --- filtering: labels, models, node state -------------------------------------------------

MIXED_POOLS = [
    node("a0").gpus(8, model="A100-80GB").labels(pool="a"),
    node("h0").gpus(8, model="H100-SXM").labels(pool="h"),
    node("h1").gpus(8, model="H100-SXM").labels(pool="h", rack="r1"),
]


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        pytest.param(job(1).gpus(4).selector(pool="a"), ("a0",), id="selector"),
        pytest.param(job(1).gpus(4).selector(pool="h", rack="r1"), ("h1",), id="two-labels"),
        pytest.param(job(1).gpus(4).model("A100*"), ("a0",), id="gpu-model-glob"),
        pytest.param(job(1).gpus("A100:4"), ("a0",), id="model-prefix-form"),
        pytest.param(job(1).gpus("H100:8").nodes(2), ("h0", "h1"), id="model-gang"),
        pytest.param(job(1).gpus(4).model("*80GB"), ("a0",), id="glob-suffix"),
    ],
)
def test_selector_and_model_filtering(builder, expected: tuple[str, ...]) -> None:
    assert placed(run(cluster(*MIXED_POOLS), [builder.build()])) == {1: expected}


@pytest.mark.parametrize(
    ("builder", "words"),
    [
        pytest.param(
            job(1).gpus(1).selector(pool="z"), "label pool=z does not match", id="no-label"
        ),
        pytest.param(job(1).gpus("V100:1"), "has 0 V100 GPUs, needs 1", id="no-model"),
        pytest.param(
            job(1).gpus("A100:8").nodes(2),
            "needs 2 nodes with 8 GPUs (A100)",
            id="too-few-of-model",
        ),
    ],
)
def test_impossible_filters_are_flagged_unresolvable(builder, words: str) -> None:
    decisions = run(cluster(*MIXED_POOLS), [builder.build()])
    reason = decisions.pending[1]
    assert reason.unresolvable is True
    assert reason.reason.startswith("cannot run on the ready nodes: ")
    assert words in reason.reason


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        pytest.param(
            (NodeState.DRAINING, NodeState.LOST, NodeState.READY), ("n2",), id="only-ready-node"
        ),
        pytest.param(
            (NodeState.DRAINING, NodeState.READY, NodeState.READY), ("n1",), id="skips-draining"
        ),
        pytest.param((NodeState.READY, NodeState.LOST, NodeState.LOST), ("n0",), id="skips-lost"),
        pytest.param((NodeState.DRAINING, NodeState.LOST, NodeState.LOST), None, id="none-ready"),
    ],
)
def test_draining_and_lost_nodes_get_no_work(
    states: tuple[NodeState, ...], expected: tuple[str, ...] | None
) -> None:
    # n0 is the fullest node, so binpack would choose it if its state allowed.
    nodes = [node(f"n{i}").gpus(8).state(s) for i, s in enumerate(states)]
    held = [allocation(90).task("n0", gpus=[0, 1, 2, 3]).build()]
    decisions = run(cluster(*nodes, allocations=held), [job(1).gpus(2).build()])
    if expected is None:
        reason = decisions.pending[1]
        assert reason.unresolvable  # blocks nobody: no completion on a ready node helps
        assert "node draining" in reason.reason and "node lost" in reason.reason
    else:
        assert placed(decisions) == {1: expected}


def test_draining_node_is_not_counted_for_a_gang() -> None:
    nodes = [node("n0").gpus(8).state(NodeState.DRAINING), node("n1").gpus(8)]
    decisions = run(cluster(*nodes), [job(1).gpus(8).nodes(2).build()])
    assert decisions.placements == ()
    assert "1 node: node draining" in decisions.pending[1].reason


# --- fractional GPUs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "held", "jobs", "expected", "pending"),
    [
        pytest.param(
            1,
            [],
            [job(1).gpus(0.5), job(2).gpus(0.5)],
            {1: [0], 2: [0]},
            [],
            id="two-halves-share-one",
        ),
        pytest.param(
            1,
            [],
            [job(1).gpus(0.4), job(2).gpus(0.4), job(3).gpus(0.4)],
            {1: [0], 2: [0]},
            [3],
            id="never-above-one",
        ),
        pytest.param(
            2,
            [],
            [job(1).gpus(0.4), job(2).gpus(0.4), job(3).gpus(0.4)],
            {1: [0], 2: [0], 3: [1]},
            [],
            id="third-share-on-next-device",
        ),
        pytest.param(
            2,
            [allocation(90).task("n0", gpus=[0]).build()],
            [job(1).gpus(0.25)],
            {1: [1]},
            [],
            id="not-beside-whole-task",
        ),
        pytest.param(
            1,
            [allocation(90).task("n0", gpus=[0]).build()],
            [job(1).gpus(0.25)],
            {},
            [1],
            id="only-device-is-whole",
        ),
        pytest.param(
            2,
            [allocation(90).task("n0", gpus=[0], share=0.25).build()],
            [job(1).gpus(1)],
            {1: [1]},
            [],
            id="whole-task-not-on-shared-device",
        ),
        pytest.param(
            2,
            [allocation(90).task("n0", gpus=[0], share=0.25).build()],
            [job(1).gpus(2)],
            {},
            [1],
            id="whole-job-needs-unshared-devices",
        ),
        pytest.param(
            2,
            [],
            [job(1).gpus(0.5).priority(2), job(2).gpus(1).priority(1), job(3).gpus(1)],
            {1: [0], 2: [1]},
            [3],
            id="share-then-whole-in-one-cycle",
        ),
    ],
)
def test_fractional_gpus(
    gpus: int,
    held: list[Allocation],
    jobs: list,
    expected: dict[int, list[int]],
    pending: list[int],
) -> None:
    built = {j.build().id: j.build() for j in jobs}
    decisions = run(cluster(*gpu_nodes(1, gpus), allocations=held), list(built.values()))
    got = {a.job_id: [i for t in a.tasks for i in t.gpus] for a in decisions.placements}
    assert got == expected
    assert sorted(decisions.pending) == pending
    for alloc in decisions.placements:
        (task,) = alloc.tasks
        assert task.gpu_milli == (built[alloc.job_id].spec.gpus.milli or 1000)


def test_fraction_reason_says_what_is_needed() -> None:
    held = [allocation(90).task("n0", gpus=[0], share=0.75).build()]
    decisions = run(cluster(*gpu_nodes(1, 1), allocations=held), [job(1).gpus(0.5).build()])
    reason = decisions.pending[1]
    assert reason.reason.startswith("waiting for resources: needs 1 node with 0.5 GPU")
    assert "no GPU with 0.5 free" in reason.reason
    assert not reason.unresolvable


@pytest.mark.parametrize(
    ("builder", "device"),
    [
        pytest.param(job(1).gpus("A100:0.5"), 1, id="model-prefix"),
        pytest.param(job(1).gpus(0.5).model("A100"), 1, id="gpu-model"),
        pytest.param(job(1).gpus("H100:0.5"), 0, id="other-model"),
        pytest.param(job(1).gpus(0.5).gpu_memory("60GB"), 0, id="memory"),
    ],
)
def test_fraction_lands_on_a_matching_device(builder, device: int) -> None:
    mixed = node("mx").devices(Device(0, "H100", 80 * GB), Device(1, "A100", 40 * GB))
    assert gpus_of(run(cluster(mixed), [builder.build()]), 1) == [("mx", (device,))]


# --- CPU-only jobs -------------------------------------------------------------------------


def test_cpu_only_job_gets_no_gpus() -> None:
    state = cluster(node("c0").cpus(16).memory("64GB"))
    decisions = run(state, [job(1).cpus(8).memory("32GB").tasks(2).build()])
    assert by_job(decisions, 1).tasks == (
        TaskAllocation(0, "c0", 0, 0, (), 1000, 4.0, 16 * GB),
        TaskAllocation(1, "c0", 0, 1, (), 1000, 4.0, 16 * GB),
    )


@pytest.mark.parametrize(
    ("jobs", "placed_ids", "words"),
    [
        pytest.param([job(1).cpus(8), job(2).cpus(8)], [1, 2], None, id="fills-exactly"),
        pytest.param([job(1).cpus(12), job(2).cpus(8)], [1], "4 of 8 CPUs free", id="cpus-busy"),
        pytest.param(
            [job(1).memory("48GB"), job(2).memory("32GB")],
            [1],
            "16GB of 32GB memory free",
            id="memory-busy",
        ),
        pytest.param([job(1).cpus(32)], [], "has 16 CPUs, needs 32", id="never-enough-cpus"),
    ],
)
def test_cpu_only_capacity(jobs: list, placed_ids: list[int], words: str | None) -> None:
    state = cluster(node("c0").cpus(16).memory("64GB"))
    decisions = run(state, [j.build() for j in jobs])
    assert sorted(placed(decisions)) == placed_ids
    if words:
        (first_pending,) = [
            r for r in decisions.pending.values() if "waiting behind" not in r.reason
        ]
        assert words in first_pending.reason


# --- pending reasons -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "builder", "start", "contains", "unresolvable"),
    [
        pytest.param(
            cluster(*gpu_nodes(2), allocations=[FULL_N0]),
            job(1).gpus(8).nodes(2),
            "waiting for resources: needs 2 nodes with 8 GPUs; ",
            ["1 node can host it now", "1 node: 0 of 8 GPUs free"],
            False,
            id="gang-short-of-free-nodes",
        ),
        pytest.param(
            cluster(*gpu_nodes(2)),
            job(1).gpus(9),
            "cannot run on the ready nodes: needs 1 node with 9 GPUs; ",
            ["2 nodes: has 8 GPUs, needs 9"],
            True,
            id="more-gpus-than-any-node",
        ),
        pytest.param(
            cluster(*gpu_nodes(1)),
            job(1).gpus(8).nodes(2),
            "cannot run on the ready nodes: needs 2 nodes with 8 GPUs; ",
            ["1 node can host it now"],
            True,
            id="more-nodes-than-cluster",
        ),
        pytest.param(
            cluster(),
            job(1).gpus(8).nodes(2),
            "waiting for nodes: needs 2 nodes with 8 GPUs; no node is registered",
            [],
            False,
            id="no-nodes-yet",
        ),
        pytest.param(
            cluster(*gpu_nodes(1)),
            job(1).gpus(1).cpus(200),
            "cannot run on the ready nodes: needs 1 node with 1 GPU, 200 CPUs; ",
            ["has 96 CPUs, needs 200"],
            True,
            id="cpus-in-the-need",
        ),
        pytest.param(
            cluster(*gpu_nodes(1), allocations=[FULL_N0]),
            job(1).gpus("H100:2").memory("10GB"),
            "waiting for resources: needs 1 node with 2 GPUs (H100), 10GB memory; ",
            ["0 of 2 GPUs free"],
            False,
            id="model-and-memory-in-the-need",
        ),
    ],
)
def test_pending_reasons_are_human(
    state: ClusterState, builder, start: str, contains: list[str], unresolvable: bool
) -> None:
    decisions = run(state, [builder.build()])
    reason = decisions.pending[1]
    assert reason.reason.startswith(start), reason.reason
    for words in contains:
        assert words in reason.reason, reason.reason
    assert reason.unresolvable is unresolvable
    assert reason.position == 1


def test_every_unplaced_job_has_a_reason_and_a_position() -> None:
    jobs = [job(i).gpus(4).priority(-i).build() for i in range(1, 6)]
    decisions = run(one_node(8), jobs)
    assert sorted(placed(decisions)) == [1, 2]
    assert sorted(decisions.pending) == [3, 4, 5]
    assert [decisions.pending[i].position for i in (3, 4, 5)] == [3, 4, 5]
    assert all(decisions.pending[i].reason for i in (3, 4, 5))
    assert decisions.preemptions == ()


def test_schedule_is_deterministic_and_leaves_inputs_alone() -> None:
    state = cluster(*gpu_nodes(3), allocations=HALF_USED)
    jobs = [job(i).gpus(i % 4 + 1).nodes(1 + i % 2).build() for i in range(8)]
    first = run(state, jobs)
    assert run(state, jobs) == first
    assert state == cluster(*gpu_nodes(3), allocations=HALF_USED)


def test_no_pending_jobs_no_decisions() -> None:
    assert run(one_node(), []) == Decisions()


# --- jobs the ready nodes can never host block nobody --------------------------------------


@pytest.mark.parametrize(
    ("head", "why"),
    [
        pytest.param(job(1).gpus(8).nodes(3).priority(50), "1 node: node draining", id="draining"),
        pytest.param(job(1).gpus(8).selector(pool="gone").priority(50), "label", id="labels"),
    ],
)
def test_unresolvable_head_does_not_block_the_queue(head, why: str) -> None:
    nodes = [node("n0").gpus(8), node("n1").gpus(8), node("n2").gpus(8).state(NodeState.DRAINING)]
    decisions = run(cluster(*nodes), [head.build(), job(2).gpus(8).build()])
    assert placed(decisions) == {2: ("n0",)} or placed(decisions) == {2: ("n1",)}
    assert decisions.pending[1].unresolvable
    assert why in decisions.pending[1].reason


# --- a caller-maintained snapshot gives the same decisions ----------------------------------


def test_a_persistent_snapshot_decides_like_a_fresh_one_cycle_after_cycle() -> None:
    nodes = [node(f"n{i}").gpus(8, nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]]).build() for i in range(4)]
    persistent = Snapshot(nodes)
    running: list[Allocation] = []
    queue = [job(i).gpus([1, 2, 4, 8][i % 4]).nodes(1 + (i % 5 == 0)).build() for i in range(1, 40)]
    for step in range(6):
        fresh = run(ClusterState(tuple(nodes), tuple(running)), queue)
        kept = run(ClusterState(tuple(nodes), tuple(running), snapshot=persistent), queue)
        assert kept == fresh
        placed_ids = {a.job_id for a in kept.placements}
        running += kept.placements
        queue = [j for j in queue if j.id not in placed_ids]
        # finish the oldest running job, as a caller would: release it from its snapshot
        if running and step % 2:
            persistent.release(running.pop(0))


def test_shortest_first_orders_by_expected_run_time_within_a_priority() -> None:
    config = SchedulerConfig(policy=Policy(order="shortest-first"))
    nodes = cluster(node("n0").gpus(8))
    queue = [
        job(1).gpus(8).runtime_estimate(3600).build(),
        job(2).gpus(8).runtime_estimate(60).build(),
        job(3).gpus(8).build(),  # no estimate: last
        job(4).gpus(8).runtime_estimate(7200).priority(500).build(),  # priority still first
    ]
    decisions = run(nodes, queue, config)
    assert placed(decisions) == {4: ("n0",)}
    order = sorted(decisions.pending.items(), key=lambda item: item[1].position)
    assert [job_id for job_id, _ in order] == [2, 1, 3]


# --- a job waiting for preempted jobs to exit keeps the nodes it will use -------------------


def test_job_awaiting_preempted_jobs_keeps_its_free_nodes_from_later_jobs() -> None:
    """Job 5 (2 nodes) will start on n0 (free) and n1 (job 3, preempted, still exiting):
    job 2, behind it in the order, must not take n0 meanwhile (else job 5 preempts again
    once job 3 exits, and so on: a preemption loop)."""
    exiting = allocation(3).task("n1", gpus=range(6)).build()
    state = cluster(*gpu_nodes(2), allocations=[exiting])
    state = ClusterState(state.nodes, state.allocations, preempting=frozenset({3}))
    pending = [
        job(5).gpus(8).nodes(2).priority(10).submitted(5).build(),
        job(2).gpus(8).priority(0).submitted(1).build(),
        job(4).gpus(2).priority(0).submitted(2).build(),
    ]
    decisions = run(state, pending)
    assert placed(decisions) == {}
    assert decisions.pending[5].reason.startswith("starts when job 3 (preempted) exit")
    assert "reserved for job 5" in decisions.pending[2].reason
