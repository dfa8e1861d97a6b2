"""Sharing policies: the BestFit formula, corral's fragmentation (scarcity weights, the CPU
balance term), its score and device choice, and how policy.sharing builds the profile."""

from __future__ import annotations

from dataclasses import replace

import pytest

from corral.core.allocation import Allocation
from corral.core.job import PlacementPolicy
from corral.core.node import Device, Node
from corral.core.resources import GpuRequest
from corral.errors import ValidationError
from corral.scheduling.config import PluginRef, Policy, SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.framework import NodeRequest, Profile
from corral.scheduling.plugins.corral import (
    CorralDeviceSelect,
    CorralFragmentation,
    CorralScore,
    cpus_per_milli,
    scarcity,
)
from corral.scheduling.plugins.devices import NvlinkDeviceSelect
from corral.scheduling.plugins.fgd import (
    Fragmentation,
    FragmentationDeviceSelect,
    FragmentationScore,
    RequestClass,
    parse_mix,
)
from corral.scheduling.plugins.scoring import PackingScore
from corral.scheduling.plugins.sharing import BestFitScore, best_fit, sharing_plugins
from corral.scheduling.plugins.topology import TopologyDeviceSelect
from corral.scheduling.registry import build_profile, default_registry
from corral.scheduling.snapshot import NodeView, Snapshot
from corral.schemas.config import load_config
from tests.builders import GB, JobBuilder, allocation, job, node


def view_of(target: Node, *held: Allocation) -> NodeView:
    return Snapshot.build([target], held).nodes[target.name]


def request_of(builder: JobBuilder, placement: str = "binpack") -> NodeRequest:
    return NodeRequest.of(builder.spec(), PlacementPolicy(placement))


# --- BestFit -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free_cpus", "cpus", "free_gpu", "gpu", "expected"),
    [
        pytest.param(128.0, 128.0, 8000, 8000, 100.0, id="fills-the-largest-node"),
        pytest.param(128.0, 0.0, 8000, 0, 0.0, id="leaves-the-largest-node-empty"),
        pytest.param(64.0, 0.0, 0, 0, 75.0, id="half-the-cpus-left"),
        pytest.param(0.0, 0.0, 4000, 0, 75.0, id="half-the-gpus-left"),
        pytest.param(96.0, 12.0, 8000, 1000, 23.0, id="g2-one-gpu"),  # 1 - (.328 + .4375)
        pytest.param(8.0, 3.152, 1000, 810, 96.0, id="p100-share-truncated"),  # 96.92
        pytest.param(16.0, 4.0, 2000, 350, 85.0, id="exactly-85-not-84.99"),  # 1 - .15
    ],
)
def test_best_fit_formula(
    free_cpus: float, cpus: float, free_gpu: int, gpu: int, expected: float
) -> None:
    assert best_fit(free_cpus, cpus, free_gpu, gpu, 128.0, 8.0) == expected


def test_best_fit_score_reads_the_node_and_request() -> None:
    score = BestFitScore()
    target = node("g").gpus(8).cpus(96).build()
    held = allocation(1).task("g", gpus=[0], share=0.5, cpus=12).build()
    # free: 84 CPUs, 7500 milli; a 0.25 share with 4 CPUs leaves 80 and 7250
    expected = best_fit(84.0, 4.0, 7500, 250, 128.0, 8.0)
    assert score.score(request_of(job(1).gpus(0.25).cpus(4)), view_of(target, held)) == expected
    assert score.score(request_of(job(1).gpus(2).cpus(4)), view_of(target, held)) == best_fit(
        84.0, 4.0, 7500, 2000, 128.0, 8.0
    )
    spread = request_of(job(1).gpus(1), "spread")
    assert score.score(spread, view_of(target)) == PackingScore().score(spread, view_of(target))
    with pytest.raises(ValidationError, match="bestfit"):
        BestFitScore(cpu_scale=0)


# --- corral's fragmentation ----------------------------------------------------------------

SUPPLY = {"T4": 2, "G2": 6}
T4_ONLY = RequestClass(gpu_milli=1000, gpus=1, model="T4", share=1.0)
ANY = RequestClass(gpu_milli=1000, gpus=1, share=1.0)


