"""Built-in filters and their pure helpers: capacity (ever), free (now), state, labels."""

from __future__ import annotations

import pytest

from corral.core.allocation import Allocation
from corral.core.job import PlacementPolicy
from corral.core.node import Device, Node, NodeState
from corral.scheduling.framework import NodeRequest, Unresolvable, Unschedulable
from corral.scheduling.plugins.filters import (
    NodeSelectorFilter,
    NodeStateFilter,
    ResourceFitFilter,
    fits_capacity,
    fits_free,
)
from corral.scheduling.snapshot import NodeView, Snapshot
from tests.builders import GB, JobBuilder, allocation, job, node

H100x8 = node("n0").gpus(8, model="H100-SXM-80GB").cpus(96).memory("1TB").build()
A100x4 = node("a0").gpus(4, model="A100-40GB", memory="40GB").cpus(32).memory("256GB").build()
MIXED = (
    node("mx")
    .devices(
        Device(0, "H100", 80 * GB),
        Device(1, "H100", 80 * GB),
        Device(2, "A100", 40 * GB),
        Device(3, "A100", 40 * GB, mig=("1g.10gb", "3g.20gb")),
    )
    .build()
)
CPU_ONLY = node("c0").cpus(16).memory("64GB").build()


def request(builder: JobBuilder) -> NodeRequest:
    return NodeRequest.of(builder.spec(), PlacementPolicy.BINPACK)


def view(n: Node, *held: Allocation) -> NodeView:
    return Snapshot.build([n], held).nodes[n.name]


@pytest.mark.parametrize(
    ("builder", "target", "reason"),
    [
        pytest.param(job(1).gpus(8), H100x8, None, id="whole-fits"),
        pytest.param(job(1).gpus(9), H100x8, "has 8 GPUs, needs 9", id="too-many-gpus"),
        pytest.param(job(1).gpus(1), CPU_ONLY, "has 0 GPUs, needs 1", id="gpu-on-cpu-node"),
        pytest.param(job(1).gpus("H100:8"), H100x8, None, id="model-prefix-fits"),
        pytest.param(job(1).gpus("H100:4"), A100x4, "has 0 H100 GPUs, needs 4", id="wrong-model"),
        pytest.param(
            job(1).gpus(3).model("H100"), MIXED, "has 2 H100 GPUs, needs 3", id="counts-only-model"
        ),
        pytest.param(
            job(1).gpus(2).model("A100"),
            MIXED,
            "has 1 A100 GPUs, needs 2",
            id="mig-devices-excluded",
        ),
        pytest.param(job(1).gpus(4).model("*40GB"), A100x4, None, id="glob-model"),
        pytest.param(job(1).gpus(0.5), H100x8, None, id="fraction-fits"),
        pytest.param(
            job(1).gpus("V100:0.5"),
            H100x8,
            "has no matching GPU to share",
            id="fraction-wrong-model",
        ),
        pytest.param(
            job(1).gpus(0.5).gpu_memory("60GB"),
            A100x4,
            "has no GPU with enough memory for the share",
            id="fraction-memory-too-big",
        ),
        pytest.param(
            job(1).gpus("A100:0.5").gpu_memory("60GB"),
            MIXED,
            "has no GPU with enough memory for the share",
            id="fraction-memory-only-on-other-model",
        ),
        pytest.param(job(1).gpus("1g.10gb"), MIXED, None, id="mig-declared"),
        pytest.param(
            job(1).gpus("2g.20gb"), MIXED, "declares no 2g.20gb MIG instance", id="mig-undeclared"
        ),
        pytest.param(job(1).cpus(96), H100x8, None, id="all-cpus"),
        pytest.param(job(1).cpus(128), H100x8, "has 96 CPUs, needs 128", id="too-many-cpus"),
        pytest.param(
            job(1).memory("2TB"), H100x8, "has 1000GB memory, needs 2000GB", id="too-much-memory"
        ),
        pytest.param(job(1).cpus(4).memory("8GB"), CPU_ONLY, None, id="cpu-only-job"),
        pytest.param(job(1), CPU_ONLY, None, id="no-resources"),
    ],
)
def test_fits_capacity(builder: JobBuilder, target: Node, reason: str | None) -> None:
    assert fits_capacity(request(builder), view(target)) == reason


def test_fits_capacity_ignores_what_is_in_use() -> None:
    busy = view(H100x8, allocation(9).task("n0", gpus=range(8), cpus=96).build())
    assert fits_capacity(request(job(1).gpus(8).cpus(96)), busy) is None


SHARED_HALF = allocation(20).task("n0", gpus=[0], share=0.5).build()
SEVEN_WHOLE = allocation(21).task("n0", gpus=[1, 2, 3, 4, 5, 6, 7]).build()
ALL_WHOLE = allocation(22).task("n0", gpus=range(8)).build()


