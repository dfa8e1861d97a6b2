"""The plugin registry: built-ins, refusals, dotted-path loading, and configured profiles."""

from __future__ import annotations

import pytest

from corral.core.job import PlacementPolicy
from corral.errors import ValidationError
from corral.scheduling.config import JctPolicy, PluginRef, Policy, SchedulerConfig
from corral.scheduling.cycle import schedule
from corral.scheduling.framework import NodeRequest, Profile
from corral.scheduling.plugins.backfill import EasyBackfill
from corral.scheduling.plugins.corral import CorralDeviceSelect, CorralScore
from corral.scheduling.plugins.filters import (
    NodeSelectorFilter,
    NodeStateFilter,
    ResourceFitFilter,
)
from corral.scheduling.plugins.gang import TopScoredNodes  # noqa: F401
from corral.scheduling.plugins.jct import ShortestExpectedFirst
from corral.scheduling.plugins.preemption import Preemption
from corral.scheduling.plugins.queue_sort import PriorityThenSubmission
from corral.scheduling.plugins.scoring import PackingScore
from corral.scheduling.plugins.topology import (
    NvlinkDomainFilter,
    TopologyDeviceSelect,
    TopologyNodeSet,
)
from corral.scheduling.plugins.tpu import TpuDeviceSelect, TpuSliceNodeSet
from corral.scheduling.registry import PluginRegistry, build_profile, default_registry
from corral.scheduling.snapshot import NodeView
from tests.builders import allocation, cluster, job, node


class PreferLabel:
    """A third-party score defined here, loaded by its dotted path: 100 on labelled nodes."""

    name = "prefer-label"
    weight = 1.0

    def __init__(self, label: str = "fast") -> None:
        self.label = label

    def score(self, request: NodeRequest, node: NodeView) -> float:
        return 100.0 if node.node.label_map.get(self.label) == "yes" else 0.0


class NotAScore:
    name = "not-a-score"


BUILT_INS = [
    "bestfit",
    "cool-healthy",
    "corral",
    "corral-devices",
    "easy-backfill",
    "fair-share",
    "fgd",
    "fgd-devices",
    "jct",
    "node-selector",
    "node-state",
    "nvlink-devices",
    "nvlink-domain",
    "packing",
    "preemption",
    "priority-fifo",
    "resource-fit",
    "shortest-first",
    "top-scored",
    "topology",
    "topology-devices",
    "tpu-devices",
    "tpu-slice",
]


def registry() -> PluginRegistry:
    return default_registry(load_entry_points=False)


def test_default_registry_has_the_built_ins() -> None:
    assert registry().names() == BUILT_INS


@pytest.mark.parametrize("name", BUILT_INS)
def test_duplicate_registration_is_refused(name: str) -> None:
    reg = registry()
    with pytest.raises(ValueError, match=f"plugin '{name}' is already registered"):
        reg.register(name, PreferLabel)


def test_register_then_create_by_name() -> None:
    reg = PluginRegistry()
    reg.register("prefer-label", PreferLabel)
    plugin = reg.create("prefer-label", label="gpu")
    assert isinstance(plugin, PreferLabel)
    assert plugin.label == "gpu"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param(
            "nope", "plugins: unknown plugin 'nope' (known: bestfit, cool-healthy", id="unknown"
        ),
        pytest.param(
            "does.not.exist:Thing", "plugins: cannot load 'does.not.exist:Thing'", id="no-module"
        ),
        pytest.param(f"{__name__}:Missing", "plugins: cannot load", id="no-attribute"),
        pytest.param(f"{__name__}.Missing", "plugins: cannot load", id="no-attribute-dotted"),
    ],
)
def test_unknown_plugin_is_a_validation_error(path: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        registry().create(path)
    assert info.value.message.startswith(message)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(f"{__name__}:PreferLabel", id="colon"),
        pytest.param(f"{__name__}.PreferLabel", id="dots"),
    ],
)
def test_dotted_path_loading(path: str) -> None:
    plugin = registry().create(path, label="nvme")
    assert isinstance(plugin, PreferLabel)
    assert plugin.label == "nvme"


def test_bad_plugin_arguments_are_a_validation_error() -> None:
    with pytest.raises(ValidationError, match=r"plugins: .*PreferLabel: .*colour"):
        registry().create(f"{__name__}:PreferLabel", colour="red")


def test_entry_point_group_without_plugins_adds_nothing() -> None:
    reg = registry()
    reg.load_entry_points(group="corral.plugins.none-here")
    assert reg.names() == BUILT_INS


