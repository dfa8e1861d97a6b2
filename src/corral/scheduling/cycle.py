"""One scheduling cycle: ``state + pending + config + now -> Decisions``.

The recipe: build the snapshot, sort, then for each job in order filter and score nodes,
choose the gang's nodes, choose devices, permit (all or nothing) and assume; a job that
cannot be placed runs the post-filters and, unless one of them allows it, blocks the jobs
behind it (strict priority order) -- but only when it is waiting for busy resources: a job
that the ready nodes could not host even if they were empty (Unresolvable) blocks nobody.
Every job left pending gets a human reason.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.job import Job, TopologyLevel
from corral.core.node import Node
from corral.core.resources import MILLI, GpuKind
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.evaluation import NodeEvaluator, evaluator_for
from corral.scheduling.fairshare import Capacity, UsageLedger, fair_order, queue_shares
from corral.scheduling.framework import (
    CycleContext,
    NodeRequest,
    Profile,
    Reservation,
    Unresolvable,
    Unschedulable,
)
from corral.scheduling.plan import estimate_starts
from corral.scheduling.plugins.topology import TIGHT_TO_LOOSE, common_level
from corral.scheduling.quota import QuotaBook, has_quotas
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import NodeView, Snapshot


@dataclass(frozen=True)
class ClusterState:
    """What the scheduler is given: nodes, and every allocation that holds resources.

    ``snapshot``, when given, is a caller-maintained working copy of the same state (kept
    in step between cycles with ``assume``/``release``/``set_node``) used instead of
    building one from ``nodes`` and ``allocations``; the cycle assumes its placements in
    it, so a caller that applies every placement can keep using it.
    """

    nodes: tuple[Node, ...]
    allocations: tuple[Allocation, ...] = ()
    snapshot: Snapshot | None = field(default=None, compare=False)
    preempting: frozenset[int] = frozenset()  # jobs signalled to stop, still holding resources
    usage: UsageLedger | None = None  # decayed usage per queue, for fair share (None: none)


@dataclass(frozen=True)
class PendingReason:
    reason: str
    position: int  # 1-based place in the scheduling order
    unresolvable: bool = False  # no change in load would let it start
    estimated_start: float | None = None  # from the backfill plan; None: not estimated


@dataclass(frozen=True)
class Decisions:
    placements: tuple[Allocation, ...] = ()
    pending: Mapping[int, PendingReason] = field(default_factory=dict)
    preemptions: tuple[tuple[int, str], ...] = ()  # (job id, reason)


def schedule(
    state: ClusterState,
    pending: Sequence[Job],
    config: SchedulerConfig,
    now: float,
    profile: Profile | None = None,
    estimate: bool = True,
) -> Decisions:
    """Decide which pending jobs start now and where. Pure: no I/O, no clock but ``now``.

    Per job in order: admission against its queue's quota (a refusal blocks nobody), then
    placement; a job that cannot start runs the post-filters (preemption, backfill).
    ``estimate``: fill in every waiting job's estimated start from the forward plan (the
    control plane shows them; the simulator, which runs a cycle per event, skips them).
    """
    profile = profile or build_profile(config)
    cycle = _Cycle(state, config, now, profile)
    order = _order(pending, state, config, profile)
    if cycle.book is not None:  # within a priority, jobs that would borrow go after the rest
        order.sort(key=lambda j: (-j.priority, _borrows(cycle.book, j)))  # type: ignore[arg-type]
    blocker: Job | None = None
    for position, job in enumerate(order, start=1):
        if blocker is not None:
            cycle.reasons[job.id] = PendingReason(
                f"waiting behind job {blocker.id} (ahead in priority order)", position
            )
            continue
        if cycle.run(job, position):
            blocker = job
    if estimate:
        held_now = state.allocations + tuple(cycle.placements)
        _estimate(cycle.reasons, order, cycle.snapshot, held_now, profile, config, now)
    return Decisions(tuple(cycle.placements), cycle.reasons, tuple(cycle.preemptions))


class _Cycle:
    """The working state of one cycle: the snapshot and quota book with this cycle's
    placements assumed, reservations, victims, and each pending job's reason."""

    def __init__(
        self, state: ClusterState, config: SchedulerConfig, now: float, profile: Profile
    ) -> None:
        self.state, self.config, self.now, self.profile = state, config, now, profile
        self.snapshot = state.snapshot or Snapshot.build(state.nodes, state.allocations)
        self.evaluator = evaluator_for(self.snapshot, profile)  # indexed filter/score results
        self.book = (
            QuotaBook.build(config, state.allocations, state.nodes) if has_quotas(config) else None
        )
        self.placements: list[Allocation] = []
        self.reasons: dict[int, PendingReason] = {}
        self.preemptions: list[tuple[int, str]] = []
        self.reservations: list[Reservation] = []
        self.preempting = state.preempting  # and the victims chosen so far this cycle
        # jobs being preempted (signalled, still holding resources), not yet claimed this
        # cycle by a job ahead in the order that will start on what they free
        self.freeing = {a.job_id: a for a in state.allocations if a.job_id in state.preempting}
        # outcomes of trials that failed, valid until the snapshot next changes: a job whose
        # request, gang size and reserved nodes are the same fails the same way
        self.failed: dict[tuple, tuple[NodeRequest, dict, Unschedulable | Unresolvable]] = {}
        self.failed_at = self.snapshot.change_position
        self.held: dict[float, dict[str, int]] = {}  # reserved nodes by expected run time
        self.owners: set[int] = set()  # jobs holding a reservation
        self.context_key: tuple | None = None
        self.context: CycleContext | None = None

    def run(self, job: Job, position: int) -> bool:
        """Place ``job`` or record why not; True if it blocks the jobs behind it."""
        request = _request(job, self.config, self.snapshot)
        book = self.book
        refusal = book.admit(job, book.demand(job.spec)) if book else None
        outcome: Allocation | Unschedulable | Unresolvable = Unschedulable(f"quota: {refusal}")
        if refusal is None:
            outcome = self.place(job, request)
        if isinstance(outcome, Allocation) and book is not None:
            refusal = book.admit(job, book.amounts(outcome))  # exact, now the models are known
            outcome = Unschedulable(f"quota: {refusal}") if refusal else outcome
        if isinstance(outcome, Allocation):
            self.snapshot.assume(outcome)
            if book is not None:
                book.assume_allocation(outcome)
            self.placements.append(outcome)
            return False
        if refusal is None and self.freeing:
            awaited, nodes = _awaited(job, request, self.snapshot, self.freeing, self.place)
            if awaited:
                for job_id in awaited:
                    del self.freeing[job_id]
                # the nodes it will start on are held for it from now: a job behind it
                # taking the free part would make it preempt again once these exit
                self.reserve(Reservation(job.id, nodes, self.now))
                ids = ", ".join(map(str, awaited))
                why = f"starts when job{'s' if len(awaited) > 1 else ''} {ids} (preempted) exit"
                self.reasons[job.id] = PendingReason(
                    f"{why}; {outcome.reason}", position, False, self.now
                )
                return False
        reason, allow_others, estimate = self.post_filter(job, request, outcome.reason)
        unresolvable = isinstance(outcome, Unresolvable)
        self.reasons[job.id] = PendingReason(reason, position, unresolvable, estimate)
        return not (allow_others or refusal is not None or unresolvable)

    def place(self, job: Job, request: NodeRequest) -> Allocation | Unschedulable | Unresolvable:
        """A trial placement of ``job`` (nothing assumed), skipping reserved nodes."""
        held = self.held_for(job)
        # requests are interned (see _request), so they compare by identity here
        key = (id(request), job.spec.nodes, job.spec.tpu, id(held))
        if self.failed_at != self.snapshot.change_position:
            self.failed.clear()
            self.failed_at = self.snapshot.change_position
        seen = self.failed.get(key)
        if seen is not None and seen[0] is request and seen[1] is held:
            return seen[2]
        outcome = place_gang(
            job, request, self.snapshot, self.profile, self.evaluator, held, self.now
        )
        if not isinstance(outcome, Allocation):  # (keeping request and held alive: ids hold)
            self.failed[key] = (request, held, outcome)
        return outcome

    def held_for(self, job: Job) -> dict[str, int]:
        """Reserved nodes are usable only by jobs known to end before the reservation
        starts (the same mapping object for jobs of the same expected run time)."""
        if not self.reservations:
            return _NONE_HELD
        runtime = job.spec.expected_runtime
        if job.id in self.owners:
            return self._held(runtime, job.id)
        held = self.held.get(runtime)
        if held is None:
            held = self.held[runtime] = self._held(runtime, None)
        return held

    def _held(self, runtime: float, owner: int | None) -> dict[str, int]:
        ends = self.now + runtime
        return {
            n: r.job_id
            for r in self.reservations
            if r.job_id != owner and (ends > r.start or math.isinf(ends))
            for n in r.nodes
        }

    def reserve(self, reservation: Reservation) -> None:
        self.reservations.append(reservation)
        self.owners.add(reservation.job_id)
        self.held.clear()

    def post_filter(
        self, job: Job, request: NodeRequest, reason: str
    ) -> tuple[str, bool, float | None]:
        """Run the post-filters: ``(reason, allow_others, estimated start)``."""
        allow_others, estimate = False, None
        if not self.profile.post_filters:
            return reason, allow_others, estimate
        context = self._context()
        for plugin in self.profile.post_filters:
            result = plugin.post_filter(job, request, context)
            self.preemptions += [(v, f"preempted for job {job.id}") for v in result.preempt]
            reason = f"{result.reason}; {reason}" if result.reason else reason
            allow_others = allow_others or result.allow_others
            if result.preempt:
                # the victims still hold their resources this cycle, so nothing else can
                # take them; once they exit, this job (earlier in the order) claims them
                self.preempting = self.preempting | set(result.preempt)
                return reason, allow_others, self.now
            if result.reservation is not None:
                self.reserve(result.reservation)
                start = result.reservation.start
                return reason, allow_others, None if math.isinf(start) else start
        return reason, allow_others, estimate

    def _context(self) -> CycleContext:
        key = (len(self.placements), len(self.reservations), self.preempting)
        if self.context is None or key != self.context_key:
            self.context_key = key
            self.context = CycleContext(
                self.snapshot,
                self.state.allocations + tuple(self.placements),
                tuple(self.reservations),
                self.now,
                self.place,
                preempting=self.preempting,
                quota=self.book,
            )
        return self.context


