"""Properties of jobs, job specs, nodes and allocations."""

from __future__ import annotations

import pytest

from corral.core.allocation import Allocation
from corral.core.job import JobSpec, JobState
from corral.core.node import Device, NodeState
from corral.core.resources import parse_gpus
from tests.builders import allocation, job, node


@pytest.mark.parametrize(
    ("spec", "world_size", "gpus_per_task", "total_gpus"),
    [
        pytest.param(job(1).spec(), 1, 0, 0.0, id="cpu-only"),
        pytest.param(job(1).gpus(8).spec(), 1, 8, 8.0, id="one-task-8-gpus"),
        pytest.param(job(1).gpus(8).tasks(8).spec(), 8, 1, 8.0, id="one-gpu-per-task"),
        pytest.param(job(1).gpus(8).tasks(4).nodes(2).spec(), 8, 2, 16.0, id="two-nodes"),
        pytest.param(job(1).gpus("H100:8").nodes(4).spec(), 4, 8, 32.0, id="model-form"),
        pytest.param(job(1).gpus(0.25).spec(), 1, 0, 0.25, id="fraction"),
        pytest.param(job(1).gpus(0.5).nodes(3).spec(), 3, 0, 1.5, id="fraction-on-3-nodes"),
        pytest.param(job(1).gpus("1g.10gb").nodes(2).spec(), 2, 0, 2.0, id="mig"),
        pytest.param(job(1).tasks(4).nodes(2).spec(), 8, 0, 0.0, id="cpu-only-tasks"),
    ],
)
def test_job_spec_sizes(
    spec: JobSpec, world_size: int, gpus_per_task: int, total_gpus: float
) -> None:
    assert spec.world_size == world_size
    assert spec.gpus_per_task == gpus_per_task
    assert spec.total_gpus == pytest.approx(total_gpus)


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        pytest.param(job(1).gpus(8).spec(), None, id="no-constraint"),
        pytest.param(job(1).gpus("H100:8").spec(), "H100", id="prefix-form"),
        pytest.param(job(1).gpus(8).model("A100*").spec(), "A100*", id="gpu-model"),
        pytest.param(job(1).gpus("H100:8").model("H100-SXM*").spec(), "H100-SXM*", id="both"),
    ],
)
def test_model_pattern_prefers_gpu_model(spec: JobSpec, pattern: str | None) -> None:
    assert spec.model_pattern == pattern


def test_job_spec_defaults_follow_the_manifest_contract() -> None:
    spec = JobSpec(command="python train.py")
    assert (spec.queue, spec.nodes, spec.tasks_per_node) == ("default", 1, 1)
    assert spec.gpus == parse_gpus(0)
    assert spec.requeue is True
    assert spec.grace_period == 30.0


def test_job_reads_its_queue_from_the_spec() -> None:
    built = job(3).queue("team-a").priority(7).submitted(2.5).attempt(2).build()
    assert built.queue == "team-a"
    assert (built.id, built.priority, built.submitted_at, built.attempt) == (3, 7, 2.5, 2)
    assert built.state is JobState.PENDING


@pytest.mark.parametrize(
    ("state", "terminal", "active"),
    [
        pytest.param(JobState.PENDING, False, False, id="pending"),
        pytest.param(JobState.RUNNING, False, True, id="running"),
        pytest.param(JobState.PREEMPTING, False, True, id="preempting"),
        pytest.param(JobState.SUCCEEDED, True, False, id="succeeded"),
        pytest.param(JobState.FAILED, True, False, id="failed"),
        pytest.param(JobState.CANCELLED, True, False, id="cancelled"),
    ],
)
def test_job_state_flags(state: JobState, terminal: bool, active: bool) -> None:
    assert state.terminal is terminal
    assert state.active is active


@pytest.mark.parametrize(
    ("state", "schedulable"),
    [
        pytest.param(NodeState.READY, True, id="ready"),
        pytest.param(NodeState.DRAINING, False, id="draining"),
        pytest.param(NodeState.LOST, False, id="lost"),
    ],
)
def test_node_state_schedulable(state: NodeState, schedulable: bool) -> None:
    assert state.schedulable is schedulable


def test_node_properties() -> None:
    built = (
        node("n0")
        .devices(Device(0, "H100", 80), Device(1, "H100", 80), Device(2, "A100", 40))
        .labels(pool="a", zone="z1")
        .build()
    )
    assert built.gpu_count == 3
    assert built.label_map == {"pool": "a", "zone": "z1"}
    assert built.models == frozenset({"H100", "A100"})


def test_node_builder_assigns_nvlink_domains() -> None:
    built = node("n0").gpus(8, model="H100", nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]]).build()
    assert [d.nvlink_domain for d in built.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [d.index for d in built.devices] == list(range(8))


@pytest.mark.parametrize(
    ("alloc", "nodes"),
    [
        pytest.param(Allocation(1, 0, ()), (), id="empty"),
        pytest.param(allocation(1).task("n0").task("n0").build(), ("n0",), id="one-node"),
        pytest.param(
            allocation(1).task("b").task("b").task("a").task("a").build(),
            ("b", "a"),
            id="node-rank-order-not-alphabetical",
        ),
    ],
)
def test_allocation_nodes_in_node_rank_order(alloc: Allocation, nodes: tuple[str, ...]) -> None:
    assert alloc.nodes == nodes
