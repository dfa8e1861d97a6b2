"""Fragmentation-aware sharing (FGD): node fragmentation, the score, device choice, config."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from corral.core.allocation import Allocation
from corral.core.job import PlacementPolicy
from corral.core.node import Device, Node
from corral.errors import ValidationError
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.framework import NodeRequest, Profile
from corral.scheduling.plugins.devices import NvlinkDeviceSelect
from corral.scheduling.plugins.fgd import (
    DEFAULT_MIX,
    Fragmentation,
    FragmentationDeviceSelect,
    FragmentationScore,
    RequestClass,
    frees_of,
    mix_of,
    node_fragmentation,
    one_model_after,
    parse_mix,
    whole_after,
)
from corral.scheduling.plugins.scoring import PackingScore
from corral.scheduling.plugins.topology import TopologyDeviceSelect
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot
from corral.schemas.config import load_config
from tests.builders import GB, JobBuilder, allocation, job, node


def view_of(target: Node, *held: Allocation) -> object:
    return Snapshot.build([target], held).nodes[target.name]


def request_of(builder: JobBuilder) -> NodeRequest:
    return NodeRequest.of(builder.spec(), PlacementPolicy.BINPACK)


TWO = node("n0").gpus(2).build()
HALF = (allocation(9).task("n0", gpus=[0], share=0.5).build(),)
HALVES = [{"gpu_milli": 500, "share": 1}]


# --- node fragmentation F(n) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "held", "mix", "expected"),
    [
        pytest.param(TWO, (), HALVES, 0.0, id="empty-node-half-shares"),
        pytest.param(TWO, (), [{"gpu_milli": 1000, "gpus": 2}], 0.0, id="empty-node-two-whole"),
        pytest.param(TWO, (), [{"gpus": 4}], 2000.0, id="empty-node-too-few-gpus"),
        pytest.param(TWO, HALF, HALVES, 0.0, id="half-used-half-shares"),
        pytest.param(TWO, HALF, [{"gpu_milli": 750}], 500.0, id="half-used-three-quarters"),
        pytest.param(TWO, HALF, [{"gpu_milli": 1000}], 500.0, id="half-used-whole"),
        pytest.param(TWO, HALF, [{"gpus": 2}], 1500.0, id="half-used-two-whole"),
        pytest.param(TWO, HALF, [{"gpus": 0}], 1500.0, id="cpu-only-class"),
        pytest.param(TWO, HALF, [{"gpu_milli": 250, "model": "A100"}], 1500.0, id="wrong-model"),
        pytest.param(TWO, HALF, [{"gpu_milli": 250, "cpus": 128}], 1500.0, id="too-few-cpus"),
        pytest.param(
            TWO,
            HALF,
            [{"gpu_milli": 500, "share": 1}, {"gpus": 2, "share": 3}],
            1125.0,  # 0.25 * 0 + 0.75 * 1500
            id="shares-renormalised",
        ),
        pytest.param(
            node("m")
            .devices(Device(0, "A100", 40 * GB, mig=("1g.10gb",)), Device(1, "A100", 40 * GB))
            .build(),
            (),
            [{"gpu_milli": 1000}],
            0.0,
            id="mig-device-ignored",
        ),
        pytest.param(
            node("mx").devices(Device(0, "H100", 80 * GB), Device(1, "A100", 40 * GB)).build(),
            (),
            [{"gpu_milli": 500, "model": "H100"}],
            1000.0,  # the A100 is of no use to the class
            id="mixed-models",
        ),
        pytest.param(
            TWO,
            (allocation(9).task("n0", gpus=[0, 1]).build(),),
            HALVES,
            0.0,
            id="full-node",
        ),
    ],
)
def test_node_fragmentation(
    target: Node, held: tuple[Allocation, ...], mix: list[dict[str, object]], expected: float
) -> None:
    assert node_fragmentation(view_of(target, *held), parse_mix(mix)) == pytest.approx(expected)


def test_default_mix_is_normalised_and_documented_shapes() -> None:
    assert sum(c.share for c in DEFAULT_MIX) == pytest.approx(1.0)
    assert {(c.gpu_milli, c.gpus) for c in DEFAULT_MIX} == {
        (250, 1),
        (500, 1),
        (1000, 1),
        (1000, 2),
        (1000, 4),
        (1000, 8),
    }
    assert parse_mix([RequestClass(500, share=2)]) == (RequestClass(500, share=1.0),)


def test_mix_of_requests_seen() -> None:
    specs = (
        [job(i).gpus(0.5).cpus(4).spec() for i in range(5)]
        + [job(i).cpus(8).spec() for i in range(3)]
        + [job(i).gpus(2).model("V100M16|V100M32").cpus(16).spec() for i in range(2)]
        + [job(i).gpus("1g.10gb").spec() for i in range(9)]  # MIG: not modelled
    )
    assert mix_of(specs, coverage=0.8) == (
        RequestClass(gpu_milli=500, gpus=1, cpus=4.0, share=5 / 8),
        RequestClass(gpu_milli=0, gpus=0, cpus=8.0, share=3 / 8),
    )
    assert mix_of(specs, coverage=1.0)[2] == RequestClass(1000, 2, 16.0, "V100M16|V100M32", 0.2)
    assert mix_of([]) == DEFAULT_MIX
    assert mix_of([job(1).gpus("1g.10gb").spec()]) == DEFAULT_MIX


@pytest.mark.parametrize(
    "mix",
    [
        pytest.param([], id="empty"),
        pytest.param([{"gpu_milli": 0}], id="zero-milli"),
        pytest.param([{"gpu_milli": 1500}], id="over-one-gpu"),
        pytest.param([{"share": 0}], id="zero-share"),
        pytest.param([{"gpus": -1}], id="negative-gpus"),
        pytest.param([{"size": 1}], id="unknown-key"),
        pytest.param([{"gpu_milli": "lots"}], id="not-a-number"),
        pytest.param(["0.5"], id="not-a-mapping"),
    ],
)
def test_bad_mix_is_refused(mix: list[object]) -> None:
    with pytest.raises(ValidationError, match="plugins: fgd: mix"):
        FragmentationScore(mix=mix)  # type: ignore[arg-type]


# --- the score ------------------------------------------------------------------------------

# A: one device at 0.75 (a 0.25 share completes it); B: two devices at 0.5 each (fuller).
NODE_A = node("a").gpus(2).build()
NODE_B = node("b").gpus(2).build()
HELD_A = (allocation(1).task("a", gpus=[0], share=0.75).build(),)
HELD_B = (
    allocation(2).task("b", gpus=[0], share=0.5).build(),
    allocation(3).task("b", gpus=[1], share=0.5).build(),
)


def test_fgd_prefers_completing_a_device_where_packing_prefers_the_fuller_node() -> None:
    snapshot = Snapshot.build([NODE_A, NODE_B], HELD_A + HELD_B)
    a, b = snapshot.nodes["a"], snapshot.nodes["b"]
    request = request_of(job(7).gpus(0.25))
    fgd, packing = FragmentationScore(mix=HALVES), PackingScore()
    # A: F 250 -> 0, B: F 0 -> 250 (a 0.5 share no longer fits the device it joins).
    assert fgd.score(request, a) == 56.0  # trunc(100 * sigmoid(0.25))
    assert fgd.score(request, b) == 43.0  # trunc(100 * sigmoid(-0.25))
    assert packing.score(request, b) > packing.score(request, a)
    assert a.used_milli == [750, 0] and b.used_milli == [500, 500]  # views untouched


def test_whole_request_that_breaks_a_pair_scores_low() -> None:
    score = FragmentationScore(mix=[{"gpus": 2}])
    # F 0 -> 1000 (the one idle device left is no use to a 2-GPU class): sigmoid(-1)
    assert score.score(request_of(job(1).gpus(1)), view_of(TWO)) == 26.0


@pytest.mark.parametrize(
    ("builder", "held", "expected"),
    [
        pytest.param(job(1).cpus(4), (), 50.0, id="cpu-only-neutral"),
        pytest.param(
            job(1).gpus(0.5), (), 37.0, id="share-breaks-a-whole-device"
        ),  # F 0 -> 500: sigmoid(-0.5)
        pytest.param(
            job(1).gpus(1),
            HALF,
            50.0,  # takes the idle device: the half-used one stays stranded (F 500 -> 500)
            id="whole-on-half-used-neutral",
        ),
        pytest.param(
            job(1).gpus(0.75),
            (allocation(9).task("n0", gpus=[0, 1]).build(),),
            0.0,
            id="no-device-fits",
        ),
    ],
)
def test_score_cases(builder: JobBuilder, held: tuple[Allocation, ...], expected: float) -> None:
    score = FragmentationScore(mix=[{"gpu_milli": 1000, "share": 1}])
    assert score.score(request_of(builder), view_of(TWO, *held)) == expected


def test_cpu_only_work_that_leaves_a_class_without_cpus_scores_low() -> None:
    score = FragmentationScore(mix=[{"gpu_milli": 1000, "cpus": 12}])
    view = view_of(node("c").gpus(2).cpus(16).build())
    # 8 of 16 CPUs left: the class (12 CPUs) no longer fits, F 0 -> 2000: sigmoid(-2)
    assert score.score(request_of(job(1).cpus(8)), view) == 11.0
    assert score.score(request_of(job(1).cpus(4)), view) == 50.0  # 12 left: it still fits


# --- device choice inside a node -----------------------------------------------------------


def test_fgd_device_is_the_lowest_index_with_the_best_truncated_score() -> None:
    # free 700 and 500; a 0.25 share leaves 450 (F 4.5) or 250 (F 2.5) for the rare
    # 0.5 class: both score trunc(100 * sigmoid(-0.00x)) = 49, so FGD takes device 0
    mix = [{"gpu_milli": 500, "share": 1}, {"gpu_milli": 100, "share": 99}]
    view = view_of(
        TWO,
        allocation(8).task("n0", gpus=[0], share=0.3).build(),
        allocation(9).task("n0", gpus=[1], share=0.5).build(),
    )
    request = request_of(job(1).gpus(0.25))
    assert FragmentationScore(mix=mix).score(request, view) == 49.0
    assert FragmentationDeviceSelect(mix=mix).select(request, view) == [(0,)]


THREE = node("n0").gpus(3).build()
MIXED_HELD = (
    allocation(8).task("n0", gpus=[0], share=0.5).build(),
    allocation(9).task("n0", gpus=[1], share=0.25).build(),
)


@pytest.mark.parametrize(
    ("builder", "target", "held", "mix", "expected"),
    [
        pytest.param(
            job(1).gpus(0.25),
            THREE,
            MIXED_HELD,
            HALVES,
            [(1,)],  # 0.5 + 0.25 strands 250; 0.25 + 0.25 and idle leave 0: lowest index
            id="least-fragmentation-lowest-index",
        ),
        pytest.param(
            job(1).gpus(0.5),
            THREE,
            MIXED_HELD,
            HALVES,
            [(0,)],  # completes device 0
            id="completes-a-device",
        ),
        pytest.param(
            job(1).gpus(0.25),
            TWO,
            (allocation(9).task("n0", gpus=[0]).build(),),
            HALVES,
            [(1,)],
            id="never-beside-whole-task",
        ),
        pytest.param(
            job(1).gpus("A100:0.25"),
            node("mx").devices(Device(0, "H100", 80 * GB), Device(1, "A100", 40 * GB)).build(),
            (),
            HALVES,
            [(1,)],
            id="model",
        ),
        pytest.param(
            job(1).gpus(0.25).gpu_memory("60GB"),
            node("mx").devices(Device(0, "A100", 40 * GB), Device(1, "A100", 80 * GB)).build(),
            (),
            HALVES,
            [(1,)],
            id="gpu-memory",
        ),
        pytest.param(
            job(1).gpus(0.25),
            node("m")
            .devices(Device(0, "A100", 40 * GB, mig=("1g.10gb",)), Device(1, "A100", 40 * GB))
            .build(),
            (),
            HALVES,
            [(1,)],
            id="not-mig",
        ),
        pytest.param(
            job(1).gpus(0.5),
            TWO,
            (
                allocation(8).task("n0", gpus=[0], share=0.75).build(),
                allocation(9).task("n0", gpus=[1], share=0.6).build(),
            ),
            HALVES,
            None,
            id="nothing-fits",
        ),
        pytest.param(job(1).gpus(2), THREE, (), HALVES, [(0, 1)], id="whole-delegated"),
        pytest.param(job(1).cpus(2), THREE, (), HALVES, [()], id="cpu-only-delegated"),
    ],
)
def test_device_choice(
    builder: JobBuilder,
    target: Node,
    held: tuple[Allocation, ...],
    mix: list[dict[str, object]],
    expected: list[tuple[int, ...]] | None,
) -> None:
    view = view_of(target, *held)
    before = list(view.used_milli)
    assert FragmentationDeviceSelect(mix=mix).select(request_of(builder), view) == expected
    assert view.used_milli == before


def test_device_choice_differs_from_packing() -> None:
    view = view_of(THREE, *MIXED_HELD)
    request = request_of(job(1).gpus(0.25))
    assert NvlinkDeviceSelect().select(request, view) == [(0,)]  # the busiest share
    assert FragmentationDeviceSelect(mix=HALVES).select(request, view) == [(1,)]


# --- configuration and the cycle -----------------------------------------------------------

FGD_CONFIG = """
policy: {sharing: fgd}
plugins:
  - name: fgd
    args: {mix: [{gpu_milli: 500, share: 1}]}
