"""The FGD packing experiment's pure rules (corral.sim.packing) on small hand-made files:
pod lists, arrival order and inflation, the node ranking, the expected mix, the metric,
and a short run through the production scheduler."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from corral.core.node import Device, Node
from corral.core.resources import GpuKind
from corral.errors import ValidationError
from corral.scheduling.plugins.fgd import RequestClass
from corral.sim.packing import (
    Curve,
    Pod,
    arrival_order,
    column,
    expected_mix,
    gpu_capacity,
    pod_spec,
    policy_config,
    ranked_nodes,
    read_cluster,
    read_pods,
    run,
)

MIB = 1024**2
HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def pod(name: str, num_gpu: int = 1, gpu_milli: int = 1000, cpu: int = 1000) -> Pod:
    return Pod(name, cpu, 1024, num_gpu, gpu_milli if num_gpu else 0)


# --- reading ---------------------------------------------------------------------------------


def test_read_pods_kinds_and_optional_spec(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        HEADER
        + "p0,8000,30517,0,0,\n"
        + "p1,6000,12288,1,460,V100M16|V100M32\n"
        + "p2,12000,16384,2,1000,\n"
        + "p3,4000,1024,0,0,T4\n",  # a CPU-only pod's gpu_spec means nothing
    )
    assert read_pods(path) == (
        Pod("p0", 8000, 30517, 0, 0, ""),
        Pod("p1", 6000, 12288, 1, 460, "V100M16|V100M32"),
        Pod("p2", 12000, 16384, 2, 1000, ""),
        Pod("p3", 4000, 1024, 0, 0, ""),
    )
    five = write(tmp_path, "five.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,500\n")
    assert read_pods(five) == (Pod("p", 1, 1, 1, 500),)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        pytest.param("p,1000,1,1,0,", "gpu_milli: expected 1..1000", id="gpu-pod-without-milli"),
        pytest.param("p,1000,1,1,1500,", "gpu_milli: expected 1..1000", id="over-one-gpu"),
        pytest.param("p,1000,1,2,500,", "gpu_milli: expected 1000", id="multi-gpu-share"),
        pytest.param("p,x,1,1,500,", "cpu_milli: expected", id="not-a-number"),
        pytest.param("p,1000,1,-1,500,", "num_gpu: expected", id="negative"),
    ],
)
def test_bad_pod_rows_name_file_line_and_field(tmp_path: Path, row: str, message: str) -> None:
    path = write(tmp_path, "pods.csv", HEADER + row + "\n")
    with pytest.raises(ValidationError, match=f"pods.csv:2: {message}"):
        read_pods(path)


def test_empty_pod_list_and_missing_column(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="no pods"):
        read_pods(write(tmp_path, "empty.csv", HEADER))
    with pytest.raises(ValidationError, match="gpu_milli"):
        read_pods(write(tmp_path, "short.csv", "name,cpu_milli,memory_mib,num_gpu\np,1,1,0\n"))


def test_read_cluster(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,G2\nn1,8000,61440,1,P100\n",
    )
    nodes = read_cluster(path)
    assert [(n.name, n.gpu_count, n.cpus, n.memory) for n in nodes] == [
        ("n0", 8, 96.0, 393216 * MIB),
        ("n1", 1, 8.0, 61440 * MIB),
    ]
    assert gpu_capacity(nodes) == 9000


# --- pods as jobs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "kind", "count", "milli", "model"),
    [
        pytest.param(Pod("c", 8000, 100), GpuKind.NONE, 0, 0, None, id="cpu-only"),
        pytest.param(Pod("s", 6000, 100, 1, 460), GpuKind.FRACTION, 0, 460, None, id="share"),
        pytest.param(Pod("w", 6000, 100, 1, 1000), GpuKind.WHOLE, 1, 0, None, id="one-whole"),
        pytest.param(Pod("k", 6000, 100, 4, 1000), GpuKind.WHOLE, 4, 0, None, id="four-whole"),
        pytest.param(
            Pod("m", 6000, 100, 1, 500, "V100M16|V100M32"),
            GpuKind.FRACTION,
            0,
            500,
            "V100M16|V100M32",
            id="models",
        ),
    ],
)
def test_pod_spec(given: Pod, kind: GpuKind, count: int, milli: int, model: str | None) -> None:
    spec = pod_spec(given)
    assert (spec.gpus.kind, spec.gpus.count, spec.gpus.milli, spec.gpu_model) == (
        kind,
        count,
        milli,
        model,
    )
    assert spec.cpus == given.cpu_milli / 1000 and spec.memory == given.memory_mib * MIB
    assert spec.nodes == 1


# --- arrival order and inflation -------------------------------------------------------------


def test_order_is_sorted_then_shuffled_with_the_seed() -> None:
    pods = [pod(f"p{i}", gpu_milli=100) for i in (3, 1, 2, 0)]
    # 400 of 10,000 arrive: at a ratio of 4% the first draw would pass it, so no copies
    order = arrival_order(pods, seed=7, capacity=10_000, ratio=0.04)
    expected = sorted(pods, key=lambda p: p.name)
    random.Random(7).shuffle(expected)
    assert order == expected
    assert arrival_order(pods, seed=7, capacity=10_000, ratio=0.04) == order  # deterministic


def test_inflation_stops_before_a_draw_would_pass_the_target() -> None:
    pods = [pod("a", gpu_milli=300), pod("b", gpu_milli=500), pod("c", num_gpu=0)]
    capacity = 1000
    for seed in range(20):
        order = arrival_order(pods, seed, capacity, ratio=1.3)
        total = sum(p.demand for p in order)
        assert sorted(order[:3], key=lambda p: p.name) == pods  # the originals first
        assert total <= 1300
        # the draw after the last accepted one would have passed the target
        rng = random.Random(seed)
        rng.shuffle(sorted(pods, key=lambda p: p.name))
        for copy in order[3:]:
            assert pods[rng.randrange(3)] == copy
        assert total + pods[rng.randrange(3)].gpu_milli > 1300


def test_inflation_counts_full_demand_but_checks_the_per_gpu_share() -> None:
    # An 8-GPU pod passes the check with 1000 (its per-GPU share) and adds 8000.
    pods = [pod("big", num_gpu=8)]
    order = arrival_order(pods, seed=1, capacity=10_000, ratio=1.3)
    # 8000 arrived; a copy is checked at 8000 + 1000 <= 13000, accepted: 16000 (overshoot)
    assert len(order) == 2 and sum(p.demand for p in order) == 16_000


def test_a_list_above_the_target_is_thinned_at_random() -> None:
    pods = [pod(f"p{i}", gpu_milli=500) for i in range(10)]  # 5000 on 2000 capacity: 250%
    order = arrival_order(pods, seed=3, capacity=2000, ratio=1.3)
    assert sum(p.demand for p in order) == 2500  # 5 of 10 pods: 2500 <= 2600
    assert len(set(order)) == len(order) == 5
    shuffled = sorted(pods, key=lambda p: p.name)
    random.Random(3).shuffle(shuffled)
    assert order == [p for p in shuffled if p in order]  # the arrival order is kept


# --- node ranking ----------------------------------------------------------------------------


def test_ranked_nodes_keep_everything_but_the_name() -> None:
    nodes = tuple(Node(f"n{i}", (Device(0, "T4", 0),), 8.0, 1) for i in range(12))
    ranked = ranked_nodes(nodes, seed=42)
    assert [n.name.split("-", 1)[1] for n in ranked] == [n.name for n in nodes]
    assert sorted(int(n.name.split("-")[0]) for n in ranked) == list(range(12))
    assert all(len(n.name.split("-")[0]) == 2 for n in ranked)  # zero-padded: sorts as ranked
    assert [(n.devices, n.cpus) for n in ranked] == [(n.devices, n.cpus) for n in nodes]
    assert ranked_nodes(nodes, seed=42) == ranked  # one ranking per seed
    assert ranked_nodes(nodes, seed=43) != ranked


# --- the expected mix ------------------------------------------------------------------------


def test_expected_mix_covers_the_most_frequent_classes() -> None:
    pods = (
        [Pod(f"s{i}", 4000, 1, 1, 500) for i in range(10)]
        + [Pod(f"c{i}", 8000, 1) for i in range(6)]
        + [Pod(f"w{i}", 8000, 1, 2, 1000, "T4") for i in range(3)]
        + [Pod("rare", 1000, 1, 1, 100)]
    )
    # 20 pods: 10 + 6 + 3 = 19 covers 95%; the rare class is left out
    assert expected_mix(pods) == (
        RequestClass(gpu_milli=500, gpus=1, cpus=4.0, share=10 / 19),
        RequestClass(gpu_milli=0, gpus=0, cpus=8.0, share=6 / 19),
        RequestClass(gpu_milli=1000, gpus=2, cpus=8.0, model="T4", share=3 / 19),
    )
    assert len(expected_mix(pods, coverage=1.0)) == 4
    assert len(expected_mix(pods, coverage=0.5)) == 1


def test_expected_mix_ties_go_to_the_smaller_class() -> None:
    pods = [Pod("a", 2000, 1, 1, 300), Pod("b", 1000, 1, 1, 300)]
    assert expected_mix(pods, coverage=0.5) == (RequestClass(300, 1, 1.0, None, 1.0),)
    with pytest.raises(ValidationError):
        expected_mix([])


# --- the metric ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arrived", "allocated", "percent", "expected"),
    [
        pytest.param([99.4, 99.6, 100.4, 100.6], [90, 92, 94, 96], 100, 93.0, id="rounds-to-100"),
        pytest.param([99.5, 100.5], [90, 94], 100, 92.0, id="half-to-even-both-in"),
        pytest.param([129.5, 130.5, 131.5], [95, 96, 97], 130, 95.5, id="130"),
        pytest.param([98.0, 99.2, 101.0, 102.0], [80, 90, 92, 99], 100, 91.0, id="within-one"),
        pytest.param([50.0], [50.0], 100, None, id="none-near"),
    ],
)
def test_column(
    arrived: list[float], allocated: list[float], percent: int, expected: float | None
) -> None:
    value = column(Curve(arrived, [float(a) for a in allocated]), percent)
    assert value == (None if expected is None else pytest.approx(expected))


def test_column_falls_back_to_within_one_point() -> None:
    curve = Curve([100.5, 101.5], [94.0, 96.0])  # round: 100 and 102
    assert column(curve, 101) == 95.0  # none rounds to 101: both are within one point
    assert column(Curve([50.0], [50.0]), 100) is None


# --- a run through the scheduler -------------------------------------------------------------


def two_nodes() -> tuple[Node, ...]:
    devices = tuple(Device(i, "T4", 16 * 1024**3) for i in range(2))
    return (Node("a", devices, 8.0, 64 * 1024**3), Node("b", devices, 8.0, 64 * 1024**3))


@pytest.mark.parametrize("policy", ["packing", "bestfit", "fgd", "corral"])
def test_run_places_until_full_and_drops_the_rest(policy: str) -> None:
    pods = [
        Pod("s1", 1000, 1024, 1, 500),
        Pod("s2", 1000, 1024, 1, 500),
        Pod("w1", 1000, 1024, 1, 1000),
        Pod("w2", 2000, 1024, 2, 1000),
        Pod("c1", 7000, 1024),
        Pod("s3", 2000, 1024, 1, 500),
    ]
    config = policy_config(policy, expected_mix(pods))
    curve = run(two_nodes(), pods, config)
    assert curve.placed + curve.dropped == len(pods)
    assert curve.arrived == pytest.approx([12.5, 25.0, 50.0, 100.0, 100.0, 112.5])
    assert curve.allocated[-1] <= 100.0
    assert curve.allocated == sorted(curve.allocated)


def test_run_respects_the_model_alternatives() -> None:
    nodes = (
        Node("a", (Device(0, "T4", 0),), 8.0, 1024**3),
        Node("b", (Device(0, "V100M32", 0),), 8.0, 1024**3),
    )
    pods = [Pod("p", 1000, 1, 1, 1000, "V100M16|V100M32"), Pod("q", 1000, 1, 1, 1000, "P100")]
    curve = run(nodes, pods, policy_config("packing"))
    assert (curve.placed, curve.dropped) == (1, 1)
    assert curve.allocated == [50.0, 50.0]


def test_policy_config_passes_the_mix_to_the_policy_score() -> None:
    mix = (RequestClass(500, share=1.0),)
    assert policy_config("fgd", mix).plugins[0].name == "fgd"
    assert dict(policy_config("corral", mix).plugins[0].args)["mix"] == mix
    assert policy_config("bestfit", mix).plugins == ()
    assert policy_config("packing").policy.sharing == "packing"
