"""Submission-time check: ``never_fits`` refuses what no node could ever host, and says why."""

from __future__ import annotations

import pytest

from corral.core.node import Node, NodeState
from corral.errors import ValidationError
from corral.scheduling.config import QueueConfig, SchedulerConfig
from corral.scheduling.feasibility import never_fits, node_shapes
from tests.builders import JobBuilder, NodeBuilder, gpu_nodes, job, node

DEFAULT = SchedulerConfig()
H100_POOL = [
    node("h0").gpus(8, model="H100-SXM").labels(pool="h"),
    node("h1").gpus(8, model="H100-SXM").labels(pool="h").state(NodeState.DRAINING),
    node("a0").gpus(4, model="A100").cpus(32).labels(pool="a").state(NodeState.LOST),
]


def built(nodes: list[Node | NodeBuilder]) -> list[Node]:
    return [n.build() if isinstance(n, NodeBuilder) else n for n in nodes]


@pytest.mark.parametrize(
    ("nodes", "builder"),
    [
        pytest.param([], job(1).gpus(64).nodes(100), id="no-nodes-registered-yet"),
        pytest.param(gpu_nodes(2), job(1).gpus(8).nodes(2), id="exact-fit"),
        pytest.param(gpu_nodes(2), job(1).gpus(0.5), id="fraction"),
        pytest.param(gpu_nodes(1), job(1).cpus(96).memory("1TB"), id="all-cpus-and-memory"),
        pytest.param(H100_POOL, job(1).gpus("H100:8").nodes(2), id="draining-node-still-counts"),
        pytest.param(H100_POOL, job(1).gpus(4).selector(pool="a"), id="lost-node-still-counts"),
        pytest.param(H100_POOL, job(1).gpus(4).model("A100*"), id="model-glob"),
    ],
)
def test_accepts_what_could_run_some_day(nodes: list, builder: JobBuilder) -> None:
    assert never_fits(builder.spec(), node_shapes(built(nodes)), DEFAULT) is None


@pytest.mark.parametrize(
    ("nodes", "builder", "parts"),
    [
        pytest.param(
            gpu_nodes(2),
            job(1).gpus(9),
            [
                "needs 1 node with 9 GPUs (the largest node has 8 GPUs)",
                "only 0 of 2 nodes could ever host it",
                "has 8 GPUs, needs 9",
            ],
            id="nine-gpus-on-eight-gpu-nodes",
        ),
        pytest.param(
            gpu_nodes(2),
            job(1).gpus(8).nodes(3),
            ["needs 3 nodes with 8 GPUs", "only 2 of 2 nodes could ever host it"],
            id="more-nodes-than-cluster",
        ),
        pytest.param(
            H100_POOL,
            job(1).gpus("H100:8").nodes(3),
            ["needs 3 nodes with 8 GPUs (H100)", "only 2 of 3", "has 0 H100 GPUs, needs 8"],
            id="model-limits-the-nodes",
        ),
        pytest.param(
            H100_POOL,
            job(1).gpus(1).selector(pool="z"),
            ["only 0 of 3", "label pool=z does not match"],
            id="selector-matches-nothing",
        ),
        pytest.param(
            H100_POOL,
            job(1).gpus(8).selector(pool="a"),
            ["(the largest node has 8 GPUs)", "has 4 GPUs, needs 8"],
            id="selector-and-capacity",
        ),
        pytest.param(
            gpu_nodes(1),
            job(1).cpus(500),
            ["needs 1 node with 500 CPUs", "has 96 CPUs, needs 500"],
            id="too-many-cpus",
        ),
        pytest.param(
            gpu_nodes(1),
            job(1).gpus("V100:0.5"),
            ["0.5 GPU (V100)", "has no matching GPU to share"],
            id="fraction-of-missing-model",
        ),
    ],
)
def test_refuses_what_can_never_run(nodes: list, builder: JobBuilder, parts: list[str]) -> None:
    why = never_fits(builder.spec(), node_shapes(built(nodes)), DEFAULT)
    assert why is not None
    assert why.startswith("can never fit this cluster: ")
    for part in parts:
        assert part in why, why


@pytest.mark.parametrize(
    ("config", "queue", "nodes"),
    [
        pytest.param(DEFAULT, "team-a", gpu_nodes(1), id="unknown-queue"),
        pytest.param(DEFAULT, "team-a", [], id="unknown-queue-without-nodes"),
        pytest.param(
            SchedulerConfig(queues=(QueueConfig("team-a"),)),
            "default",
            gpu_nodes(1),
            id="default-queue-not-configured",
        ),
    ],
)
def test_unknown_queue_is_a_validation_error(
    config: SchedulerConfig, queue: str, nodes: list[Node]
) -> None:
    with pytest.raises(ValidationError, match=f"unknown queue '{queue}'"):
        never_fits(job(1).gpus(1).queue(queue).spec(), node_shapes(nodes), config)


def test_node_shapes_group_alike_nodes_whatever_their_names() -> None:
    nodes = [*gpu_nodes(3), node("cpu").cpus(4).build()]
    shapes = node_shapes(iter(nodes))
    assert sorted(count for _, count in shapes) == [1, 3]
    assert never_fits(job(1).gpus(8).nodes(3).spec(), shapes, DEFAULT) is None
    assert "only 3 of 4 nodes" in never_fits(job(1).gpus(8).nodes(4).spec(), shapes, DEFAULT)


PAIRS = [[0, 1], [2, 3], [4, 5], [6, 7]]  # NVLink domains of 2 GPUs
NVLINK_PAIRS = [node("p0").gpus(8, nvlink=PAIRS), node("p1").gpus(8, nvlink=PAIRS)]
NVLINK_MIXED = [
    *NVLINK_PAIRS,
    node("q0").gpus(8, model="A100", nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]]).labels(pool="a"),
]


@pytest.mark.parametrize(
    ("nodes", "builder", "refused"),
    [
        pytest.param(
            NVLINK_PAIRS,
            job(1).gpus(4).topology("nvlink", "required"),
            "can never fit this cluster: topology: nvlink required: 4 GPUs per node in one "
            "NVLink domain, but the largest NVLink domain of any node that could host it holds 2",
            id="required-4-on-domains-of-2",
        ),
        pytest.param(
            NVLINK_PAIRS, job(1).gpus(2).topology("nvlink", "required"), None, id="required-2"
        ),
        pytest.param(
            NVLINK_PAIRS,
            job(1).gpus(4).topology("nvlink", "preferred"),
            None,
            id="preferred-may-span-domains",
        ),
        pytest.param(
            NVLINK_MIXED,
            job(1).gpus(4).topology("nvlink", "required"),
            None,
            id="one-node-has-a-domain-of-4",
        ),
        pytest.param(
            NVLINK_MIXED,
            job(1).gpus("H100:4").topology("nvlink", "required"),
            "holds 2",
            id="the-domain-of-4-is-another-model",
        ),
        pytest.param(
            NVLINK_MIXED,
            job(1).gpus(4).topology("nvlink", "required").selector(pool="b"),
            "label pool=b does not match",
            id="no-node-at-all-says-so-first",
        ),
        pytest.param(
            gpu_nodes(1), job(1).gpus(8).topology("nvlink", "required"), None, id="one-domain"
        ),
    ],
)
def test_required_nvlink_needs_a_large_enough_domain(
    nodes: list, builder: JobBuilder, refused: str | None
) -> None:
    why = never_fits(builder.spec(), node_shapes(built(nodes)), DEFAULT)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why, why
