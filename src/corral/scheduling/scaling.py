"""What the autoscaler is given and what it decides (``scheduling.autoscaler.autoscale``).

The autoscaler is pure, like the scheduler: ``pools + units + nodes + pending jobs +
usage + now -> ScalePlan``. Its keeper (the control plane's leader, or the simulator)
carries the actions out and keeps the ``Unit`` records:

- ``Provision``: ask the pool's provider for these units, all or nothing (a gang's nodes
  come together); the keeper records them ``PROVISIONING`` (``requested_at`` now).
- ``Drain``: the unit leaves; its nodes take no new work (they are idle when this is
  decided); the keeper records it ``DRAINING``.
- ``Delete``: ask the provider to delete the unit (drained and empty, past a spot
  notice's deadline, failed, or provisioning for too long: ``failed`` then, and the
  keeper counts a failure of the pool for its backoff).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.node import Node
from corral.core.pools import Pool, PoolFailures, Unit

if TYPE_CHECKING:
    from corral.scheduling.scaling_index import ScalingIndex


@dataclass(frozen=True)
class Provision:
    pool: str
    units: tuple[str, ...]
    reason: str
    jobs: tuple[int, ...] = ()  # the pending jobs it is for


@dataclass(frozen=True)
class Drain:
    pool: str
    unit: str
    reason: str


@dataclass(frozen=True)
class Delete:
    pool: str
    unit: str
    reason: str
    failed: bool = False  # provisioning failed or timed out: counts toward the backoff


Action = Provision | Drain | Delete


@dataclass(frozen=True)
class AutoscaleInput:
    """The cluster as the autoscaler sees it.

    ``nodes``: every registered node (fixed and pool ones) with its state; ``allocations``:
    what holds resources now; ``pending``: the jobs the last scheduling cycle left pending,
    in its order (held jobs and jobs waiting on dependencies left out); ``duty``: each
    node's recent mean GPU duty cycle (0..1) where telemetry has it; ``failures``: recent
    provisioning failures per pool.

    ``index``: the same units, nodes and allocations as the keeper keeps them sorted
    between passes (``scheduling.scaling_index``), built for these ``pools``; the pass
    reads it instead of them, and so reads only what matters. None: the pass sorts them.
    """

    pools: tuple[Pool, ...]
    units: tuple[Unit, ...]
    nodes: tuple[Node, ...]
    allocations: tuple[Allocation, ...]
    pending: tuple[Job, ...]
    now: float
    duty: Mapping[str, float] = field(default_factory=dict)
    failures: Mapping[str, PoolFailures] = field(default_factory=dict)
    index: ScalingIndex | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ScalePlan:
    """``actions`` to carry out now; ``waits``: why each pending job that waits on a pool
    waits (``waiting for pool v5p-32 to provision 4 hosts (expected in 3m)``), to show
    instead of the cycle's reason; ``desired``: the units each pool should have;
    ``preemptions``: running jobs to preempt (and requeue) so that a drained unit empties
    (consolidation: they fit elsewhere)."""

    actions: tuple[Action, ...] = ()
    waits: Mapping[int, str] = field(default_factory=dict)
    desired: Mapping[str, int] = field(default_factory=dict)
    preemptions: tuple[tuple[int, str], ...] = ()  # (job id, why): moved to empty a unit
