"""Node pools (SPEC section 10): what a pool adds, and the state of what it added.

A pool grows and shrinks in **units**: one node for a GPU or CPU pool, one whole TPU
slice (all its hosts) for a TPU pool. Unit ``i`` of pool ``p`` is named ``p-i``; its
nodes are named ``p-i`` (a one-node unit) or ``p-i-h000`` onwards (a slice's hosts, the
slice being TPU pod ``p-i``), and carry the labels ``corral.pool=p`` and
``corral.pool/unit=p-i`` beside the template's.

Pure data and helpers, no I/O: the control plane and the simulator keep ``Unit`` records
and hand them, with the pools, to the autoscaler (``corral.scheduling.autoscaler``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from corral.core.node import Node
from corral.core.tpu import POD_LABEL

POOL_LABEL = "corral.pool"
UNIT_LABEL = "corral.pool/unit"


@dataclass(frozen=True)
class Pool:
    """A declared pool. ``template``: the nodes of one unit (one node; or a TPU slice's
    hosts, in worker order), names and pool labels aside. ``min``/``max`` count units.
    ``cost_per_hour`` is per node (a TPU pool: per host). ``interruption_rate``: spot
    interruptions per node-hour, for the simulator only."""

    name: str
    template: tuple[Node, ...]
    min: int = 0
    max: int = 1
    provider: str = "local"
    provisioning_time: float = 180.0
    cost_per_hour: float = 0.0
    spot: bool = False
    interruption_rate: float = 0.0
    provider_args: tuple[tuple[str, str], ...] = ()

    @property
    def tpu(self) -> bool:
        return any(n.tpu_chips for n in self.template)

    @property
    def hosts_per_unit(self) -> int:
        return len(self.template)

    @property
    def unit_cost_per_hour(self) -> float:
        return self.cost_per_hour * len(self.template)

    def unit_name(self, index: int) -> str:
        return f"{self.name}-{index}"

    def unit_node_names(self, unit: str) -> tuple[str, ...]:
        """The names of :meth:`unit_nodes` (without building the nodes)."""
        if self.tpu:
            return tuple(f"{unit}-h{k:03d}" for k in range(len(self.template)))
        return (unit,) * len(self.template)

    def unit_nodes(self, unit: str) -> tuple[Node, ...]:
        """The nodes of unit ``unit`` (a name from :meth:`unit_name`), labelled."""
        nodes = []
        for k, node in enumerate(self.template):
            labels = dict(node.labels)
            if self.tpu:
                labels[POD_LABEL] = unit
                name = f"{unit}-h{k:03d}"
            else:
                name = unit
            labels[POOL_LABEL] = self.name
            labels[UNIT_LABEL] = unit
            nodes.append(replace(node, name=name, labels=tuple(sorted(labels.items()))))
        return tuple(nodes)

    def describe_unit(self) -> str:
        """``'1 node (8x H100)'`` / ``'1 v5p 2x2x4 slice (4 hosts)'`` for reasons."""
        node = self.template[0]
        if self.tpu:
            labels = node.label_map
            shape = labels.get("tpu.corral/pod-shape", "?")
            generation = node.devices[0].model if node.devices else "TPU"
            return f"a {generation} {shape} slice ({len(self.template)} hosts)"
        if node.devices:
            return f"a node ({len(node.devices)}x {node.devices[0].model})"
        return f"a node ({node.cpus:g} CPUs)"


class UnitPhase(StrEnum):
    PROVISIONING = "provisioning"  # asked of the provider; not all its nodes registered yet
    READY = "ready"  # every node registered
    DRAINING = "draining"  # leaving: its nodes take no new work; deleted once empty
    DELETING = "deleting"  # asked of the provider to delete it
    FAILED = "failed"  # provisioning failed or timed out (deleted; counts for backoff)


@dataclass(frozen=True)
class Unit:
    """One unit of a pool as its keeper (control plane or simulator) tracks it.

    ``since``: when it entered ``phase``; ``requested_at``: when it was asked for.
    ``idle_since``: since when none of its nodes has held any allocation (None: busy now,
    or not ready). ``deadline``: a spot notice's, when it must be gone (None: none).
    """

    name: str
    pool: str
    phase: UnitPhase
    since: float
    requested_at: float
    nodes: tuple[str, ...]
    idle_since: float | None = None
    deadline: float | None = None
    reason: str = ""

    @property
    def counts(self) -> bool:
        """Whether it counts toward the pool's size (provisioning or there)."""
        return self.phase in (UnitPhase.PROVISIONING, UnitPhase.READY)


@dataclass(frozen=True)
class PoolFailures:
    """Recent provisioning failures of a pool: ``count`` in a row, the last at ``last``."""

    count: int = 0
    last: float = -math.inf


@dataclass(frozen=True)
class AutoscalingConfig:
    """``scheduler.yaml`` ``autoscaling:``. ``scale_down_idle``: seconds a unit stays idle
    before it is removed. ``max_cost_per_hour``: the cap on all pools' units together
    (None: none). ``provisioning_timeout``: a unit not ready after this many times its
    pool's ``provisioning_time`` (at least ``min_timeout`` seconds) is given up.
    ``backoff``/``max_backoff``: seconds before a pool is tried again after a failure,
    doubling per failure in a row. ``policies``: names with their arguments.
    ``consolidate``: move the jobs off units less than ``consolidate_below`` used when
    they fit elsewhere and lose at most ``consolidate_max_loss`` seconds of work."""

    scale_down_idle: float = 600.0
    max_cost_per_hour: float | None = None
    policies: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = (("queue-demand", ()),)
    provisioning_timeout: float = 3.0
    min_timeout: float = 300.0
    backoff: float = 60.0
    max_backoff: float = 1800.0
    enabled: bool = True
    # consolidating scale-down (``scheduling.scaling_consolidate``)
    consolidate: bool = True
    consolidate_below: float = 0.75  # of a unit's GPUs allocated
    consolidate_max_loss: float = 600.0  # seconds of work a moved job may lose

    def timeout(self, pool: Pool) -> float:
        return max(self.min_timeout, self.provisioning_timeout * pool.provisioning_time)

    def retry_after(self, failures: PoolFailures) -> float:
        """When a pool with ``failures`` may be tried again."""
        if failures.count <= 0:
            return -math.inf
        wait = min(self.max_backoff, self.backoff * 2 ** (failures.count - 1))
        return failures.last + wait