@pytest.mark.parametrize(
    ("request_class", "supply", "expected"),
    [
        pytest.param(T4_ONLY, SUPPLY, 4.0, id="a-quarter-of-the-gpus"),
        pytest.param(ANY, SUPPLY, 1.0, id="any-model"),
        pytest.param(RequestClass(0, 0, 8.0, "T4"), SUPPLY, 1.0, id="cpu-only"),
        pytest.param(RequestClass(500, 1, 0.0, "T4|G2"), SUPPLY, 1.0, id="alternatives-cover"),
        pytest.param(RequestClass(500, 1, 0.0, "A100"), SUPPLY, 1.0, id="no-such-model"),
        pytest.param(T4_ONLY, {}, 1.0, id="no-supply"),
    ],
)
def test_scarcity(request_class: RequestClass, supply: dict[str, int], expected: float) -> None:
    assert scarcity(request_class, supply, Fragmentation([ANY])) == expected


@pytest.mark.parametrize(
    ("mix", "expected"),
    [
        pytest.param([RequestClass(1000, 1, 12.0)], 0.012, id="one-class"),
        pytest.param(
            [RequestClass(500, 1, 4.0, share=1), RequestClass(1000, 2, 20.0, share=1)],
            24.0 / 2500,  # (4 + 20) CPUs over (500 + 2000) milli
            id="share-weighted",
        ),
        pytest.param(
            [RequestClass(1000, 1, 12.0), RequestClass(0, 0, 64.0)], 0.012, id="cpu-only-ignored"
        ),
        pytest.param([RequestClass(1000, 1, 0.0)], 0.0, id="no-cpus"),
    ],
)
def test_cpus_per_milli(mix: list[RequestClass], expected: float) -> None:
    assert cpus_per_milli(parse_mix(mix)) == pytest.approx(expected)


EIGHT = node("g").gpus(8, model="G2").cpus(96).build()


@pytest.mark.parametrize(
    ("held", "balance", "expected"),
    [
        # mix: whole GPUs at 12 CPUs each (r = 0.012 CPUs per milli); F (FGD part) is 0
        # while a whole GPU is idle and the class still has the CPUs it needs
        pytest.param((), 1.0, 0.0, id="empty-node-balanced"),
        pytest.param(
            (allocation(1).task("g", cpus=72).build(),),
            1.0,
            6000.0,  # 24 CPUs feed 2000 milli: 6000 stranded
            id="cpus-taken-by-cpu-only-work",
        ),
        pytest.param((allocation(1).task("g", cpus=72).build(),), 0.5, 3000.0, id="balance-weight"),
        pytest.param((allocation(1).task("g", cpus=72).build(),), 0.0, 0.0, id="fgd-alone"),
        pytest.param(
            (allocation(1).task("g", cpus=90).build(),),
            1.0,
            8000.0 + 7500.0,  # 6 CPUs: the class no longer fits (F = 8000), 500 fed
            id="class-no-longer-fits",
        ),
        pytest.param(
            (allocation(1).task("g", gpus=range(6), cpus=72).build(),),
            1.0,
            0.0,  # 24 CPUs for 2 free GPUs: exactly the ratio
            id="gpu-work-keeps-balance",
        ),
    ],
)
def test_corral_fragmentation(
    held: tuple[Allocation, ...], balance: float, expected: float
) -> None:
    frag = CorralFragmentation([RequestClass(1000, 1, 12.0)], balance=balance)
    assert frag.of(view_of(EIGHT, *held)) == pytest.approx(expected)


def test_scarce_classes_weigh_more() -> None:
    mix = [T4_ONLY, ANY]  # shares 0.5 each
    plain = CorralFragmentation(mix, balance=0.0)
    weighted = CorralFragmentation(mix, supply=SUPPLY, balance=0.0)
    assert plain.weights == (0.5, 0.5)
    assert weighted.weights == (2.0, 0.5)  # 0.5 x 8/2
    g2 = view_of(node("g").gpus(2, model="G2").build())
    # the T4 class cannot use the G2 node at all: its free 2000 milli count for it
    assert plain.of(g2) == pytest.approx(1000.0)
    assert weighted.of(g2) == pytest.approx(4000.0)


@pytest.mark.parametrize(
    "supply",
    [
        pytest.param({"T4": -1}, id="negative"),
        pytest.param({"T4": "many"}, id="not-a-number"),
        pytest.param(["T4"], id="not-a-mapping"),
    ],
)
def test_bad_supply_is_refused(supply: object) -> None:
    with pytest.raises(ValidationError, match="plugins: corral: supply"):
        CorralScore(supply=supply)  # type: ignore[arg-type]


def test_negative_balance_is_refused() -> None:
    with pytest.raises(ValidationError, match="balance"):
        CorralScore(balance=-1)


# --- corral's score and device choice ------------------------------------------------------

