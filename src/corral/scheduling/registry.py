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
from corral.scheduling.framework import Profile, Score
from corral.scheduling.plugins.backfill import EasyBackfill
from corral.scheduling.plugins.devices import NvlinkDeviceSelect
from corral.scheduling.plugins.fgd import FragmentationDeviceSelect, FragmentationScore
from corral.scheduling.plugins.filters import (
    NodeSelectorFilter,
    NodeStateFilter,
    ResourceFitFilter,
)
from corral.scheduling.plugins.gang import TopScoredNodes
from corral.scheduling.plugins.health import CoolHealthyNodes
from corral.scheduling.plugins.queue_sort import PriorityThenSubmission, ShortestFirst
from corral.scheduling.plugins.scoring import PackingScore
from corral.scheduling.plugins.topology import (
    NvlinkDomainFilter,
    TopologyDeviceSelect,
    TopologyNodeSet,
)

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
        PriorityThenSubmission,
        ShortestFirst,
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
    ):
        registry.register(factory.name, factory)
    if load_entry_points:
        registry.load_entry_points()
    return registry


def build_profile(config: SchedulerConfig, registry: PluginRegistry | None = None) -> Profile:
    """The profile for ``config``: built-ins plus the configured scoring plugins."""
    registry = registry or default_registry()
    extra: list[Score] = []
    for ref in config.plugins:
        plugin = registry.create(ref.name, **dict(ref.args))
        if not isinstance(plugin, Score):
            raise ValidationError(
                f"plugins: {ref.name} is not a scoring plugin (needs name, weight, score())"
            )
        plugin.weight = ref.weight
        extra.append(plugin)
    devices = registry.create("topology-devices")
    if config.policy.sharing == "fgd":
        # Fragmentation-aware sharing: the fgd score (unless configured explicitly, whose
        # mix then also drives the device choice) and fgd device choice for shares.
        fgd = next((p for p in extra if isinstance(p, FragmentationScore)), None)
        if fgd is None:
            fgd = registry.create("fgd")
            extra.insert(0, fgd)
        inner = registry.create("fgd-devices", mix=getattr(fgd, "mix", None))
        devices = registry.create("topology-devices", inner=inner)
    return Profile(
        queue_sort=registry.create(config.policy.order),
        filters=(
            registry.create("node-state"),
            registry.create("node-selector"),
            registry.create("resource-fit"),
            registry.create("nvlink-domain"),
        ),
        scores=(registry.create("packing"), *extra),
        node_set=registry.create("topology"),
        devices=devices,
        post_filters=(registry.create("easy-backfill"),) if config.policy.backfill else (),
    )