_NONE_HELD: dict[str, int] = {}


def _estimate(
    reasons: dict[int, PendingReason],
    order: Sequence[Job],
    snapshot: Snapshot,
    allocations: tuple[Allocation, ...],
    profile: Profile,
    config: SchedulerConfig,
    now: float,
) -> None:
    """Fill in estimated starts from the forward plan (``scheduling.plan``) for the jobs
    waiting for resources (not those held by quota, nor those with a plan already)."""
    blocked = [
        job
        for job in order
        if (pend := reasons.get(job.id)) is not None
        and pend.estimated_start is None
        and not pend.unresolvable
        and not pend.reason.startswith("quota:")
    ]
    if not blocked:
        return
    starts = estimate_starts(snapshot, allocations, blocked, profile, config, now)
    for job_id, start in starts.items():
        reasons[job_id] = replace(reasons[job_id], estimated_start=start)


def _request(job: Job, config: SchedulerConfig, snapshot: Snapshot) -> NodeRequest:
    """``NodeRequest.of`` the job, memoized with the snapshot per spec object (callers that
    keep their snapshot and their jobs' specs between cycles build each request once), and
    interned: equal requests are one object, so they can be compared by identity."""
    cache = snapshot.caches.setdefault(_request, ({}, {}))
    assert isinstance(cache, tuple)
    by_spec, interned = cache
    found = by_spec.get(id(job.spec))
    if found is not None and found[0] is job.spec and found[1] is config:
        return found[2]
    request = NodeRequest.of(job.spec, config.queue_placement(job.queue))
    if len(by_spec) > 100_000:
        by_spec.clear()
        interned.clear()
    request = interned.setdefault(request, request)
    by_spec[id(job.spec)] = (job.spec, config, request)
    return request


