"""Nodes and their devices."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from corral.core.resources import model_matches
from corral.core.tpu import GPU, TPU, TpuHost, host_of


class NodeState(StrEnum):
    READY = "ready"
    DRAINING = "draining"  # keeps its running work, takes no new work
    LOST = "lost"  # stopped heartbeating; its work was requeued or failed

    @property
    def schedulable(self) -> bool:
        return self is NodeState.READY


@dataclass(frozen=True)
class Device:
    """One accelerator: its index on the node, model, memory and NVLink domain.

    ``kind`` is ``"gpu"`` or ``"tpu"`` (a TPU chip, whose ``model`` is its generation): GPU
    requests never count TPU chips, and TPU hosts take only TPU slices.
    """

    index: int
    model: str
    memory: int
    nvlink_domain: int = 0
    uuid: str | None = None
    mig: tuple[str, ...] = ()  # declared MIG instances (profiles); empty: not in MIG mode
    kind: str = GPU


@dataclass(frozen=True)
class Node:
    """A node as registered by its agent (or declared in a cluster file)."""

    name: str
    devices: tuple[Device, ...] = ()
    cpus: float = 0.0
    memory: int = 0
    network: tuple[str, ...] = ()  # path in the network tree, outermost first
    labels: tuple[tuple[str, str], ...] = ()
    state: NodeState = NodeState.READY
    address: str = "127.0.0.1"
    attributes: tuple[tuple[str, float], ...] = field(default=(), compare=False)

    @property
    def gpu_count(self) -> int:
        return len(self.devices)

    @cached_property
    def label_map(self) -> dict[str, str]:
        """Labels as a mapping (computed once per node object; do not mutate)."""
        return dict(self.labels)

    def capacity(self, model: str | None) -> int:
        """Devices (not in MIG mode) whose model matches ``model``: memoized per node."""
        cache = self._capacity_cache
        count = cache.get(model)
        if count is None:
            count = cache[model] = sum(
                1
                for d in self.devices
                if not d.mig and d.kind == GPU and model_matches(d.model, model)
            )
        return count

    @cached_property
    def _capacity_cache(self) -> dict[str | None, int]:
        return {}

    @cached_property
    def tpu_chips(self) -> int:
        """TPU chips of the node: a node with any is a TPU host (it takes only TPU slices)."""
        return sum(1 for d in self.devices if d.kind == TPU)

    @cached_property
    def tpu_host(self) -> TpuHost | None:
        """Where this TPU host sits in its pod (from its labels), None if it does not say."""
        return host_of(self.label_map) if self.tpu_chips else None

    @property
    def models(self) -> frozenset[str]:
        return frozenset(d.model for d in self.devices)
