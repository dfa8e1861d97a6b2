"""The job kinds: built-in ones, and plugins from the ``corral.kinds`` entry-point group.

An entry point names a class (or an instance) with the :class:`~corral.kinds.base.JobKind`
methods; its ``name`` is what manifests write in ``kind:``. A plugin may not take a
built-in kind's name (refused with an error naming both), and two plugins may not share
one.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.metadata import entry_points
from types import MappingProxyType

from corral.kinds.base import JobKind

GROUP = "corral.kinds"


def _builtins() -> list[JobKind]:
    from corral.kinds.batch import BatchKind
    from corral.kinds.jax import JaxKind
    from corral.kinds.mpi import MpiKind
    from corral.kinds.pytorch import PyTorchKind
    from corral.kinds.ray import RayKind
    from corral.kinds.tpu import TpuKind

    return [PyTorchKind(), JaxKind(), MpiKind(), RayKind(), TpuKind(), BatchKind()]


@cache
def kinds() -> Mapping[str, JobKind]:
    """Every kind by name: built-ins first, then plugins (loaded once)."""
    found: dict[str, JobKind] = {}
    for kind in _builtins():
        found[kind.name] = kind
    for point in entry_points(group=GROUP):
        loaded = point.load()
        kind = loaded() if isinstance(loaded, type) else loaded
        if not isinstance(kind, JobKind):
            raise TypeError(f"entry point {point.name} ({point.value}) is not a job kind")
        if kind.name in found:
            raise ValueError(
                f"job kind {kind.name!r} from {point.value} is already defined "
                f"by {type(found[kind.name]).__module__}"
            )
        found[kind.name] = kind
    return MappingProxyType(found)


def get_kind(name: str) -> JobKind:
    """The kind called ``name``; ``ValueError`` naming the known ones."""
    found = kinds().get(name)
    if found is None:
        raise ValueError(f"unknown kind {name!r}; known kinds: {', '.join(sorted(kinds()))}")
    return found