def _awaited(
    job: Job,
    request: NodeRequest,
    snapshot: Snapshot,
    freeing: Mapping[int, Allocation],
    trial: Callable[[Job, NodeRequest], Allocation | Unschedulable | Unresolvable],
) -> tuple[list[int], frozenset[str]]:
    """The jobs being preempted whose exit lets ``job`` start (those on the nodes a trial
    placement uses once they are gone) and those nodes, or ([], {}) if their exit would
    not be enough."""
    undo = [snapshot.release(alloc) for alloc in freeing.values()]
    try:
        outcome = trial(job, request)
    finally:
        for step in reversed(undo):
            step()
    if not isinstance(outcome, Allocation):
        return [], frozenset()
    used = frozenset(outcome.nodes)
    return sorted(job_id for job_id, alloc in freeing.items() if used & set(alloc.nodes)), used


def _borrows(book: QuotaBook, job: Job) -> bool:
    """Whether ``job`` would need its cohort's quota (its queue's own would not do)."""
    if not book.nominal(job.queue) or book.cohort(job.queue) is None:
        return False  # unlimited, or nothing to borrow from
    return not book.within_nominal(job.queue, book.demand(job.spec))


def _order(
    pending: Sequence[Job], state: ClusterState, config: SchedulerConfig, profile: Profile
) -> list[Job]:
    """The order jobs are tried in: the profile's queue sort, or fair share between queues
    (priority, then each queue's weighted dominant share, ``queue_shares``, then
    submission) when ``policy.order`` is ``fair-share``."""
    if config.policy.order != "fair-share" or len({job.queue for job in pending}) < 2:
        return sorted(pending, key=profile.queue_sort.sort_key)  # one queue: nothing to share
    capacity = Capacity.of(state.nodes)
    shares = queue_shares(state.usage, state.allocations, capacity)
    return fair_order(pending, shares, {q.name: q.weight for q in config.queues}, capacity)