WHOLE_12 = [{"gpu_milli": 1000, "gpus": 1, "cpus": 12}]


@pytest.mark.parametrize(
    ("builder", "held", "expected"),
    [
        # F* 0 -> 0: neutral
        pytest.param(job(1).gpus(1).cpus(12), (), 50.0, id="balanced-whole-gpu"),
        # a whole GPU with 24 CPUs leaves 72 CPUs, which feed 6000 of the 7000 milli
        # left: F* 0 -> 1000, sigmoid(-1)
        pytest.param(job(1).gpus(1).cpus(24), (), 26.0, id="cpu-heavy-gpu-pod"),
        # CPU-only work taking 24 CPUs strands 2000 milli: sigmoid(-2)
        pytest.param(job(1).cpus(24), (), 11.0, id="cpu-only-strands"),
        # the node's CPUs already short: GPU work that feeds on them helps (F* 6000 -> 5000)
        pytest.param(
            job(1).gpus(1),
            (allocation(9).task("g", cpus=72).build(),),
            73.0,
            id="gpu-work-where-cpus-are-short",
        ),
        pytest.param(job(1).gpus("1g.10gb"), (), 50.0, id="mig-neutral"),
        pytest.param(job(1).gpus(9), (), 0.0, id="does-not-fit"),
    ],
)
def test_corral_score_cases(
    builder: JobBuilder, held: tuple[Allocation, ...], expected: float
) -> None:
    score = CorralScore(mix=WHOLE_12)
    assert score.score(request_of(builder), view_of(EIGHT, *held)) == expected


def test_corral_steers_general_work_off_scarce_models() -> None:
    t4 = view_of(node("t").gpus(2, model="T4").build())
    g2 = view_of(node("g").gpus(2, model="G2").build())
    request = request_of(job(1).gpus(1))
    mix = [{"gpu_milli": 1000, "model": "T4", "share": 1}, {"gpu_milli": 1000, "share": 3}]
    fgd = FragmentationScore(mix=mix)
    corral = CorralScore(mix=mix, supply={"T4": 2, "G2": 98})
    # FGD's pull away from the T4s is the T4 class's share (a quarter of 1000 milli) ...
    assert (fgd.score(request, t4), fgd.score(request, g2)) == (50.0, 56.0)
    # ... corral's is weighted by how scarce T4s are (x 50): sigmoid(12.5)
    assert corral.score(request, t4) == 50.0 and corral.score(request, g2) == 99.0


THREE = node("n0").gpus(3).build()


@pytest.mark.parametrize(
    ("builder", "held", "expected"),
    [
        pytest.param(
            job(1).gpus(0.5),
            (allocation(8).task("n0", gpus=[1], share=0.5).build(),),
            [(1,)],
            id="completes-a-device",
        ),
        pytest.param(
            job(1).gpus(0.25),
            (
                allocation(8).task("n0", gpus=[0], share=0.25).build(),
                allocation(9).task("n0", gpus=[2], share=0.5).build(),
            ),
            [(2,)],  # both leave F* equal for 0.25 shares: the busiest
            id="tie-goes-to-the-busiest",
        ),
        pytest.param(job(1).gpus(0.25), (), [(0,)], id="lowest-index"),
        pytest.param(job(1).gpus(2), (), [(0, 1)], id="whole-delegated"),
        pytest.param(
            job(1).gpus(0.75),
            (allocation(9).task("n0", gpus=[0, 1, 2]).build(),),
            None,
            id="nothing-fits",
        ),
    ],
)
def test_corral_device_choice(
    builder: JobBuilder, held: tuple[Allocation, ...], expected: list[tuple[int, ...]] | None
) -> None:
    view = view_of(THREE, *held)
    choice = CorralDeviceSelect(mix=[{"gpu_milli": 250, "share": 1}]).select(
        request_of(builder), view
    )
    assert choice == expected


def test_corral_device_uses_the_exact_fragmentation() -> None:
    # where FGD's truncated scores tie (see test_fgd), corral takes the device leaving less
    mix = [{"gpu_milli": 500, "share": 1}, {"gpu_milli": 100, "share": 99}]
    two = node("n0").gpus(2).build()
    view = view_of(
        two,
        allocation(8).task("n0", gpus=[0], share=0.3).build(),
        allocation(9).task("n0", gpus=[1], share=0.5).build(),
    )
    request = request_of(job(1).gpus(0.25))
    assert CorralDeviceSelect(mix=mix).select(request, view) == [(1,)]
    assert FragmentationDeviceSelect(mix=mix).select(request, view) == [(0,)]


