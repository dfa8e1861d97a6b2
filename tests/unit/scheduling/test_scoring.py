"""Packing score: binpack prefers the fuller node, spread the emptier one."""

from __future__ import annotations

import pytest

from corral.core.allocation import Allocation
from corral.core.job import PlacementPolicy
from corral.core.node import Node
from corral.scheduling.framework import NodeRequest
from corral.scheduling.plugins.scoring import PackingScore, utilization_after
from corral.scheduling.snapshot import NodeView, Snapshot
from tests.builders import JobBuilder, allocation, job, node

GPU8 = node("g").gpus(8).build()
CPU16 = node("c").cpus(16).build()
BARE = node("b").cpus(0).memory(0).build()


def view(target: Node, *held: Allocation) -> NodeView:
    return Snapshot.build([target], held).nodes[target.name]


def request(builder: JobBuilder, placement: PlacementPolicy) -> NodeRequest:
    return NodeRequest.of(builder.spec(), placement)


@pytest.mark.parametrize(
    ("builder", "target", "held", "utilization"),
    [
        pytest.param(job(1).gpus(2), GPU8, (), 0.25, id="two-of-eight"),
        pytest.param(
            job(1).gpus(2),
            GPU8,
            (allocation(9).task("g", gpus=[0, 1, 2, 3]).build(),),
            0.75,
            id="on-half-full",
        ),
        pytest.param(job(1).gpus(8), GPU8, (), 1.0, id="fills-node"),
        pytest.param(job(1).gpus(0.5), GPU8, (), 0.0625, id="fraction"),
        pytest.param(
            job(1).gpus(0.25),
            GPU8,
            (allocation(9).task("g", gpus=[0], share=0.5).build(),),
            0.09375,
            id="fraction-on-share",
        ),
        pytest.param(job(1).cpus(4), GPU8, (), 0.0, id="cpu-job-on-gpu-node-counts-gpus"),
        pytest.param(job(1).cpus(4), CPU16, (), 0.25, id="cpu-node-counts-cpus"),
        pytest.param(
            job(1).cpus(4),
            CPU16,
            (allocation(9).task("c", cpus=8).build(),),
            0.75,
            id="cpu-node-half-used",
        ),
        pytest.param(job(1).cpus(64), CPU16, (), 1.0, id="capped-at-one"),
        pytest.param(job(1), BARE, (), 0.0, id="node-without-resources"),
    ],
)
def test_utilization_after(
    builder: JobBuilder, target: Node, held: tuple[Allocation, ...], utilization: float
) -> None:
    assert utilization_after(
        request(builder, PlacementPolicy.BINPACK), view(target, *held)
    ) == pytest.approx(utilization)


HALF_FULL = (allocation(9).task("g", gpus=[0, 1, 2, 3]).build(),)


@pytest.mark.parametrize(
    ("placement", "held", "score"),
    [
        pytest.param(PlacementPolicy.BINPACK, (), 25.0, id="binpack-empty"),
        pytest.param(PlacementPolicy.BINPACK, HALF_FULL, 75.0, id="binpack-half-full"),
        pytest.param(PlacementPolicy.SPREAD, (), 75.0, id="spread-empty"),
        pytest.param(PlacementPolicy.SPREAD, HALF_FULL, 25.0, id="spread-half-full"),
    ],
)
def test_packing_score(
    placement: PlacementPolicy, held: tuple[Allocation, ...], score: float
) -> None:
    got = PackingScore().score(request(job(1).gpus(2), placement), view(GPU8, *held))
    assert got == pytest.approx(score)


@pytest.mark.parametrize(
    ("placement", "preferred"),
    [
        pytest.param(PlacementPolicy.BINPACK, "fuller", id="binpack-prefers-fuller"),
        pytest.param(PlacementPolicy.SPREAD, "emptier", id="spread-prefers-emptier"),
    ],
)
def test_policy_picks_the_preferred_node(placement: PlacementPolicy, preferred: str) -> None:
    fuller = node("fuller").gpus(8).build()
    emptier = node("emptier").gpus(8).build()
    snapshot = Snapshot.build(
        [fuller, emptier],
        [
            allocation(8).task("fuller", gpus=[0, 1, 2, 3, 4]).build(),
            allocation(9).task("emptier", gpus=[0]).build(),
        ],
    )
    scorer = PackingScore()
    req = request(job(1).gpus(2), placement)
    best = max(snapshot.views(), key=lambda v: scorer.score(req, v))
    assert best.name == preferred


def test_weight_defaults_to_one_and_is_settable() -> None:
    assert PackingScore().weight == 1.0
    assert PackingScore(weight=3.0).weight == 3.0