def place_gang(
    job: Job,
    request: NodeRequest,
    snapshot: Snapshot,
    profile: Profile,
    evaluator: NodeEvaluator | None = None,
    reserved: Mapping[str, int] | None = None,
    now: float = 0.0,
) -> Allocation | Unschedulable | Unresolvable:
    """All tasks of ``job`` on nodes of ``snapshot``, or why not (nothing is assumed).

    ``evaluator`` carries filter and score results from job to job (default: the one kept
    with ``snapshot``); ``reserved`` maps nodes the job may not use to the job they are
    held for.
    """
    evaluator = evaluator or evaluator_for(snapshot, profile)
    candidates = evaluator.evaluate(request, snapshot, reserved)
    chosen = profile.node_set.select(job, request, candidates)
    if not isinstance(chosen, list):
        return _explain(job, request, chosen, candidates.rejections, candidates.resolvable)
    tasks: list[TaskAllocation] = []
    for node_rank, view in enumerate(chosen):
        devices = profile.devices.select(request, view)
        if devices is None:
            return Unschedulable(f"node {view.name}: no device layout fits {request.describe()}")
        tasks += _tasks_on(job, request, view, node_rank, devices)
    return Allocation(
        job.id,
        job.attempt,
        tuple(tasks),
        job.priority,
        job.preemptible,
        expected_end=now + job.spec.expected_runtime,
        note=_topology_note(job, [v.node for v in chosen]),
        queue=job.queue,
        started_at=now,
    )


def _topology_note(job: Job, nodes: list[Node]) -> str:
    """What a job that asked for a topology got, for its events."""
    topology = job.spec.topology
    if topology is None or topology.level in (TopologyLevel.ANY, TopologyLevel.NVLINK):
        return ""
    level, domain = common_level(nodes)
    got = f"within {level.value} {domain}" if level is not TopologyLevel.ANY else "across spines"
    if TIGHT_TO_LOOSE.index(level) > TIGHT_TO_LOOSE.index(topology.level):
        return f"{got} ({topology.level.value} preferred; none had room)"
    return got


def _tasks_on(
    job: Job, request: NodeRequest, view: NodeView, node_rank: int, devices: list[tuple[int, ...]]
) -> list[TaskAllocation]:
    milli = request.gpus.milli if request.gpus.kind is GpuKind.FRACTION else MILLI
    per_task_cpus = request.cpus / request.tasks
    per_task_memory = request.memory // request.tasks
    return [
        TaskAllocation(
            rank=node_rank * request.tasks + local_rank,
            node=view.name,
            node_rank=node_rank,
            local_rank=local_rank,
            gpus=tuple(gpus),
            mig_slots=tuple(getattr(gpus, "mig_slots", ())),  # a DevicePick carries them
            gpu_milli=milli,
            gpu_memory=(request.gpu_memory or 0) if milli < MILLI else 0,
            cpus=per_task_cpus,
            memory=per_task_memory,
        )
        for local_rank, gpus in enumerate(devices)
    ]


def _explain(
    job: Job,
    request: NodeRequest,
    outcome: Unschedulable | Unresolvable,
    rejections: Counter[str],
    resolvable: int,
) -> Unschedulable | Unresolvable:
    nodes = job.spec.nodes
    need = f"needs {nodes} node{'s' if nodes > 1 else ''} with {request.describe()}"
    details = "; ".join(
        f"{count} node{'s' if count > 1 else ''}: {reason}"
        for reason, count in rejections.most_common(3)
    )
    if not rejections and not resolvable:
        return Unschedulable(f"waiting for nodes: {need}; no node is registered")
    text = f"{need}; {outcome.reason}" + (f" ({details})" if details else "")
    if resolvable < nodes:
        return Unresolvable(f"cannot run on the ready nodes: {text}")
    return Unschedulable(f"waiting for resources: {text}")
