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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.job import Job, TopologyLevel
from corral.core.node import Node
from corral.core.resources import MILLI, GpuKind
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.evaluation import NodeEvaluator, evaluator_for
from corral.scheduling.framework import (
    CycleContext,
    NodeRequest,
    Profile,
    Reservation,
    Unresolvable,
    Unschedulable,
)
from corral.scheduling.plugins.topology import TIGHT_TO_LOOSE, common_level
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
) -> Decisions:
    """Decide which pending jobs start now and where. Pure: no I/O, no clock but ``now``."""
    profile = profile or build_profile(config)
    snapshot = state.snapshot or Snapshot.build(state.nodes, state.allocations)
    evaluator = evaluator_for(snapshot, profile)  # indexed filter/score results, see there
    order = sorted(pending, key=profile.queue_sort.sort_key)
    placements: list[Allocation] = []
    reasons: dict[int, PendingReason] = {}
    preemptions: list[tuple[int, str]] = []
    reservations: list[Reservation] = []
    blocker: Job | None = None

    def trial(job: Job, request: NodeRequest) -> Allocation | Unschedulable | Unresolvable:
        return place_gang(job, request, snapshot, profile, evaluator, now=now)

    for position, job in enumerate(order, start=1):
        if blocker is not None:
            reasons[job.id] = PendingReason(
                f"waiting behind job {blocker.id} (ahead in priority order)", position
            )
            continue
        request = NodeRequest.of(job.spec, config.queue_placement(job.queue))
        ends = now + job.spec.expected_runtime
        # reserved nodes are usable only by jobs known to end before the reservation starts
        held = {
            n: r.job_id for r in reservations if ends > r.start or math.isinf(ends) for n in r.nodes
        }
        outcome = place_gang(job, request, snapshot, profile, evaluator, held, now)
        if isinstance(outcome, Allocation):
            snapshot.assume(outcome)
            placements.append(outcome)
            continue
        reason, allow_others = outcome.reason, False
        context = CycleContext(
            snapshot, state.allocations + tuple(placements), tuple(reservations), now, trial
        )
        for plugin in profile.post_filters:
            result = plugin.post_filter(job, request, context)
            preemptions += [(victim, f"preempted for job {job.id}") for victim in result.preempt]
            reason = f"{result.reason}; {reason}" if result.reason else reason
            allow_others = allow_others or result.allow_others
            if result.reservation is not None:
                reservations.append(result.reservation)
        unresolvable = isinstance(outcome, Unresolvable)
        reasons[job.id] = PendingReason(reason, position, unresolvable=unresolvable)
        if not allow_others and not unresolvable:
            blocker = job
    return Decisions(tuple(placements), reasons, tuple(preemptions))


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
