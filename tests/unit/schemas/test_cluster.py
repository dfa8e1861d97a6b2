"""The cluster file (SPEC section 3): name ranges, NVLink groups, labels, network, refusals."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from corral.core.node import Device, NodeState
from corral.errors import ValidationError
from corral.schemas.cluster import ClusterFile, expand_names, load_cluster

GB = 1000**3


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        pytest.param("gpu-00", ["gpu-00"], id="no-range"),
        pytest.param("n{1..3}", ["n1", "n2", "n3"], id="no-padding"),
        pytest.param("n{8..11}", ["n8", "n9", "n10", "n11"], id="no-padding-grows"),
        pytest.param("n{0..2}", ["n0", "n1", "n2"], id="single-zero-is-not-padding"),
        pytest.param("gpu-{00..03}", ["gpu-00", "gpu-01", "gpu-02", "gpu-03"], id="zero-padded"),
        pytest.param(
            "gpu-{08..11}", ["gpu-08", "gpu-09", "gpu-10", "gpu-11"], id="padded-crossing"
        ),
        pytest.param("x{007..009}", ["x007", "x008", "x009"], id="three-digit-padding"),
        pytest.param("n{5..5}", ["n5"], id="single-element"),
        pytest.param("{1..2}-gpu", ["1-gpu", "2-gpu"], id="range-first"),
        pytest.param(
            "r{1..2}-n{0..1}", ["r1-n0", "r1-n1", "r2-n0", "r2-n1"], id="two-ranges-multiply"
        ),
        pytest.param(
            "z{1..2}r{01..02}n{1..2}",
            [f"z{z}r0{r}n{n}" for z in (1, 2) for r in (1, 2) for n in (1, 2)],
            id="three-ranges-nest-left-to-right",
        ),
        pytest.param("n{a..c}", ["n{a..c}"], id="letters-are-not-a-range"),
    ],
)
def test_expand_names(pattern: str, names: list[str]) -> None:
    assert expand_names(pattern) == names


def test_expand_names_16_zero_padded() -> None:
    names = expand_names("gpu-{00..15}")
    assert len(names) == 16
    assert (names[0], names[9], names[15]) == ("gpu-00", "gpu-09", "gpu-15")


@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param("n{3..1}", id="backwards"),
        pytest.param("gpu-{10..02}", id="backwards-padded"),
        pytest.param("r{1..2}-n{5..4}", id="second-range-backwards"),
    ],
)
def test_expand_names_backwards_range_is_an_error(pattern: str) -> None:
    with pytest.raises(ValueError, match="runs backwards"):
        expand_names(pattern)


def cluster_file(*nodes: dict[str, Any]) -> ClusterFile:
    return ClusterFile.model_validate({"nodes": list(nodes)})


def test_to_nodes_expands_names_and_nvlink_domains() -> None:
    nodes = cluster_file(
        {
            "name": "gpu-{00..15}",
            "gpus": {
                "count": 8,
                "model": "H100-SXM-80GB",
                "memory": "80GB",
                "nvlink": [[0, 1, 2, 3], [4, 5, 6, 7]],
            },
            "cpus": 96,
            "memory": "1TB",
            "network": ["zone-a", "spine-1", "leaf-1"],
            "labels": {"pool": "h100", "arch": "hopper"},
        }
    ).to_nodes()
    assert [n.name for n in nodes] == [f"gpu-{i:02d}" for i in range(16)]
    first = nodes[0]
    assert first.devices == tuple(
        Device(index=i, model="H100-SXM-80GB", memory=80 * GB, nvlink_domain=i // 4)
        for i in range(8)
    )
    assert (first.cpus, first.memory) == (96, 1000**4)
    assert first.network == ("zone-a", "spine-1", "leaf-1")
    assert first.labels == (("arch", "hopper"), ("pool", "h100"))
    assert first.state is NodeState.READY
    assert all(n.devices == first.devices for n in nodes)


@pytest.mark.parametrize(
    ("nvlink", "domains"),
    [
        pytest.param(None, [0, 0, 0, 0], id="no-groups-one-domain"),
        pytest.param([[0, 1], [2, 3]], [0, 0, 1, 1], id="two-pairs"),
        pytest.param([[0, 2], [1, 3]], [0, 1, 0, 1], id="interleaved"),
        pytest.param([[3], [2], [1], [0]], [3, 2, 1, 0], id="singletons-in-reverse"),
    ],
)
def test_nvlink_groups_become_device_domains(
    nvlink: list[list[int]] | None, domains: list[int]
) -> None:
    gpus: dict[str, Any] = {"count": 4, "model": "A100"}
    if nvlink is not None:
        gpus["nvlink"] = nvlink
    (built,) = cluster_file({"name": "n0", "gpus": gpus}).to_nodes()
    assert [d.nvlink_domain for d in built.devices] == domains


@pytest.mark.parametrize(
    ("decl", "cpus", "memory", "gpu_count"),
    [
        pytest.param({"name": "c0"}, 8, 32 * GB, 0, id="cpu-only-defaults"),
        pytest.param(
            {"name": "g0", "gpus": {"count": 8}}, 96, 8 * 128 * GB, 8, id="per-gpu-defaults"
        ),
        pytest.param(
            {"name": "g0", "gpus": {"count": 2}, "cpus": 4, "memory": "16GB"},
            4,
            16 * GB,
            2,
            id="explicit",
        ),
    ],
)
def test_node_defaults(decl: dict[str, Any], cpus: float, memory: int, gpu_count: int) -> None:
    (built,) = cluster_file(decl).to_nodes()
    assert built.cpus == cpus
    assert built.memory == memory
    assert isinstance(built.memory, int)
    assert built.gpu_count == gpu_count


def test_gpu_defaults_and_mig_declarations() -> None:
    (built,) = cluster_file(
        {"name": "m0", "gpus": {"count": 2}, "mig": {0: ["3g.40gb", "3g.40gb"]}}
    ).to_nodes()
    assert built.devices[0] == Device(0, "GPU", 80 * GB, mig=("3g.40gb", "3g.40gb"))
    assert built.devices[1].mig == ()


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        pytest.param(
            [{"name": "gpu-{0..3}"}, {"name": "gpu-2"}],
            "node 'gpu-2' is declared twice",
            id="range-then-single",
        ),
        pytest.param(
            [{"name": "a"}, {"name": "a"}], "node 'a' is declared twice", id="same-name-twice"
        ),
        pytest.param(
            [{"name": "n{01..02}"}, {"name": "n{1..2}"}],
            None,
            id="padding-makes-different-names",
        ),
        pytest.param(
            [{"name": "ok"}, {"name": "n{3..1}"}], "nodes.1.name: name range", id="backwards"
        ),
    ],
)
def test_to_nodes_refusals(nodes: list[dict[str, Any]], message: str | None) -> None:
    declared = cluster_file(*nodes)
    if message is None:
        assert len(declared.to_nodes()) == 4
        return
    with pytest.raises(ValidationError) as info:
        declared.to_nodes()
    assert info.value.message.startswith("cluster: ")
    assert message in info.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "nodes:\n  - name: n0\n    gpus: {count: 4, nvlink: [[0, 1], [1, 2, 3]]}\n",
            "nodes.0.gpus: nvlink: the groups must cover GPU indices 0..3 once each",
            id="nvlink-repeats-an-index",
        ),
        pytest.param(
            "nodes:\n  - name: n0\n    gpus: {count: 4, nvlink: [[0, 1]]}\n",
            "nvlink: the groups must cover",
            id="nvlink-misses-indices",
        ),
        pytest.param(
            "nodes:\n  - name: n0\n    gpus: {count: 8, modle: H100}\n",
            "nodes.0.gpus.modle: unknown field",
            id="typo-in-gpus",
        ),
        pytest.param(
            "nodes:\n  - name: n0\n    gpus: {count: -1}\n",
            "nodes.0.gpus.count",
            id="negative-gpu-count",
        ),
        pytest.param(
            "nodes:\n  - name: n0\n    memory: lots\n",
            "nodes.0.memory: expected a size",
            id="bad-memory",
        ),
        pytest.param("nodes: []\n", "declares no nodes", id="no-nodes"),
        pytest.param("", "expected a mapping", id="empty-file"),
        pytest.param("nodes: [\n", "not valid YAML", id="broken-yaml"),
    ],
)
def test_load_cluster_errors(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        load_cluster(text, source="cluster.yaml")
    assert info.value.message.startswith("cluster.yaml: ")
    assert message in info.value.message


def test_load_cluster_from_the_contract_example() -> None:
    text = textwrap.dedent(
        """\
        nodes:
          - name: "gpu-{00..15}"
            gpus: {count: 8, model: H100-SXM-80GB, memory: 80GB, nvlink: [[0,1,2,3],[4,5,6,7]]}
            cpus: 96
            memory: 1TB
            network: [zone-a, spine-1, leaf-1]
            labels: {pool: h100}
          - name: "cpu-{1..2}"
            cpus: 64
        """
    )
    nodes = load_cluster(text).to_nodes()
    assert len(nodes) == 18
    assert [n.name for n in nodes[-2:]] == ["cpu-1", "cpu-2"]
    assert nodes[3].label_map == {"pool": "h100"}
    assert nodes[-1].devices == ()
