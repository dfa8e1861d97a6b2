"""The request mix learned from the jobs seen (scheduling/mix.py) and how the profile
takes it (registry.build_profile, the corral sharing policy)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from corral.core.job import JobSpec
from corral.core.node import Device
from corral.scheduling.config import PluginRef, Policy, SchedulerConfig
from corral.scheduling.mix import (
    LearnedMix,
    MixLearner,
    gpu_supply,
    learned_arguments,
    learns_mix,
)
from corral.scheduling.plugins.corral import CorralDeviceSelect, CorralScore
from corral.scheduling.plugins.fgd import RequestClass
from corral.scheduling.plugins.scoring import PackingScore
from corral.scheduling.registry import build_profile, default_registry
from corral.schemas.config import load_config
from tests.builders import allocation, job, node
from tests.unit.scheduling.test_sharing import request_of, sharing_devices, view_of

ONE = job(0).gpus(1).cpus(8).spec()  # (8 CPUs, 1000 milli, 1 GPU, any model)
EIGHT = job(0).gpus(8).cpus(64).spec()
HALF = job(0).gpus(0.5).cpus(4).spec()
T4 = job(0).gpus(1).model("T4").spec()
CPU = job(0).gpus(0).cpus(16).spec()
MIG = job(0).gpus("1g.10gb").spec()


def shares(mix: LearnedMix) -> list[tuple[tuple[float, int, int, str | None], float]]:
    return [((c.cpus, c.gpu_milli, c.gpus, c.model), round(c.share, 4)) for c in mix.classes]


def learner_with(live: Sequence[JobSpec], ended: Sequence[JobSpec] = (), window: int = 100):
    learner = MixLearner(window=window)
    for i, spec in enumerate(ended):
        learner.add(("ended", i), spec)
        learner.end(("ended", i))
    for i, spec in enumerate(live):
        learner.add(i, spec)
    return learner


@pytest.mark.parametrize(
    ("live", "ended", "window", "expected"),
    [
        pytest.param([], [], 100, [], id="nothing-seen"),
        pytest.param([ONE, ONE], [], 100, [((8.0, 1000, 1, None), 1.0)], id="one-class"),
        pytest.param(
            [HALF, ONE, HALF, CPU],
            [],
            100,
            [((4.0, 500, 1, None), 0.5), ((8.0, 1000, 1, None), 0.25), ((16.0, 0, 0, None), 0.25)],
            id="by-count-then-smaller-key",
        ),
        pytest.param(
            [ONE] * 19 + [EIGHT],
            [],
            100,
            [((8.0, 1000, 1, None), 1.0)],
            id="the-5-percent-tail-is-dropped",
        ),
        pytest.param(
            [ONE] * 9 + [EIGHT],
            [],
            100,
            [((8.0, 1000, 1, None), 0.9), ((64.0, 1000, 8, None), 0.1)],
            id="kept-until-95-percent",
        ),
        pytest.param(
            [T4, MIG, MIG, MIG], [], 100, [((0.0, 1000, 1, "T4"), 1.0)], id="mig-not-counted"
        ),
        pytest.param(
            [HALF],
            [ONE, ONE, ONE],
            100,
            [((8.0, 1000, 1, None), 0.75), ((4.0, 500, 1, None), 0.25)],
            id="ended-jobs-count",
        ),
        pytest.param(
            [HALF],
            [ONE, ONE, EIGHT],
            1,
            [((4.0, 500, 1, None), 0.5), ((64.0, 1000, 8, None), 0.5)],
            id="only-the-last-window-ended",
        ),
        pytest.param([HALF], [ONE, ONE], 0, [((4.0, 500, 1, None), 1.0)], id="no-window"),
    ],
)
def test_learned_mix(
    live: list[JobSpec], ended: list[JobSpec], window: int, expected: list
) -> None:
    learner = learner_with(live, ended, window)
    assert shares(learner.learned({"H100": 8})) == expected


def test_sync_adds_the_new_and_ends_the_gone() -> None:
    learner = MixLearner(window=10)
    learner.sync([(1, ONE), (2, HALF)])
    learner.sync([(2, HALF), (3, HALF)])  # 1 ended: recent; 2 counted once
    assert learner.jobs == 3
    assert shares(learner.learned({})) == [
        ((4.0, 500, 1, None), 0.6667),
        ((8.0, 1000, 1, None), 0.3333),
    ]
    learner.sync([])
    assert learner.jobs == 3  # all three ended, within the window


def test_the_same_calls_give_the_same_mix() -> None:
    def run() -> LearnedMix:
        learner = MixLearner(window=3)
        for i, spec in enumerate([ONE, HALF, CPU, EIGHT, T4, HALF, ONE] * 5):
            learner.add(i, spec)
            if i % 2:
                learner.end(i - 1)
        return learner.learned({"H100": 8, "T4": 2})

    assert run() == run()


A = RequestClass(1000, 1, 8.0, None, 0.5)
B = RequestClass(500, 1, 4.0, None, 0.5)


def mix(*classes: RequestClass, supply: dict[str, int] | None = None) -> LearnedMix:
    return LearnedMix(tuple(classes), tuple(sorted((supply or {"H100": 8}).items())))


def moved(by: float) -> tuple[RequestClass, RequestClass]:
    return (
        RequestClass(1000, 1, 8.0, None, 0.5 + by),
        RequestClass(500, 1, 4.0, None, 0.5 - by),
    )


@pytest.mark.parametrize(
    ("before", "after", "differs"),
    [
        pytest.param(mix(A, B), mix(A, B), False, id="same"),
        pytest.param(mix(A, B), mix(*moved(0.04)), False, id="shares-moved-4-points"),
        pytest.param(mix(A, B), mix(*moved(0.06)), True, id="shares-moved-6-points"),
        pytest.param(
            mix(A, B),
            mix(*moved(0.0), RequestClass(250, 1, share=0.02)),
            False,
            id="a-small-new-class",
        ),
        pytest.param(mix(), mix(A), True, id="first-mix"),
        pytest.param(mix(A), mix(), True, id="mix-gone"),
        pytest.param(mix(A), mix(A, supply={"H100": 8, "T4": 1}), True, id="new-gpu-model"),
        pytest.param(mix(A), mix(A, supply={"H100": 9}), False, id="more-of-the-same-gpus"),
        pytest.param(
            mix(A, supply={"H100": 8, "T4": 8}),
            mix(A, supply={"H100": 8, "T4": 2}),
            True,
            id="gpu-shares-moved",
        ),
    ],
)
def test_material_change(before: LearnedMix, after: LearnedMix, differs: bool) -> None:
    assert before.differs(after) is differs


def test_refresh_hands_back_a_mix_only_when_it_changed_materially() -> None:
    learner = MixLearner()  # tolerance 0.05, churn 0.25
    supply = {"H100": 8}
    assert learner.refresh(supply) is not None  # the supply, nothing learned yet
    assert learner.refresh(supply) is None
    for i in range(100):
        learner.add(i, ONE)
    first = learner.refresh(supply)
    assert first is not None and shares(first) == [((8.0, 1000, 1, None), 1.0)]
    for i in range(100, 120):  # 20 of 120 (17%): a share moved, but too few jobs seen
        learner.add(i, HALF)
    assert learner.refresh(supply) is None
    for i in range(120, 150):  # 50 of 150: the shares moved by 33 points
        learner.add(i, HALF)
    second = learner.refresh(supply)
    assert second is not None and learner.current is second
    assert [c.gpu_milli for c in second.classes] == [1000, 500]
    for i in range(150, 200):  # as many again, in the same proportions: no new mix
        learner.add(i, ONE if i % 3 else HALF)
    assert learner.refresh(supply) is None
    assert learner.refresh({"H100": 8, "A100": 8}) is not None  # a new GPU model


def test_gpu_supply_counts_gpus_per_model_but_not_mig_ones() -> None:
    nodes = [
        node("a").gpus(2, model="T4").build(),
        node("b").devices(Device(0, "A100", 1, mig=("1g.10gb",)), Device(1, "A100", 1)).build(),
    ]
    assert gpu_supply(nodes) == {"A100": 1, "T4": 2}


GIVEN = (("mix", ({"gpu_milli": 250, "share": 1},)),)
SUPPLY = (("supply", {"H100": 4}),)


@pytest.mark.parametrize(
    ("config", "learns"),
    [
        pytest.param(SchedulerConfig(), True, id="default"),
        pytest.param(SchedulerConfig(policy=Policy(sharing="packing")), False, id="packing"),
        pytest.param(SchedulerConfig(policy=Policy(sharing="fgd")), False, id="fgd"),
        pytest.param(
            SchedulerConfig(plugins=(PluginRef("corral", args=GIVEN),)), True, id="mix-given"
        ),
        pytest.param(
            SchedulerConfig(plugins=(PluginRef("corral", args=GIVEN + SUPPLY),)),
            False,
            id="mix-and-supply-given",
        ),
    ],
)
def test_which_configurations_learn(config: SchedulerConfig, learns: bool) -> None:
    assert learns_mix(config) is learns
    assert bool(learned_arguments(config, None)) is (config.policy.sharing == "corral")


def registry():
    return default_registry(load_entry_points=False)


def test_the_default_profile_is_corral_and_packs_until_it_learns() -> None:
    assert load_config(None).policy.sharing == "corral"
    profile = build_profile(SchedulerConfig(), registry())
    score, devices = profile.scores[0], sharing_devices(profile)
    assert isinstance(score, CorralScore) and isinstance(devices, CorralDeviceSelect)
    assert score.mix == () and devices.mix == ()
    # nothing learned: the packing score and the busiest fitting device
    held = (
        allocation(1).task("a", gpus=[0], share=0.5).build(),
        allocation(2).task("a", gpus=[2], share=0.25).build(),
    )
    view = view_of(node("a").gpus(4).build(), *held)
    for request in (request_of(job(1).gpus(1)), request_of(job(2).gpus(0.25))):
        assert score.score(request, view) == PackingScore().score(request, view)
    assert devices.select(request_of(job(2).gpus(0.25)), view) == [(0,)]


def test_a_learned_mix_reaches_the_score_and_the_device_choice() -> None:
    learned = mix(A, B, supply={"H100": 8, "T4": 2})
    profile = build_profile(SchedulerConfig(), registry(), learned)
    score = profile.scores[0]
    assert isinstance(score, CorralScore)
    assert score.mix == (A, B) and sharing_devices(profile).mix == (A, B)
    assert score.fragmentation.supply == {"H100": 8, "T4": 2}


def test_a_configured_mix_wins_over_the_learned_one() -> None:
    text = """
plugins:
  - name: corral
    args: {mix: [{gpu_milli: 250, share: 1}], balance: 2}
"""
    learned = mix(A, B, supply={"T4": 2})
    profile = build_profile(load_config(text), registry(), learned)
    score = profile.scores[0]
    assert [s.name for s in profile.scores] == ["corral"]
    assert score.mix == (RequestClass(250, share=1.0),)  # type: ignore[attr-defined]
    assert score.fragmentation.supply == {"T4": 2}  # type: ignore[attr-defined]  # learned
    assert score.fragmentation.balance == 2  # type: ignore[attr-defined]
    assert sharing_devices(profile).mix == (RequestClass(250, share=1.0),)


def test_other_policies_ignore_a_learned_mix() -> None:
    profile = build_profile(load_config("policy: {sharing: fgd}"), registry(), mix(A))
    assert profile.scores[0].mix != (A,)  # type: ignore[attr-defined]  # fgd's built-in mix