def test_tpu_slices_and_chips_are_left_to_the_slice_selection() -> None:
    host = node("t").devices(Device(0, "v5p", 95 * GB, kind="tpu")).cpus(96).build()
    slice_request = replace(request_of(job(1)), gpus=GpuRequest(tpu="v5p"))
    for score in (CorralScore(), FragmentationScore(), BestFitScore()):
        assert score.score(slice_request, view_of(host)) == 50.0
    assert CorralFragmentation(WHOLE_12).of(view_of(host)) == 0.0  # no GPU to fragment


def test_corral_and_fgd_spread_what_asks_to_be_spread() -> None:
    spread = request_of(job(1).gpus(1), "spread")
    empty, busy = view_of(EIGHT), view_of(EIGHT, allocation(1).task("g", gpus=[0, 1]).build())
    for score in (CorralScore(), FragmentationScore()):
        assert score.score(spread, empty) > score.score(spread, busy)


# --- policy.sharing and the profile --------------------------------------------------------


def sharing_devices(profile: Profile) -> object:
    """The device choice inside ``topology-devices`` (whatever wraps that)."""
    devices = profile.devices
    while not isinstance(devices, TopologyDeviceSelect):
        devices = devices.inner  # type: ignore[attr-defined]
    return devices.inner


@pytest.mark.parametrize(
    ("policy", "score", "devices"),
    [
        pytest.param("packing", PackingScore, NvlinkDeviceSelect, id="packing"),
        pytest.param("bestfit", BestFitScore, NvlinkDeviceSelect, id="bestfit"),
        pytest.param("fgd", FragmentationScore, FragmentationDeviceSelect, id="fgd"),
        pytest.param("corral", CorralScore, CorralDeviceSelect, id="corral"),
    ],
)
def test_sharing_policy_builds_its_score_and_devices(
    policy: str, score: type, devices: type
) -> None:
    profile = build_profile(load_config(f"policy: {{sharing: {policy}}}"))
    assert [type(s) for s in profile.scores] == [score]
    assert type(sharing_devices(profile)) is devices


def test_configured_corral_arguments_reach_the_device_choice() -> None:
    text = """
policy: {sharing: corral}
plugins:
  - name: corral
    args:
      mix: [{gpu_milli: 500, cpus: 4, share: 1}]
      supply: {T4: 4, G2: 12}
      balance: 0.5
  - {name: cool-healthy, weight: 2}
"""
    profile = build_profile(load_config(text))
    assert [s.name for s in profile.scores] == ["corral", "cool-healthy"]
    devices = sharing_devices(profile)
    assert isinstance(devices, CorralDeviceSelect)
    assert devices.mix == (RequestClass(500, 1, 4.0, None, 1.0),)
    assert devices.fragmentation.supply == {"T4": 4, "G2": 12}
    assert devices.fragmentation.balance == 0.5


def test_unknown_sharing_policy() -> None:
    with pytest.raises(ValidationError, match="sharing"):
        load_config("policy: {sharing: random}")
    with pytest.raises(ValidationError, match="policy.sharing: unknown policy"):
        sharing_plugins("random", default_registry(load_entry_points=False), [])


def test_schedule_with_corral_keeps_the_scarce_model_free() -> None:
    t4 = node("a-t4").gpus(1, model="T4").build()
    g2 = node("b-g2").gpus(1, model="G2").build()
    mix = (("mix", [{"gpus": 1, "model": "T4", "share": 1}, {"gpus": 1, "share": 1}]),)
    plugins = (PluginRef("corral", 1.0, mix + (("supply", {"T4": 1, "G2": 9}),)),)
    config = SchedulerConfig(policy=Policy(sharing="corral"), plugins=plugins)
    state = ClusterState(nodes=(t4, g2))
    decisions = schedule(state, [job(1).gpus(1).build()], config, now=0.0)
    assert [t.node for a in decisions.placements for t in a.tasks] == ["b-g2"]
    plain = SchedulerConfig(policy=Policy(sharing="packing"))
    packing = schedule(state, [job(1).gpus(1).build()], plain, now=0.0)
    assert [t.node for a in packing.placements for t in a.tasks] == ["a-t4"]  # name order


def test_gpu_memory_is_respected_by_corral() -> None:
    target = node("m").devices(Device(0, "A100", 40 * GB), Device(1, "A100", 80 * GB)).build()
    request = request_of(job(1).gpus(0.25).gpu_memory("60GB"))
    assert CorralDeviceSelect().select(request, view_of(target)) == [(1,)]
