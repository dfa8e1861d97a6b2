"""``queue-demand``: new units for the pending jobs that nothing else will hold.

:class:`QueueDemand` walks the pending jobs in the scheduler's order, placing each for
real (``placement.place_gang`` with the scheduler's profile: topology, TPU slices, MIG,
node selectors and roles all count) on the capacity it could get without new units
(``scheduling.scaling_capacity``):

1. **existing**: a job that fits the free capacity of ready nodes, or of units in flight
   (or granted earlier this pass) taken as empty ready nodes, is assumed there (later
   jobs see it used); ready nodes are preferred. On ready nodes it needs nothing (and
   keeps their units from scale-down); on coming ones it waits for them;
2. **busy fixed nodes** (only with ``wait_for_busy: true``): one that the fixed
   (non-pool) ready nodes could hold once their running work ends waits for them, as the
   scheduler says. By default it is demand, as for the cluster autoscaler: a pool beside
   fixed nodes is there to take work that would otherwise queue;
3. **new units**: otherwise the pools that could hold it are ranked by the cost per hour
   of the fewest units that hold it alone (a trial placement on empty units, cached per
   request shape and kind of pool), then the capacity those would leave unused, then
   name; the first that its backoff, ``max`` and the cost cap allow gets them, all or
   nothing (placed for real with the new units added: fewer are used when the job also
   fits partly on nodes already there; a job that can only sit on new units alone, one
   node or one slice or a gang no node there has room for, is placed as in its trial).
   Later jobs pack onto what is left of them.

Jobs on coming or new units wait ``for pool P to provision N nodes (expected in 3m)``;
jobs that pools could hold but none can take now are told why (max, cost cap, backoff).
Jobs no pool could ever hold get no reason here: the cycle's stands.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.node import Node, NodeState
from corral.core.pools import Pool
from corral.core.resources import GpuKind
from corral.errors import ValidationError
from corral.scheduling.evaluation import NodeEvaluator
from corral.scheduling.feasibility import NodeShapes, never_fits, node_shapes, with_tpu_hosts
from corral.scheduling.framework import NodeRequest, Unresolvable, Unschedulable
from corral.scheduling.placement import place_gang
from corral.scheduling.scaling_capacity import (
    COMING,
    NEW,
    READY,
    Capacity,
    Member,
    free_devices,
    names_pools,
)
from corral.scheduling.scaling_policies import (
    Demand,
    ScalingView,
    Wait,
    count_hosts,
    eta_text,
    job_list,
)
from corral.scheduling.snapshot import Snapshot

Shape = tuple[NodeRequest, tuple]


class QueueDemand:
    """``queue-demand`` (the default policy): units for pending jobs, see the module."""

    name = "queue-demand"

    def __init__(self, wait_for_busy: bool = False) -> None:
        if not isinstance(wait_for_busy, bool):
            raise ValueError(f"wait_for_busy: expected true or false, got {wait_for_busy!r}")
        self.wait_for_busy = wait_for_busy

    def demand(self, view: ScalingView) -> list[Demand | Wait]:
        if not view.inp.pending or not view.pools:
            return []
        return _Walk(view, self.wait_for_busy).run()


@dataclass(frozen=True)
class _Fresh:
    """A job alone on empty units of a pool: the units it takes, the capacity left, and
    its trial placement with each task's (unit, host) among them."""

    units: int
    waste: tuple[float, float]
    alloc: Allocation
    layout: tuple[tuple[int, int], ...]


