"""Scaling policy registry: names to factories, built-ins plus third-party policies.

An explicit object, as for scheduling plugins (``scheduling.registry``): built-ins
(``queue-demand``, ``duty-cycle``, ``schedule``) plus the ``corral.scaling_policies``
entry-point group. :func:`build_policies` turns ``autoscaling.policies`` into policy
objects; :func:`check_policies` is what the server and the CLI call at startup so that an
unknown name or bad arguments fail there, naming the policy, rather than at the first pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any

from corral.core.pools import AutoscalingConfig
from corral.errors import ValidationError
from corral.scheduling.scaling_demand import QueueDemand
from corral.scheduling.scaling_policies import DutyCycle, ScalingPolicy, Schedule

ENTRY_POINT_GROUP = "corral.scaling_policies"
Factory = Callable[..., Any]
WHERE = "autoscaling.policies"


class ScalingPolicyRegistry:
    def __init__(self) -> None:
        self._factories: dict[str, Factory] = {}

    def register(self, name: str, factory: Factory) -> None:
        if name in self._factories:
            raise ValueError(f"scaling policy {name!r} is already registered")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, name: str, args: Mapping[str, object] | None = None) -> ScalingPolicy:
        """The policy ``name`` built with ``args``; ``ValidationError`` naming it (and the
        known ones) when it is unknown, its arguments are wrong, or it is no policy."""
        factory = self._factories.get(name)
        if factory is None:
            known = ", ".join(self.names()) or "none"
            raise ValidationError(f"{WHERE}: unknown policy {name!r} (known: {known})")
        try:
            policy = factory(**dict(args or {}))
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"{WHERE}: {name}: {exc}") from None
        if not isinstance(policy, ScalingPolicy):
            raise ValidationError(
                f"{WHERE}: {name} is not a scaling policy (needs name and demand(view))"
            )
        return policy

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        for ep in entry_points(group=group):
            try:
                factory = ep.load()
            except Exception as exc:  # a broken plugin: say which, at startup
                where = f"{WHERE}: cannot load {ep.name!r} ({ep.value})"
                raise ValidationError(f"{where}: {exc}") from None
            self.register(ep.name, factory)


def default_policy_registry(load_entry_points: bool = True) -> ScalingPolicyRegistry:
    """A registry with the built-in policies (and installed third-party ones)."""
    registry = ScalingPolicyRegistry()
    for factory in (QueueDemand, DutyCycle, Schedule):
        registry.register(factory.name, factory)
    if load_entry_points:
        registry.load_entry_points()
    return registry


def build_policies(
    config: AutoscalingConfig, registry: ScalingPolicyRegistry | None = None
) -> tuple[ScalingPolicy, ...]:
    """The policies ``config.policies`` names, in order, built with their arguments."""
    registry = registry or default_policy_registry()
    return tuple(registry.create(name, dict(args)) for name, args in config.policies)


def check_policies(
    config: AutoscalingConfig,
    registry: ScalingPolicyRegistry | None = None,
    pools: Sequence[str] | None = None,
) -> tuple[ScalingPolicy, ...]:
    """Validate ``config.policies`` (and, given the declared ``pools``' names, the pools
    the policies name); ``ValidationError`` naming the policy otherwise. Returns the
    built policies, to pass to every ``autoscale`` call."""
    policies = build_policies(config, registry)
    if pools is not None:
        for policy in policies:
            check = getattr(policy, "check_pools", None)
            if check is None:
                continue
            try:
                check(list(pools))
            except ValueError as exc:
                raise ValidationError(f"{WHERE}: {policy.name}: {exc}") from None
    return policies