@pytest.mark.parametrize(
    ("builder", "held", "reason"),
    [
        pytest.param(job(1).gpus(8), (), None, id="empty-node"),
        pytest.param(
            job(1).gpus(8),
            (allocation(9).task("n0", gpus=[0, 1, 2, 3]).build(),),
            "4 of 8 GPUs free",
            id="half-busy",
        ),
        pytest.param(job(1).gpus(7), (SHARED_HALF,), None, id="shared-device-not-free-but-7-are"),
        pytest.param(
            job(1).gpus(8), (SHARED_HALF,), "7 of 8 GPUs free", id="shared-device-not-whole"
        ),
        pytest.param(job(1).gpus(0.5), (SHARED_HALF, SEVEN_WHOLE), None, id="fraction-joins-share"),
        pytest.param(
            job(1).gpus(0.75),
            (SHARED_HALF, SEVEN_WHOLE),
            "no GPU with 0.75 free",
            id="fraction-too-big-for-share",
        ),
        pytest.param(
            job(1).gpus(0.25), (ALL_WHOLE,), "no GPU with 0.25 free", id="fraction-vs-whole-task"
        ),
        pytest.param(
            job(1).cpus(90),
            (allocation(9).task("n0", cpus=8).build(),),
            "88 of 90 CPUs free",
            id="cpus-busy",
        ),
        pytest.param(
            job(1).memory("1TB"),
            (allocation(9).task("n0", memory="100GB").build(),),
            "900GB of 1000GB memory free",
            id="memory-busy",
        ),
    ],
)
def test_fits_free(builder: JobBuilder, held: tuple[Allocation, ...], reason: str | None) -> None:
    assert fits_free(request(builder), view(H100x8, *held)) == reason


@pytest.mark.parametrize(
    ("builder", "reason"),
    [
        pytest.param(
            job(1).gpus("A100:0.5"), "no GPU with 0.5 free", id="fraction-free-only-on-h100"
        ),
        pytest.param(job(1).gpus("H100:0.5"), None, id="fraction-right-model"),
        pytest.param(job(1).gpus(0.5).gpu_memory("60GB"), None, id="fraction-memory-fits-h100"),
        pytest.param(job(1).gpus("A100:1"), "0 of 1 GPUs free", id="whole-only-h100-free"),
    ],
)
def test_fits_free_respects_model_and_memory(builder: JobBuilder, reason: str | None) -> None:
    # On MIXED, the plain A100 (device 2) is busy and device 3 is in MIG mode: only H100s are free.
    busy_a100 = allocation(9).task("mx", gpus=[2]).build()
    assert fits_free(request(builder), view(MIXED, busy_a100)) == reason


@pytest.mark.parametrize(
    ("state", "status"),
    [
        pytest.param(NodeState.READY, None, id="ready"),
        pytest.param(NodeState.DRAINING, Unresolvable("node draining"), id="draining"),
        pytest.param(NodeState.LOST, Unresolvable("node lost"), id="lost"),
    ],
)
def test_node_state_filter(state: NodeState, status: Unresolvable | None) -> None:
    target = node("n").gpus(8).state(state).build()
    assert NodeStateFilter().filter(request(job(1).gpus(1)), view(target)) == status


@pytest.mark.parametrize(
    ("selector", "status"),
    [
        pytest.param({}, None, id="no-selector"),
        pytest.param({"pool": "a"}, None, id="match"),
        pytest.param({"pool": "a", "zone": "z1"}, None, id="all-match"),
        pytest.param(
            {"pool": "b"}, Unresolvable("label pool=b does not match"), id="different-value"
        ),
        pytest.param(
            {"rack": "r1"}, Unresolvable("label rack=r1 does not match"), id="missing-label"
        ),
        pytest.param(
            {"pool": "a", "zone": "z2"},
            Unresolvable("label zone=z2 does not match"),
            id="one-of-two-differs",
        ),
    ],
)
def test_node_selector_filter(selector: dict[str, str], status: Unresolvable | None) -> None:
    target = node("n").gpus(8).labels(pool="a", zone="z1").build()
    assert NodeSelectorFilter().filter(request(job(1).selector(**selector)), view(target)) == status


@pytest.mark.parametrize(
    ("builder", "held", "status"),
    [
        pytest.param(job(1).gpus(8), (), None, id="fits"),
        pytest.param(job(1).gpus(9), (), Unresolvable("has 8 GPUs, needs 9"), id="never"),
        pytest.param(
            job(1).gpus(8), (SHARED_HALF,), Unschedulable("7 of 8 GPUs free"), id="not-now"
        ),
        pytest.param(
            job(1).gpus(9), (ALL_WHOLE,), Unresolvable("has 8 GPUs, needs 9"), id="never-wins"
        ),
    ],
)
def test_resource_fit_filter(
    builder: JobBuilder,
    held: tuple[Allocation, ...],
    status: Unresolvable | Unschedulable | None,
) -> None:
    assert ResourceFitFilter().filter(request(builder), view(H100x8, *held)) == status