"""


def sharing_devices(profile: Profile) -> object:
    """The device choice inside ``topology-devices`` (whatever wraps that)."""
    devices = profile.devices
    while not isinstance(devices, TopologyDeviceSelect):
        devices = devices.inner  # type: ignore[attr-defined]
    return devices.inner


def test_config_key_and_profile() -> None:
    assert load_config(None).policy.sharing == "corral"
    assert load_config("policy: {sharing: fgd}").policy.sharing == "fgd"
    with pytest.raises(ValidationError, match="sharing"):
        load_config("policy: {sharing: random}")

    plain = build_profile(load_config("policy: {sharing: packing}"))
    assert [s.name for s in plain.scores] == ["packing"]
    assert isinstance(sharing_devices(plain), NvlinkDeviceSelect)

    # the sharing policy's score replaces packing (plugins/sharing.py)
    default = build_profile(load_config("policy: {sharing: fgd}"))
    assert [s.name for s in default.scores] == ["fgd"]
    assert default.scores[0].mix == DEFAULT_MIX  # type: ignore[attr-defined]
    assert isinstance(sharing_devices(default), FragmentationDeviceSelect)

    configured = build_profile(load_config(FGD_CONFIG))
    assert [s.name for s in configured.scores] == ["fgd"]  # not added twice
    assert configured.scores[0].mix == (RequestClass(500, share=1.0),)  # type: ignore[attr-defined]
    assert sharing_devices(configured).mix == (RequestClass(500, share=1.0),)  # type: ignore[attr-defined]


def placed_nodes(text: str) -> dict[int, tuple[str, tuple[int, ...]]]:
    state = ClusterState(nodes=(NODE_A, NODE_B), allocations=HELD_A + HELD_B)
    decisions = schedule(state, [job(7).gpus(0.25).build()], load_config(text), now=0.0)
    return {a.job_id: (a.tasks[0].node, a.tasks[0].gpus) for a in decisions.placements}


def test_schedule_fgd_and_packing_choose_differently() -> None:
    assert placed_nodes("policy: {sharing: packing}") == {7: ("b", (0,))}
    assert placed_nodes(FGD_CONFIG) == {7: ("a", (0,))}


def run_stream(text: str, sizes: Sequence[float], nodes: Sequence[Node]) -> tuple[int, list]:
    """Submit fractional jobs one at a time (no departures); placed count and final views."""
    config = load_config(text)
    allocations: list[Allocation] = []
    for i, size in enumerate(sizes, start=1):
        state = ClusterState(nodes=tuple(nodes), allocations=tuple(allocations))
        decisions = schedule(state, [job(i).gpus(size).build()], config, now=float(i))
        allocations.extend(decisions.placements)
    return len(allocations), list(Snapshot.build(nodes, allocations).views())


POLICIES = (
    ("packing", "policy: {sharing: packing}"),
    ("fgd", FGD_CONFIG),
    ("corral", FGD_CONFIG.replace("fgd", "corral")),
)


def stream_results(
    seed: int, length: int, policies: Sequence[tuple[str, str]] = POLICIES[:2]
) -> dict[str, tuple[int, float]]:
    """Per policy: shares placed, and milli stranded for 0.5 shares, after ``length`` jobs."""
    rng = random.Random(seed)
    sizes = [rng.choice([0.25, 0.5, 0.5, 0.5, 0.75]) for _ in range(length)]
    nodes = [node(f"n{i}").gpus(2).build() for i in range(4)]
    mix = parse_mix(HALVES)
    results = {}
    for name, text in policies:
        count, views = run_stream(text, sizes, nodes)
        results[name] = (count, sum(node_fragmentation(v, mix) for v in views))
    return results


@pytest.mark.parametrize("length", [8, 10, 12, 40])
@pytest.mark.parametrize("seed", range(1, 9))
def test_stream_of_shares_strands_no_more_than_packing(seed: int, length: int) -> None:
    # Greedy either way: stranding less is not placing more every time (seed 2, 40 jobs:
    # packing places 18 of 40, fgd and corral 17, all stranding nothing).
    results = stream_results(seed, length, POLICIES)
    for policy in ("fgd", "corral"):
        assert results[policy][0] >= results["packing"][0] - 1
        assert results[policy][1] <= results["packing"][1]


def test_stream_where_fgd_strands_less() -> None:
    assert stream_results(5, 10) == {"packing": (10, 250.0), "fgd": (10, 0.0)}


# --- whole GPUs on a node of one model: no device choice needed ------------------------------

MIXED = node("n0").devices(Device(0, "T4", GB), Device(1, "V100", GB), Device(2, "T4", GB))


@pytest.mark.parametrize(
    ("target", "held", "builder", "shortcut"),
    [
        pytest.param(node("n0").gpus(4), (), job(1).gpus(2), True, id="empty"),
        pytest.param(node("n0").gpus(4), HALF, job(1).gpus(2), True, id="a-share-held"),
        pytest.param(node("n0").gpus(2), HALF, job(1).gpus(2), False, id="too-few-idle"),
        pytest.param(node("n0").gpus(4), (), job(1).gpus(1).model("T4"), False, id="other-model"),
        pytest.param(MIXED, (), job(1).gpus(1).model("T4"), False, id="two-models"),
    ],
)
def test_one_model_after_matches_the_device_choice(
    target, held: tuple, builder: JobBuilder, shortcut: bool
) -> None:
    view, request = view_of(target.build(), *held), request_of(builder)
    frag = Fragmentation(HALVES)
    taken = one_model_after(request, frees_of(view), frag)
    assert (taken is not None) is shortcut
    picks = NvlinkDeviceSelect().select(request, view)
    if taken is not None:
        assert picks is not None and taken == whole_after(request, view, picks)[0]
