"""What the scheduler may remember between cycles: one typed memo, owned by the caller.

The scheduling core keeps no state of its own. A caller that keeps its snapshot between
cycles (the simulator) keeps a :class:`SchedulingMemo` with it and passes both in
``ClusterState``; one that builds a snapshot per cycle (the control plane) may keep one
too (the requests stay valid; what follows a snapshot starts over with a new one) or let
each cycle make a fresh one. Everything in it is a cache: a fresh memo decides alike.

- ``requests``: each job's :class:`NodeRequest`, interned by value, with a shape number
  (jobs of one shape place alike).
- ``placement(profile, snapshot)``: per profile, the filter and score index that follows
  the snapshot's change log (``evaluation.NodeEvaluator``), and the trial placements that
  failed, by shape and reserved nodes, valid while the snapshot stays in the same state
  (``Snapshot.state``: a search that puts back what it tried leaves it so).
- ``free_gpus(selector, model, snapshot)``: free whole GPUs counted per node pool, for a
  cheap "cannot fit yet" before a trial placement (``snapshot.FreeWholeGpus``).
- ``cycle``: what post-filter plugins share within one cycle (reset by each cycle);
  ``reservation``: EASY backfill's last reservation search (``plugins.backfill``), and
  ``preemption_floor``: the preemption plugin's lowest victim priority, per allocations.

What depends on the snapshot (all but ``requests``) follows one snapshot: the memo used
with another starts it over.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from corral.core.allocation import Allocation
from corral.core.job import Job, JobSpec, PlacementPolicy
from corral.scheduling.evaluation import NodeEvaluator
from corral.scheduling.framework import NodeRequest, Profile, Unresolvable, Unschedulable
from corral.scheduling.snapshot import FreeWholeGpus, Snapshot

if TYPE_CHECKING:
    from corral.scheduling.plugins.backfill import KeptReservation
    from corral.scheduling.plugins.preemption_state import PreemptionState

MAX_JOBS = 100_000  # jobs whose request is remembered (then it starts over)
MAX_SHAPES = 4096  # distinct shapes interned (then it starts over)
MAX_FAILED = 4096  # failed trials remembered at one snapshot position
MAX_POOLS = 256  # node pools (selector, model) counted

Failure = Unschedulable | Unresolvable


class Interned(NamedTuple):
    request: NodeRequest  # equal requests are one object
    shape: int  # one number per (request, nodes, TPU slice, roles) while interned; never reused


class RequestMemo:
    """``NodeRequest.of`` each job, built once per job (while its spec and its queue's
    placement stay the same) and interned by value."""

    def __init__(self, max_jobs: int = MAX_JOBS, max_shapes: int = MAX_SHAPES) -> None:
        self.max_jobs, self.max_shapes = max_jobs, max_shapes
        self._by_job: dict[int, tuple[JobSpec, PlacementPolicy, Interned]] = {}
        self._requests: dict[NodeRequest, NodeRequest] = {}
        self._shapes: dict[tuple[NodeRequest, tuple], Interned] = {}
        self._numbers = itertools.count()

    def of(self, job: Job, placement: PlacementPolicy) -> Interned:
        spec = job.spec
        found = self._by_job.get(job.id)
        # (``is`` first: the same spec object, the usual case, needs no field comparison)
        if found is not None and (found[0] is spec or found[0] == spec) and found[1] == placement:
            return found[2]
        request = NodeRequest.of(spec, placement)
        key = (request, spec.shape_key)
        interned = self._shapes.get(key)
        if interned is None:
            if len(self._shapes) >= self.max_shapes:
                self._shapes.clear()
                self._requests.clear()
            request = self._requests.setdefault(request, request)
            interned = self._shapes[key] = Interned(request, next(self._numbers))
        if len(self._by_job) >= self.max_jobs:
            self._by_job.clear()
        self._by_job[job.id] = (spec, placement, interned)
        return interned


class PlacementMemo:
    """For one profile over one snapshot: the filter and score index, and the trial
    placements that failed in the snapshot's current state (``Snapshot.state``): a job of
    the same shape kept off the same reserved nodes fails the same way in that state."""

    def __init__(self, profile: Profile) -> None:
        self.evaluator = NodeEvaluator(profile)
        self._failed: dict[tuple, Failure] = {}
        self._failed_in = -1  # the state they failed in

    def failure(self, key: tuple, snapshot: Snapshot) -> Failure | None:
        """The remembered failure for ``key``, if the snapshot is in the same state."""
        if self._failed_in != snapshot.state:
            return None
        return self._failed.get(key)

    def remember(self, key: tuple, snapshot: Snapshot, failure: Failure) -> None:
        state = snapshot.state
        if self._failed_in != state or len(self._failed) >= MAX_FAILED:
            self._failed.clear()
            self._failed_in = state
        self._failed[key] = failure


@dataclass
class CycleMemo:
    """What post-filter plugins share within one cycle (``CycleContext.memo.cycle``)."""

    preemption: PreemptionState | None = None  # the preemption plugin's victim index
    # EASY backfill's deferred searches: job shape -> (the snapshot state, the request)
    deferred_shapes: dict[tuple, tuple[int, NodeRequest]] = field(default_factory=dict)


@dataclass(eq=False)
class SchedulingMemo:
    """The scheduler's caches, kept by the caller between cycles (module docstring)."""

    requests: RequestMemo = field(default_factory=RequestMemo)
    cycle: CycleMemo = field(default_factory=CycleMemo)
    reservation: KeptReservation | None = None  # EASY backfill's last search
    # the lowest priority of a preemptible allocation among these (the preemption plugin's)
    preemption_floor: tuple[tuple[Allocation, ...], float] | None = None

    def __post_init__(self) -> None:
        self._snapshot: Snapshot | None = None  # the snapshot the rest follows
        self._profile: Profile | None = None  # the last cycle's
        self._placements: dict[Profile, PlacementMemo] = {}
        self._pools: dict[tuple[tuple[tuple[str, str], ...], str | None], FreeWholeGpus] = {}

    def start_cycle(self, snapshot: Snapshot, profile: Profile) -> None:
        """Forget the previous cycle's per-cycle state (and what followed another snapshot,
        or the answers of plugins of another profile)."""
        self.cycle = CycleMemo()
        self._follow(snapshot)
        if profile is not self._profile and profile != self._profile:
            self._profile = profile
            self.reservation = None

    def placement(self, profile: Profile, snapshot: Snapshot) -> PlacementMemo:
        """The placement memo (index and failed trials) of ``profile`` over ``snapshot``."""
        self._follow(snapshot)
        memo = self._placements.get(profile)
        if memo is None:
            memo = self._placements[profile] = PlacementMemo(profile)
        return memo

    def evaluator(self, profile: Profile, snapshot: Snapshot) -> NodeEvaluator:
        """The filter and score index of ``profile`` over ``snapshot``."""
        return self.placement(profile, snapshot).evaluator

    def free_gpus(
        self, selector: tuple[tuple[str, str], ...], model: str | None, snapshot: Snapshot
    ) -> FreeWholeGpus:
        """Free whole GPUs of ``model`` counted on the ready nodes matching ``selector``."""
        self._follow(snapshot)
        key = (selector, model)
        pool = self._pools.get(key)
        if pool is None:
            if len(self._pools) >= MAX_POOLS:
                self._pools.clear()
            pool = self._pools[key] = FreeWholeGpus(selector, model)
        return pool

    def _follow(self, snapshot: Snapshot) -> None:
        if snapshot is not self._snapshot:
            self._snapshot = snapshot
            self._placements.clear()
            self._pools.clear()
            self.reservation = None