def test_default_profile_is_the_built_in_pipeline() -> None:
    profile = build_profile(SchedulerConfig(), registry())
    assert isinstance(profile, Profile)
    assert isinstance(profile.queue_sort, ShortestExpectedFirst)
    assert profile.queue_sort.policy == JctPolicy()
    assert [type(f) for f in profile.filters] == [
        NodeStateFilter,
        NodeSelectorFilter,
        ResourceFitFilter,
        NvlinkDomainFilter,
    ]
    assert [type(s) for s in profile.scores] == [CorralScore]  # packs until it learns a mix
    assert not profile.scores[0].mix  # type: ignore[attr-defined]
    assert isinstance(profile.node_set, TpuSliceNodeSet)  # TPU slices, else topology
    assert isinstance(profile.node_set.inner, TopologyNodeSet)
    assert isinstance(profile.devices, TpuDeviceSelect)
    assert isinstance(profile.devices.inner, TopologyDeviceSelect)
    assert isinstance(profile.devices.inner.inner, CorralDeviceSelect)
    preemption, backfill = profile.post_filters  # preemption first, then EASY backfill
    assert isinstance(preemption, Preemption) and preemption.jct == JctPolicy()
    assert isinstance(backfill, EasyBackfill)


def test_legacy_profile_is_strict_fifo() -> None:
    config = SchedulerConfig(
        policy=Policy(order="priority-fifo", backfill=False, preemption=False, sharing="packing")
    )
    profile = build_profile(config, registry())
    assert isinstance(profile.queue_sort, PriorityThenSubmission)
    assert [type(s) for s in profile.scores] == [PackingScore]
    assert profile.post_filters == ()


def test_priority_preemption_without_the_jct_order_preempts_for_priority_only() -> None:
    profile = build_profile(SchedulerConfig(policy=Policy(order="fair-share")), registry())
    assert [p.jct for p in profile.post_filters if isinstance(p, Preemption)] == [None]


def test_configured_scoring_plugin_gets_its_weight_and_args() -> None:
    ref = PluginRef(f"{__name__}:PreferLabel", weight=2.5, args=(("label", "nvme"),))
    config = SchedulerConfig(policy=Policy(sharing="packing"), plugins=(ref,))
    profile = build_profile(config, registry())
    assert [type(s) for s in profile.scores] == [PackingScore, PreferLabel]
    extra = profile.scores[1]
    assert isinstance(extra, PreferLabel)
    assert (extra.weight, extra.label) == (2.5, "nvme")


def test_configured_plugin_by_registered_name() -> None:
    reg = registry()
    reg.register("prefer-label", PreferLabel)
    profile = build_profile(SchedulerConfig(plugins=(PluginRef("prefer-label", 4.0),)), reg)
    assert profile.scores[1].weight == 4.0


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param(f"{__name__}:NotAScore", "is not a scoring plugin", id="no-score-method"),
        pytest.param("node-state", "node-state is not a scoring plugin", id="a-filter"),
        pytest.param("no-such-plugin", "unknown plugin 'no-such-plugin'", id="unknown"),
    ],
)
def test_build_profile_refuses_what_cannot_score(name: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        build_profile(SchedulerConfig(plugins=(PluginRef(name),)), registry())


@pytest.mark.parametrize(
    ("weight", "chosen"),
    [
        pytest.param(None, "busy", id="binpack-alone-picks-fuller"),
        pytest.param(0.1, "busy", id="light-weight-loses-to-binpack"),
        pytest.param(1.0, "fast", id="weight-one-outweighs-binpack"),
    ],
)
def test_configured_weight_changes_the_placement(weight: float | None, chosen: str) -> None:
    # binpack: 'busy' scores 75 (6 of 8 after), 'fast' 25; the plugin adds weight * 100 on 'fast'.
    plugins = () if weight is None else (PluginRef(f"{__name__}:PreferLabel", weight),)
    config = SchedulerConfig(plugins=plugins, policy=Policy(placement=PlacementPolicy.BINPACK))
    state = cluster(
        node("busy").gpus(8),
        node("fast").gpus(8).labels(fast="yes"),
        allocations=[allocation(9).task("busy", gpus=[0, 1, 2, 3]).build()],
    )
    decisions = schedule(state, [job(1).gpus(2).build()], config, now=0.0)
    (placed,) = decisions.placements
    assert placed.nodes == (chosen,)
