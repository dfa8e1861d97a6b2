"""The job manifest (SPEC section 2): bad input names the field, good input becomes a JobSpec."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from corral.core.job import PlacementPolicy, Topology, TopologyLevel, TopologyMode
from corral.core.resources import GpuKind, GpuRequest
from corral.errors import ValidationError
from corral.schemas.manifest import JobManifest, load_manifest, parse_manifest

GB = 1000**3


def manifest(**fields: Any) -> dict[str, Any]:
    """A minimal valid manifest with ``fields`` merged in (``resources`` merged one level)."""
    data: dict[str, Any] = {"command": ["python", "train.py"]}
    data.update(fields)
    return data


# --- refused manifests: (data, field named in the message, words of the reason) ------------

REFUSED = [
    pytest.param(
        manifest(resources={"gpuz": 8}), "resources.gpuz", "unknown field", id="typo-nested"
    ),
    pytest.param(manifest(nodez=2), "nodez", "unknown field", id="typo-top-level"),
    pytest.param(
        manifest(topology={"levle": "leaf"}), "topology.levle", "unknown field", id="typo-topology"
    ),
    pytest.param(manifest(nodes=-1), "nodes", "greater than or equal to 1", id="negative-nodes"),
    pytest.param(manifest(nodes=0), "nodes", "greater than or equal to 1", id="zero-nodes"),
    pytest.param(manifest(nodes=1.5), "nodes", "integer", id="fractional-nodes"),
    pytest.param(manifest(tasks_per_node=0), "tasks_per_node", "greater than", id="zero-tasks"),
    pytest.param(
        manifest(resources={"gpus": "-1"}), "resources.gpus", ">= 0", id="negative-gpus-string"
    ),
    pytest.param(manifest(resources={"gpus": -2}), "resources.gpus", ">= 0", id="negative-gpus"),
    pytest.param(
        manifest(resources={"gpus": 1.5}), "resources.gpus", "whole numbers", id="gpus-1.5"
    ),
    pytest.param(manifest(resources={"gpus": "lots"}), "resources.gpus", "H100:8", id="gpus-word"),
    pytest.param(manifest(resources={"gpus": True}), "resources.gpus", "H100:8", id="gpus-bool"),
    pytest.param(
        manifest(resources={"gpus": 8}, tasks_per_node=3),
        "resources.gpus",
        "split evenly",
        id="gpus-not-divisible-by-tasks",
    ),
    pytest.param(
        manifest(resources={"gpus": 0.5}, tasks_per_node=2),
        "resources.gpus",
        "tasks_per_node: 1",
        id="fraction-with-2-tasks",
    ),
    pytest.param(
        manifest(resources={"gpus": "3g.40gb"}, tasks_per_node=2),
        "resources.gpus",
        "MIG instance (3g.40gb) cannot be shared among tasks; it needs tasks_per_node: 1",
        id="mig-with-2-tasks",
    ),
    pytest.param(
        manifest(resources={"gpus": 1, "gpu_memory": "20GB"}),
        "resources.gpu_memory",
        "fractional",
        id="gpu-memory-on-whole-gpu",
    ),
    pytest.param(
        manifest(resources={"memory": "lots"}), "resources.memory", "size", id="bad-memory"
    ),
    pytest.param(
        manifest(resources={"memory": "-1GB"}), "resources.memory", "size", id="negative-memory"
    ),
    pytest.param(
        manifest(resources={"gpu_memory": "20XB", "gpus": 0.5}),
        "resources.gpu_memory",
        "size",
        id="bad-gpu-memory",
    ),
    pytest.param(
        manifest(resources={"cpus": -1}),
        "resources.cpus",
        "greater than or equal to 0",
        id="negative-cpus",
    ),
    pytest.param(manifest(command=""), "command", "must not be empty", id="empty-command-string"),
    pytest.param(manifest(command="   "), "command", "must not be empty", id="blank-command"),
    pytest.param(manifest(command=[]), "command", "must not be empty", id="empty-command-list"),
    pytest.param({"name": "x"}, "command", "Field required", id="missing-command"),
    pytest.param(manifest(time_limit="4 hours?"), "time_limit", "duration", id="bad-duration"),
    pytest.param(manifest(time_limit=0), "time_limit", "positive", id="zero-time-limit"),
    pytest.param(manifest(time_limit="-5m"), "time_limit", "duration", id="negative-time-limit"),
    pytest.param(manifest(grace_period="soon"), "grace_period", "duration", id="bad-grace-period"),
    pytest.param(
        manifest(runtime_estimate="1 hour"), "runtime_estimate", "duration", id="bad-estimate"
    ),
    pytest.param(manifest(placement="packed"), "placement", "binpack", id="bad-placement"),
    pytest.param(
        manifest(topology={"level": "rack"}), "topology.level", "leaf", id="bad-topology-level"
    ),
    pytest.param(
        manifest(topology={"mode": "maybe"}), "topology.mode", "required", id="bad-topology-mode"
    ),
    pytest.param(manifest(priority=""), "priority", "must not be empty", id="empty-priority"),
    pytest.param(
        manifest(env={"A=B": "1"}), "env", "invalid variable name", id="env-key-with-equals"
    ),
    pytest.param(manifest(env={"": "1"}), "env", "invalid variable name", id="env-empty-key"),
    pytest.param(manifest(queue=""), "queue", "at least 1 character", id="empty-queue"),
    pytest.param(
        manifest(node_selector={"pool": 1}),
        "node_selector.pool",
        "string",
        id="selector-not-string",
    ),
]


@pytest.mark.parametrize(("data", "field", "reason"), REFUSED)
def test_bad_manifest_names_the_field(data: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_manifest(data)
    message = info.value.message
    assert message.startswith(f"manifest: {field}: "), message
    assert reason in message
    assert "\n" not in message


def test_several_problems_are_all_reported() -> None:
    with pytest.raises(ValidationError) as info:
        parse_manifest(manifest(nodes=0, resources={"gpuz": 1}))
    assert "nodes: " in info.value.message
    assert "resources.gpuz: unknown field" in info.value.message


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(["command"], id="list"),
        pytest.param("python train.py", id="string"),
        pytest.param(None, id="none"),
    ],
)
def test_manifest_must_be_a_mapping(data: object) -> None:
    with pytest.raises(ValidationError, match="expected a mapping"):
        parse_manifest(data)


# --- accepted manifests and their JobSpec ---------------------------------------------------

ACCEPTED = [
    pytest.param(
        manifest(),
        {"nodes": 1, "tasks_per_node": 1, "gpus": GpuRequest(), "queue": "default"},
        id="defaults",
    ),
    pytest.param(
        manifest(resources={"gpus": "H100:8"}),
        {
            "gpus": GpuRequest(GpuKind.WHOLE, count=8, model="H100"),
            "model_pattern": "H100",
            "gpus_per_task": 8,
        },
        id="model-prefix-form",
    ),
    pytest.param(
        manifest(resources={"gpus": 8, "gpu_model": "H100*"}),
        {"model_pattern": "H100*", "gpu_model": "H100*"},
        id="gpu-model-glob",
    ),
    pytest.param(
        manifest(nodes=2, tasks_per_node=8, resources={"gpus": 8}),
        {"world_size": 16, "gpus_per_task": 1, "total_gpus": 16.0},
        id="two-nodes-eight-tasks",
    ),
    pytest.param(
        manifest(resources={"gpus": 0.25, "gpu_memory": "20GB"}),
        {"gpus": GpuRequest(GpuKind.FRACTION, milli=250), "gpu_memory": 20 * GB},
        id="fraction-with-memory",
    ),
    pytest.param(manifest(resources={"gpus": "0"}), {"gpus": GpuRequest()}, id="zero-gpus-string"),
    pytest.param(
        manifest(resources={"gpus": "3g.40gb"}, tasks_per_node=1),
        {"gpus": GpuRequest(GpuKind.MIG, mig_profile="3g.40gb"), "total_gpus": 1.0},
        id="mig-profile",
    ),
    pytest.param(
        manifest(resources={"gpus": "A100:3g.40gb"}),
        {"gpus": GpuRequest(GpuKind.MIG, mig_profile="3g.40gb", model="A100")},
        id="mig-profile-with-model",
    ),
    pytest.param(
        manifest(resources={"cpus": 32, "memory": "256GB"}),
        {"cpus": 32.0, "memory": 256 * GB},
        id="cpus-and-memory",
    ),
    pytest.param(manifest(resources={"memory": "1GiB"}), {"memory": 1024**3}, id="binary-memory"),
    pytest.param(
        manifest(time_limit="4h", runtime_estimate="1h30m", grace_period="60s"),
        {"time_limit": 14400.0, "runtime_estimate": 5400.0, "grace_period": 60.0},
        id="durations-to-seconds",
    ),
    pytest.param(manifest(time_limit=90), {"time_limit": 90.0}, id="numeric-duration"),
    pytest.param(manifest(priority="high"), {"priority": "high"}, id="priority-class"),
    pytest.param(manifest(priority=500), {"priority": 500}, id="priority-integer"),
    pytest.param(
        manifest(command="echo hi && sleep 1"),
        {"command": "echo hi && sleep 1"},
        id="shell-command",
    ),
    pytest.param(
        manifest(command=["python", "train.py", "--lr", "3e-4"]),
        {"command": ("python", "train.py", "--lr", "3e-4")},
        id="argv-command-to-tuple",
    ),
    pytest.param(
        manifest(node_selector={"zone": "b", "pool": "a100"}),
        {"node_selector": (("pool", "a100"), ("zone", "b"))},
        id="selector-sorted-pairs",
    ),
    pytest.param(
        manifest(env={"B": "2", "A": "1"}), {"env": (("A", "1"), ("B", "2"))}, id="env-sorted-pairs"
    ),
    pytest.param(
        manifest(topology={"level": "leaf", "mode": "required"}),
        {"topology": Topology(TopologyLevel.LEAF, TopologyMode.REQUIRED)},
        id="topology",
    ),
    pytest.param(manifest(topology={}), {"topology": Topology()}, id="topology-defaults"),
    pytest.param(
        manifest(placement="spread"), {"placement": PlacementPolicy.SPREAD}, id="placement"
    ),
    pytest.param(
        manifest(preemptible=False, requeue=False, workdir="/data", name="llama", queue="team-a"),
        {
            "preemptible": False,
            "requeue": False,
            "workdir": "/data",
            "name": "llama",
            "queue": "team-a",
        },
        id="flags-and-names",
    ),
]


@pytest.mark.parametrize(("data", "expected"), ACCEPTED)
def test_valid_manifest_to_spec(data: dict[str, Any], expected: dict[str, Any]) -> None:
    spec = parse_manifest(data).to_spec()
    actual = {key: getattr(spec, key) for key in expected}
    assert actual == expected


def test_full_spec_example_from_the_contract() -> None:
    text = textwrap.dedent(
        """\
        name: llama-finetune
        queue: team-a
        priority: high
        nodes: 2
        tasks_per_node: 8
        resources:
          gpus: 8
          gpu_model: "H100*"
          cpus: 32
          memory: 256GB
        topology:
          level: leaf
          mode: required
        placement: binpack
        node_selector: {pool: a100}
        time_limit: 4h
        runtime_estimate: 1h
        preemptible: true
        grace_period: 60s
        requeue: true
        command: ["python", "train.py"]
        env: {KEY: value}
        workdir: /path
        """
    )
    spec = load_manifest(text, source="job.yaml").to_spec()
    assert spec.name == "llama-finetune"
    assert spec.queue == "team-a"
    assert spec.priority == "high"
    assert (spec.nodes, spec.tasks_per_node, spec.world_size) == (2, 8, 16)
    assert spec.gpus == GpuRequest(GpuKind.WHOLE, count=8)
    assert spec.gpus_per_task == 1
    assert spec.model_pattern == "H100*"
    assert (spec.cpus, spec.memory) == (32.0, 256 * GB)
    assert spec.topology == Topology(TopologyLevel.LEAF, TopologyMode.REQUIRED)
    assert spec.placement is PlacementPolicy.BINPACK
    assert spec.node_selector == (("pool", "a100"),)
    assert (spec.time_limit, spec.runtime_estimate, spec.grace_period) == (14400.0, 3600.0, 60.0)
    assert spec.preemptible is True and spec.requeue is True
    assert spec.command == ("python", "train.py")
    assert spec.env == (("KEY", "value"),)
    assert spec.workdir == "/path"


def test_manifest_round_trips_through_its_own_dump() -> None:
    first = parse_manifest(
        manifest(resources={"gpus": "H100:8", "memory": "64GB"}, time_limit="2h")
    )
    again = JobManifest.model_validate(first.model_dump())
    assert again.to_spec() == first.to_spec()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "command: x\nresources: {gpuz: 8}\n",
            "job.yaml: resources.gpuz: unknown field",
            id="typo",
        ),
        pytest.param("command: [x\n", "job.yaml: not valid YAML", id="broken-yaml"),
        pytest.param("- command: x\n", "job.yaml: expected a mapping, got list", id="list"),
        pytest.param("", "job.yaml: expected a mapping", id="empty"),
    ],
)
def test_load_manifest_errors_name_the_source(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        load_manifest(text, source="job.yaml")
    assert info.value.message.startswith(message)


def test_load_manifest_accepts_json() -> None:
    spec = load_manifest('{"command": ["true"], "resources": {"gpus": 0.5}}').to_spec()
    assert spec.gpus == GpuRequest(GpuKind.FRACTION, milli=500)
    assert spec.command == ("true",)
