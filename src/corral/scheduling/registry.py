"""Plugin registry: names to factories, built-ins plus third-party plugins.

An explicit object (no module-level registry): the control plane and the simulator each
build one with :func:`default_registry`. Third-party plugins come from the
``corral.plugins`` entry-point group or a dotted path (``package.module:Class``) named in
the scheduler configuration. Duplicate names are refused.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from corral.errors import ValidationError
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.framework import PostFilter, Profile, Score
from corral.scheduling.mix import LearnedMix, learned_arguments
from corral.scheduling.plugins.backfill import EasyBackfill
from corral.scheduling.plugins.corral import CorralDeviceSelect, CorralScore
from corral.scheduling.plugins.devices import NvlinkDeviceSelect
from corral.scheduling.plugins.fgd import FragmentationDeviceSelect, FragmentationScore
from corral.scheduling.plugins.filters import (
    NodeSelectorFilter,
    NodeStateFilter,
    ResourceFitFilter,
)
from corral.scheduling.plugins.gang import TopScoredNodes
from corral.scheduling.plugins.health import CoolHealthyNodes
from corral.scheduling.plugins.jct import ShortestExpectedFirst
from corral.scheduling.plugins.preemption import Preemption
from corral.scheduling.plugins.queue_sort import FairShare, PriorityThenSubmission, ShortestFirst
from corral.scheduling.plugins.scoring import PackingScore
from corral.scheduling.plugins.sharing import BestFitScore, sharing_plugins
from corral.scheduling.plugins.topology import (
    NvlinkDomainFilter,
    TopologyDeviceSelect,
    TopologyNodeSet,
)
from corral.scheduling.plugins.tpu import TpuDeviceSelect, TpuSliceNodeSet

ENTRY_POINT_GROUP = "corral.plugins"
Factory = Callable[..., Any]


class PluginRegistry:
    def __init__(self) -> None:
        self._factories: dict[str, Factory] = {}

    def register(self, name: str, factory: Factory) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, name: str, **args: Any) -> Any:
        """Instantiate a registered plugin, or one named by a dotted path."""
        factory = self._factories.get(name)
        if factory is None and (":" in name or "." in name):
            factory = _load_dotted(name)
        if factory is None:
            known = ", ".join(self.names())
            raise ValidationError(f"plugins: unknown plugin {name!r} (known: {known})")
        try:
            return factory(**args)
        except TypeError as exc:
            raise ValidationError(f"plugins: {name}: {exc}") from None

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        for ep in entry_points(group=group):
            self.register(ep.name, ep.load())


def _load_dotted(path: str) -> Factory:
    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValidationError(f"plugins: cannot load {path!r}: {exc}") from None


def default_registry(load_entry_points: bool = True) -> PluginRegistry:
    """A registry with the built-in plugins (and installed third-party ones)."""
    registry = PluginRegistry()
    for factory in (
        FairShare,
        ShortestExpectedFirst,
        PriorityThenSubmission,
        ShortestFirst,
        Preemption,
        NodeStateFilter,
        NodeSelectorFilter,
        ResourceFitFilter,
        PackingScore,
        TopScoredNodes,
        NvlinkDeviceSelect,
        EasyBackfill,
        TopologyNodeSet,
        TopologyDeviceSelect,
        NvlinkDomainFilter,
        CoolHealthyNodes,
        FragmentationScore,
        FragmentationDeviceSelect,
        TpuSliceNodeSet,
        TpuDeviceSelect,
        BestFitScore,
        CorralScore,
        CorralDeviceSelect,
    ):
        registry.register(factory.name, factory)
    if load_entry_points:
        registry.load_entry_points()
    return registry


def build_profile(
    config: SchedulerConfig,
    registry: PluginRegistry | None = None,
    learned: LearnedMix | None = None,
) -> Profile:
    """The profile for ``config``: built-ins plus the configured scoring plugins. The
    ``corral`` sharing policy takes the ``learned`` mix and supply where its configured
    arguments give none (see ``scheduling/mix.py``; nothing learned: it packs)."""
    registry = registry or default_registry()
    learned_args = learned_arguments(config, learned)
    extra: list[Score] = []
    for ref in config.plugins:
        args = dict(ref.args)
        if ref.name == config.policy.sharing:
            args = {**learned_args, **args}  # the configuration wins
        plugin = registry.create(ref.name, **args)
        if not isinstance(plugin, Score):
            raise ValidationError(
                f"plugins: {ref.name} is not a scoring plugin (needs name, weight, score())"
            )
        plugin.weight = ref.weight
        extra.append(plugin)
    # The sharing policy's node score (corral by default) and device choice for shares:
    # see plugins/sharing.py (a configured plugin of the policy's name supplies its args).
    base, inner = sharing_plugins(config.policy.sharing, registry, extra, learned_args)
    devices = registry.create("topology-devices", inner=inner)
    filters = (
        registry.create("node-state"),
        registry.create("node-selector"),
        registry.create("resource-fit"),
        registry.create("nvlink-domain"),
    )
    return Profile(
        queue_sort=_queue_sort(config, registry),
        filters=filters,
        scores=(base, *extra),
        # TPU jobs get a box of hosts in a pod and every chip of each (plugins/tpu.py)
        node_set=registry.create("tpu-slice", inner=registry.create("topology")),
        devices=registry.create("tpu-devices", inner=devices),
        post_filters=_post_filters(config, registry, filters),
    )


def _post_filters(
    config: SchedulerConfig, registry: PluginRegistry, filters: tuple
) -> tuple[PostFilter, ...]:
    """Preemption first (a job that can preempt gets its victims), then EASY backfill."""
    chosen: list[PostFilter] = []
    if config.policy.preemption:
        jct = config.policy.jct if config.policy.order == ShortestExpectedFirst.name else None
        chosen.append(registry.create("preemption", filters=filters, jct=jct))
    if config.policy.backfill:
        chosen.append(registry.create("easy-backfill"))
    return tuple(chosen)


def _queue_sort(config: SchedulerConfig, registry: PluginRegistry) -> Any:
    """The ``policy.order`` plugin (the ``jct`` order gets ``policy.jct``)."""
    if config.policy.order == ShortestExpectedFirst.name:
        return registry.create(config.policy.order, policy=config.policy.jct)
    return registry.create(config.policy.order)
