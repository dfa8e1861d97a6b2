"""``tpu_pods`` in the cluster file and ``resources.tpu`` in the manifest."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from corral.core.resources import GpuRequest
from corral.core.tpu import TpuRequest
from corral.errors import ValidationError
from corral.schemas.cluster import load_cluster
from corral.schemas.manifest import parse_manifest

CLUSTER = textwrap.dedent(
    """
    nodes:
      - name: gpu-0
        gpus: {count: 8, model: H100}
    tpu_pods:
      - name: pod-a
        generation: v5p
        shape: [4, 4, 8]
        chips_per_host: [2, 2, 1]
        labels: {team: research}
      - name: lite
        generation: v5e
        shape: [4, 4]
        chips_per_host: [2, 2]
        cpus: 112
        memory: 192GB
    """
)


def test_tpu_pods_expand_into_labelled_hosts_whose_devices_are_chips() -> None:
    nodes = load_cluster(CLUSTER).to_nodes()
    assert [n.name for n in nodes[:3]] == ["gpu-0", "pod-a-h000", "pod-a-h001"]
    pod = [n for n in nodes if n.name.startswith("pod-a-")]
    assert len(pod) == 32 and pod[-1].name == "pod-a-h031"
    host = pod[5]  # worker order: x fastest over a 2x2x8 grid of hosts
    assert host.tpu_host is not None and host.tpu_host.coords == (1, 0, 1)
    assert host.label_map["team"] == "research"
    assert host.label_map["tpu.corral/pod"] == "pod-a"
    assert host.label_map["tpu.corral/generation"] == "v5p"
    assert [(d.index, d.kind, d.model) for d in host.devices] == [
        (i, "tpu", "v5p") for i in range(4)
    ]
    assert host.tpu_chips == 4 and host.gpu_count == 4 and host.capacity(None) == 0
    assert nodes[0].tpu_chips == 0 and nodes[0].tpu_host is None
    lite = [n for n in nodes if n.name.startswith("lite-")]
    assert len(lite) == 4 and lite[3].tpu_host.coords == (1, 1)  # type: ignore[union-attr]
    assert (lite[0].cpus, lite[0].memory) == (112.0, 192 * 10**9)


def pod(**fields: Any) -> str:
    data = {"name": "pod-a", "generation": "v5p", "shape": [4, 4, 8], "chips_per_host": [2, 2, 1]}
    data.update(fields)
    body = ", ".join(f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {v}" for k, v in data.items())
    return f"tpu_pods:\n  - {{{body}}}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(pod(chips_per_host=[2, 3, 1]), "hosts of 2x3x1 chips along y", id="uneven"),
        pytest.param(pod(chips_per_host=[2, 2]), "chips_per_host has 2 axes", id="axes-differ"),
        pytest.param(pod(shape=[8]), "shape", id="one-axis"),
        pytest.param(pod(shape=[2, 2, 2, 2]), "shape", id="four-axes"),
        pytest.param(pod(shape=[4, 0, 8]), "at least 1", id="zero-axis"),
        pytest.param(pod(chips_per_host=[2, -2, 1]), "at least 1", id="negative-block"),
        pytest.param(pod(generation=""), "generation", id="empty-generation"),
        pytest.param(pod(name=""), "name", id="empty-name"),
        pytest.param(pod(shapes=[4, 4, 8]), "unknown field", id="typo"),
        pytest.param(
            pod() + "  - {name: pod-a, generation: v4, shape: [2, 2], chips_per_host: [2, 2]}\n",
            "declared twice",
            id="same-pod-twice",
        ),
        pytest.param(
            "nodes:\n  - name: pod-a-h000\n" + pod(),
            "node 'pod-a-h000' is declared twice",
            id="host-name-clash",
        ),
    ],
)
def test_bad_tpu_pods_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        load_cluster(text).to_nodes()


def test_a_cluster_of_tpu_pods_alone_is_a_cluster() -> None:
    assert len(load_cluster(pod()).to_nodes()) == 32


def manifest(**fields: Any) -> dict[str, Any]:
    return {"command": ["python", "train.py"], **fields}


def test_a_tpu_manifest_becomes_a_tpu_spec() -> None:
    spec = parse_manifest(manifest(resources={"tpu": "v5p:2X2x4"})).to_spec()
    assert spec.tpu == TpuRequest("v5p", (2, 2, 4))
    assert spec.gpus == GpuRequest(tpu="v5p")
    assert spec.nodes == 0  # sized at submission from the cluster's pods
    assert spec.tasks_per_node == 1
    sized = parse_manifest(manifest(nodes=4, resources={"tpu": "v5p:2x2x4"})).to_spec()
    assert sized.nodes == 4
    assert parse_manifest(manifest()).to_spec().nodes == 1  # no TPU: one node by default
    dumped = parse_manifest(manifest(resources={"tpu": "v5p:2X2x4"})).model_dump(exclude_none=True)
    assert dumped["resources"]["tpu"] == "v5p:2x2x4" and "nodes" not in dumped


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        pytest.param(
            manifest(resources={"tpu": "v5p:2x2x4", "gpus": 8}),
            "resources.tpu",
            "cannot be combined with gpus",
            id="with-gpus",
        ),
        pytest.param(
            manifest(resources={"tpu": "v5p:2x2x4", "gpu_model": "H100"}),
            "resources.tpu",
            "gpu_model",
            id="with-gpu-model",
        ),
        pytest.param(
            manifest(tasks_per_node=4, resources={"tpu": "v5p:2x2x4"}),
            "tasks_per_node",
            "one task per host",
            id="several-tasks-per-host",
        ),
        pytest.param(
            manifest(topology={"level": "leaf"}, resources={"tpu": "v5p:2x2x4"}),
            "topology",
            "does not apply",
            id="with-network-topology",
        ),
        pytest.param(
            manifest(resources={"tpu": "2x2x4"}), "resources.tpu", "GENERATION:SHAPE", id="no-gen"
        ),
        pytest.param(
            manifest(resources={"tpu": "v5p:2x2x2x2"}), "resources.tpu", "1 to 3", id="four-axes"
        ),
        pytest.param(manifest(nodes=0, resources={"tpu": "v5p:2x2x4"}), "nodes", "greater", id="0"),
    ],
)
def test_bad_tpu_manifests_name_the_field(data: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_manifest(data)
    assert info.value.message.startswith(f"manifest: {field}: "), info.value.message
    assert reason in info.value.message


def test_the_tpu_examples_parse_and_fit_each_other() -> None:
    from pathlib import Path

    from corral.scheduling.config import SchedulerConfig
    from corral.scheduling.feasibility import never_fits, node_shapes, with_tpu_hosts
    from corral.schemas.manifest import load_manifest

    examples = Path(__file__).resolve().parents[3] / "examples"
    nodes = load_cluster((examples / "tpu-cluster.yaml").read_text()).to_nodes()
    assert len(nodes) == 17 and nodes[-1].name == "pod-a-h015"
    spec = load_manifest((examples / "tpu-job.yaml").read_text()).to_spec()
    shapes = node_shapes(nodes)
    sized = with_tpu_hosts(spec, shapes)
    assert sized.nodes == 4 and never_fits(sized, shapes, SchedulerConfig()) is None
