"""Providers by name: the built-in ``local`` and ``sim``, and plugins from the entry-point
group ``corral.providers`` (each a :class:`~corral.providers.base.Provider` subclass)."""

from __future__ import annotations

from importlib.metadata import entry_points

from corral.core.pools import Pool
from corral.errors import ValidationError
from corral.providers.base import Provider, ProviderContext

GROUP = "corral.providers"
SIMULATED = "sim"  # the simulator's: ``corral sim`` is its own provider


def known() -> dict[str, type[Provider] | None]:
    """Provider classes by name (``sim``: None, the simulator's own)."""
    from corral.providers.local import LocalProvider

    found: dict[str, type[Provider] | None] = {"local": LocalProvider, SIMULATED: None}
    for point in entry_points(group=GROUP):
        if point.name in found:
            continue
        try:
            cls = point.load()
        except Exception as exc:  # noqa: BLE001 -- a broken plugin is named, not fatal
            raise ValidationError(f"provider plugin {point.name!r} failed to load: {exc}") from None
        if not (isinstance(cls, type) and issubclass(cls, Provider)):
            raise ValidationError(f"provider plugin {point.name!r} is not a Provider subclass")
        found[point.name] = cls
    return found


def check_pools(pools: tuple[Pool, ...], simulated: bool = False, source: str = "cluster") -> None:
    """Refuse pools whose provider is unknown (or is ``sim`` outside the simulator);
    messages start with ``source`` (the cluster file)."""
    providers = known()
    for i, pool in enumerate(pools):
        if pool.provider not in providers:
            names = ", ".join(sorted(providers))
            raise ValidationError(
                f"{source}: pools.{i}.provider: unknown provider {pool.provider!r} "
                f"(known: {names}; plugins register in the entry-point group {GROUP})"
            )
        if pool.provider == SIMULATED and not simulated:
            raise ValidationError(
                f"{source}: pools.{i}.provider: 'sim' is the simulator's (corral sim); a cluster "
                "needs 'local' or a plugin"
            )
        cls = providers[pool.provider]
        if cls is not None:
            try:
                cls.check(pool)
            except ValueError as exc:
                raise ValidationError(f"{source}: pools.{i}: {exc}") from None


def create_providers(pools: tuple[Pool, ...], context: ProviderContext) -> dict[str, Provider]:
    """One provider instance per provider name the pools use."""
    check_pools(pools)
    providers = known()
    made: dict[str, Provider] = {}
    for pool in pools:
        cls = providers[pool.provider]
        if pool.provider not in made and cls is not None:
            made[pool.provider] = cls(context)
    return made