class _Walk:
    """One walk over the pending jobs (see the module docstring)."""

    def __init__(self, view: ScalingView, wait_for_busy: bool) -> None:
        self.view, self.wait_for_busy = view, wait_for_busy
        self.config, self.profile, self.now = view.config, view.profile, view.now
        self.capacity = Capacity(view)
        self.snapshot = self.capacity.snapshot
        self.evaluator = NodeEvaluator(self.profile)
        self.potential: dict[str, list[Member]] = defaultdict(list)  # hidden new units
        self.taken: set[str] = set()  # unit names tried by this walk
        self.cursor: dict[str, int] = defaultdict(int)
        self.added: Counter[str] = Counter()  # units granted by this walk, per pool
        self.new_jobs: dict[str, list[int]] = defaultdict(list)
        self.planned_jobs: dict[str, list[int]] = defaultdict(list)
        self.keep: dict[str, set[str]] = defaultdict(set)
        self.waits: dict[int, str] = {}
        self.failed: set[tuple] = set()  # (shape, upto, snapshot state) that did not fit
        self.refused: dict[tuple[str, int], str] = {}  # (pool, units) -> room's refusal
        self.blocked: dict[Shape, str] = {}  # shapes no pool can take any more this pass
        self.options: dict[Shape, list[tuple[Pool, _Fresh]]] = {}
        self.fresh: dict[tuple, _Fresh | None] = {}
        self.fixed_fits: dict[Shape, bool] = {}
        self.tpu_shapes: NodeShapes | None = None

    def run(self) -> list[Demand | Wait]:
        for job in self.view.inp.pending:
            self._one(job)
        return self._results()

    def _one(self, job: Job) -> None:
        job = self._sized(job, self._all_tpu_shapes)
        if job.spec.tpu and not job.spec.nodes:
            return  # no pod of its generation anywhere to size it on
        request = NodeRequest.of(job.spec, self.config.queue_placement(job.spec.queue))
        shape = (request, job.spec.shape_key)
        placed = self._fit(job, request, shape, COMING)
        if placed is not None and not self.capacity.ready_only(placed):
            placed = self._fit(job, request, shape, READY) or placed  # ready nodes first
        if placed is not None:
            self._take(job, placed)
        elif not (self.wait_for_busy and self._fixed_could_hold(job, shape)):
            self._grow(job, request, shape)

    def _fit(self, job: Job, request: NodeRequest, shape: Shape, upto: int) -> Allocation | None:
        """``job`` placed on ready capacity (``upto`` READY) or on ready and coming."""
        capacity, spec = self.capacity, job.spec
        roles = bool(spec.roles)
        if not capacity.may_fit(spec.nodes, request, upto, roles):
            return None
        if (shape, upto, self.snapshot.state) in self.failed:
            return None
        reserved = capacity.not_ready if upto == READY and capacity.not_ready else None
        capacity.ensure(request, roles, upto, spec.node_count, everything=False)
        outcome = self._place(job, request, reserved)
        if not isinstance(outcome, Allocation) and capacity.ensure(
            request, roles, upto, spec.node_count, everything=True
        ):
            outcome = self._place(job, request, reserved)
        if isinstance(outcome, Allocation):
            return outcome
        self.failed.add((shape, upto, self.snapshot.state))
        return None

    def _place(
        self, job: Job, request: NodeRequest, reserved: dict[str, int] | None
    ) -> Allocation | Unschedulable | Unresolvable:
        return place_gang(
            job, request, self.snapshot, self.profile, self.evaluator, reserved, self.now
        )

    def _take(self, job: Job, alloc: Allocation) -> None:
        """Assume ``alloc``; note the units it waits for, or keeps."""
        waiting: dict[str, list[Member]] = {}
        for member in self.capacity.assume(alloc):
            pool = member.pool
            if pool is None:
                continue
            if member.kind == READY:
                self.keep[pool.name].add(member.unit)
                continue
            waiting.setdefault(pool.name, []).append(member)
            if member.planned or member.kind == NEW:
                listed = (self.new_jobs if member.kind == NEW else self.planned_jobs)[pool.name]
                if job.id not in listed[-1:]:
                    listed.append(job.id)
        if waiting:
            parts = []
            for name in sorted(waiting):
                pool = waiting[name][0].pool
                assert pool is not None
                parts.append(f"pool {name} to provision {count_hosts(pool, len(waiting[name]))}")
            eta = max(m.eta for ms in waiting.values() for m in ms)
            self.waits[job.id] = f"waiting for {' and '.join(parts)} (expected {eta_text(eta)})"

    def _fixed_could_hold(self, job: Job, shape: Shape) -> bool:
        """Whether the fixed ready nodes could hold ``job`` once their work ends."""
        fixed = self.capacity.fixed
        if not fixed:
            return False
        found = self.fixed_fits.get(shape)
        if found is None:
            try:
                found = never_fits(job.spec, fixed, self.config) is None
            except ValidationError:
                found = False
            self.fixed_fits[shape] = found
        return found

    # --- new units ----------------------------------------------------------------------

    def _grow(self, job: Job, request: NodeRequest, shape: Shape) -> None:
        blocked = self.blocked.get(shape)
        if blocked is not None:
            self.waits[job.id] = blocked
            return
        options = self._options(job, request, shape)
        refusals: list[str] = []
        for pool, fresh in options:
            key = (pool.name, fresh.units)
            why = self.refused.get(key) or self.view.room(pool.name, fresh.units, self.added)
            if why is None:
                sized = self._sized(job, _shapes_of(pool))
                if self._alone(sized, request):
                    self._place_alone(sized, pool, fresh)
                    return
                roles = bool(sized.spec.roles)
                self.capacity.ensure(request, roles, COMING, sized.spec.node_count, False)
                for units in dict.fromkeys(
                    (self._fewest(sized, request, pool, fresh), fresh.units)
                ):
                    if self._place_new(sized, request, pool, units):
                        return
                why = f"pool {pool.name}: no placement with {fresh.units} new"
            else:
                self.refused[key] = why
            refusals.append(why)
        if not refusals:
            return  # no pool could ever hold it: the cycle's reason stands
        more = f" (and {len(refusals) - 3} more)" if len(refusals) > 3 else ""
        reason = f"no pool can add capacity for it now: {'; '.join(refusals[:3])}{more}"
        self.waits[job.id] = reason
        if all(key in self.refused for key in ((p.name, f.units) for p, f in options)):
            self.blocked[shape] = reason  # room only shrinks as the walk goes on

    def _options(self, job: Job, request: NodeRequest, shape: Shape) -> list[tuple[Pool, _Fresh]]:
        """The pools that could hold ``job`` alone, cheapest, then least wasteful, first."""
        found = self.options.get(shape)
        if found is None:
            ranked = []
            for pool in self.view.pools:
                fresh = self._fresh(job, request, shape, pool)
                if fresh is not None:
                    cost = fresh.units * pool.unit_cost_per_hour
                    ranked.append((cost, fresh.waste, pool.name, pool, fresh))
            ranked.sort(key=lambda r: r[:3])
            found = self.options[shape] = [(r[3], r[4]) for r in ranked]
        return found

    def _fresh(self, job: Job, request: NodeRequest, shape: Shape, pool: Pool) -> _Fresh | None:
        """``job`` alone on empty units of ``pool`` (None: it never fits there). Cached per
        shape and kind of pool (pools alike but for their name and cost share it)."""
        key = (shape, pool.name if names_pools(request) else self.capacity.kind(pool))
        if key not in self.fresh:
            self.fresh[key] = self._trial(job, request, pool)
        return self.fresh[key]

    def _trial(self, job: Job, request: NodeRequest, pool: Pool) -> _Fresh | None:
        job = self._sized(job, _shapes_of(pool))
        if job.spec.tpu and not job.spec.nodes:
            return None
        sample = self.view.index.template(pool)[0]
        alike = ("pool", self.capacity.kind(pool))
        hosts = self.capacity.could_host(request, alike, ("pool", pool.name, NEW), sample)
        if not job.spec.roles and not hosts:
            return None
        count = max(1, math.ceil(job.spec.node_count / pool.hosts_per_unit))
        where: dict[str, tuple[int, int]] = {}  # trial node -> (unit, host)
        nodes: list[Node] = []
        for i in range(count):
            for host, node in enumerate(pool.unit_nodes(f"{pool.name}-trial{i}")):
                where[node.name] = (i, host)
                nodes.append(node)
        outcome = place_gang(job, request, Snapshot.build(nodes, ()), self.profile, now=self.now)
        if not isinstance(outcome, Allocation):
            return None
        used = list(dict.fromkeys(where[name][0] for name in outcome.nodes))
        on = [n for n in nodes if where[n.name][0] in used]
        devices = sum(free_devices(n) for n in on) - sum(len(t.gpus) for t in outcome.tasks)
        cpus = sum(n.cpus for n in on) - sum(t.cpus for t in outcome.tasks)
        layout = tuple((used.index(where[t.node][0]), where[t.node][1]) for t in outcome.tasks)
        return _Fresh(len(used), (float(devices), cpus), outcome, layout)

    def _fewest(self, job: Job, request: NodeRequest, pool: Pool, fresh: _Fresh) -> int:
        """The fewest new units that might do, given the nodes with room already there
        (tried first, so that the job uses them rather than new units)."""
        if job.spec.roles or request.gpus.kind is not GpuKind.WHOLE or pool.tpu:
            return fresh.units
        need = request.gpus.count
        room = sum(n for free, n in self.capacity.hist[1].items() if free >= need)
        return max(1, min(fresh.units, job.spec.nodes - room))

    def _alone(self, job: Job, request: NodeRequest) -> bool:
        """Whether ``job`` (which fits no capacity there now) can only be placed on new
        units alone: one node, or one TPU slice, or a gang of whole GPUs no node there
        has room for. It is then placed as in its trial."""
        spec = job.spec
        if spec.roles:
            return False
        if spec.node_count == 1 or spec.tpu:
            return True
        if request.gpus.kind is not GpuKind.WHOLE:
            return False
        need = request.gpus.count
        return not any(n for free, n in self.capacity.hist[1].items() if free >= need)

    def _place_alone(self, job: Job, pool: Pool, fresh: _Fresh) -> None:
        """Grant ``fresh.units`` new units of ``pool`` with ``job`` placed on them as in
        its trial."""
        members = self._show_new(pool, fresh.units)
        tasks = tuple(
            replace(task, node=members[unit].nodes[host].name)
            for task, (unit, host) in zip(fresh.alloc.tasks, fresh.layout, strict=True)
        )
        for member in members:
            self._grant(member)
        self._take(job, replace(fresh.alloc, job_id=job.id, attempt=job.attempt, tasks=tasks))

    def _place_new(self, job: Job, request: NodeRequest, pool: Pool, units: int) -> bool:
        """Place ``job`` with ``units`` new units of ``pool`` shown; grant those it uses
        (the others are hidden again: draining, for later trials)."""
        shown = self._show_new(pool, units)
        outcome = self._place(job, request, None)
        used = set(outcome.nodes) if isinstance(outcome, Allocation) else set()
        for member in shown:
            if used.isdisjoint(n.name for n in member.nodes):
                for node in member.nodes:
                    self.snapshot.set_node(replace(node, state=NodeState.DRAINING))
            else:
                self._grant(member)
        if not isinstance(outcome, Allocation):
            return False
        self._take(job, outcome)
        return True

    def _show_new(self, pool: Pool, units: int) -> list[Member]:
        """``units`` new units of ``pool`` in the snapshot, ready: hidden ones first."""
        snapshot, hidden = self.snapshot, self.potential[pool.name]
        shown = hidden[:units]
        for member in shown:
            for node in member.nodes:
                snapshot.set_node(node)
        while len(shown) < units:
            name = self._new_name(pool)
            made = [self.capacity.scrubbed(n) for n in self.view.index.unit_template(pool, name)]
            nodes = tuple(node for node, _ in made)
            member = Member(nodes, NEW, pool, name, pool.provisioning_time)
            for node, likeness in made:
                snapshot.add(node, likeness)
            hidden.append(member)
            shown.append(member)
        return shown

    def _grant(self, member: Member) -> None:
        """A shown new unit is granted: counted, and no longer hidden or tried."""
        assert member.pool is not None
        self.potential[member.pool.name].remove(member)
        self.added[member.pool.name] += 1
        for node in member.nodes:
            self.capacity.member_of[node.name] = member
            self.capacity.place(node.name, NEW, free_devices(node))

    def _new_name(self, pool: Pool) -> str:
        """The lowest free unit name of ``pool`` (not a unit's, not granted, not tried)."""
        names, taken = self.view.unit_names, self.taken
        planned = set(self.view.planned(pool.name))
        i = self.cursor[pool.name]
        while (
            pool.unit_name(i) in names or pool.unit_name(i) in taken or pool.unit_name(i) in planned
        ):
            i += 1
        self.cursor[pool.name] = i + 1
        taken.add(pool.unit_name(i))
        return pool.unit_name(i)

    # --- TPU slices not yet sized -----------------------------------------------------

    def _sized(self, job: Job, shapes: Callable[[], NodeShapes]) -> Job:
        """A TPU job whose host count is not known yet, sized on ``shapes()``'s pods."""
        spec = job.spec
        if spec.tpu is None or spec.nodes:
            return job
        sized = with_tpu_hosts(spec, shapes())
        return replace(job, spec=sized) if sized.nodes else job

    def _all_tpu_shapes(self) -> NodeShapes:
        if self.tpu_shapes is None:
            nodes = [n for n, _ in self.capacity.fixed if n.tpu_chips]
            for pool in self.view.pools:
                if pool.tpu:
                    nodes += pool.unit_nodes(pool.unit_name(0))
            self.tpu_shapes = node_shapes(nodes)
        return self.tpu_shapes

    # --- what it asks for ---------------------------------------------------------------

    def _results(self) -> list[Demand | Wait]:
        found: list[Demand | Wait] = []
        for name in sorted(set(self.added) | set(self.planned_jobs) | set(self.keep)):
            new, planned = self.new_jobs.get(name, []), self.planned_jobs.get(name, [])
            jobs = tuple(dict.fromkeys(new + planned))
            found.append(
                Demand(
                    name,
                    units=self.added.get(name, 0),
                    keep=tuple(sorted(self.keep.get(name, ()))),
                    jobs=jobs,
                    reason=f"pending {job_list(jobs)}" if jobs else "",
                )
            )
        found += [Wait(job, reason) for job, reason in self.waits.items()]
        return found


def _shapes_of(pool: Pool) -> Callable[[], NodeShapes]:
    """The shapes of one unit of ``pool`` (its pod, for a TPU pool), when asked."""
    return lambda: node_shapes(pool.unit_nodes(pool.unit_name(0)))
