"""One scheduling cycle: ``state + pending + config + now -> Decisions``.

The recipe: build the snapshot, sort, then for each job in order filter and score nodes,
choose the gang's nodes, choose devices, permit (all or nothing) and assume; a job that
cannot be placed runs the post-filters and, unless one of them allows it, blocks the jobs
behind it (strict priority order) -- but only when it is waiting for busy resources: a job
that the ready nodes could not host even if they were empty (Unresolvable) blocks nobody.
Every job left pending gets a human reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.job import Job
from corral.core.node import Node
from corral.core.resources import MILLI, GpuKind
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.evaluation import NodeEvaluator
from corral.scheduling.framework import NodeRequest, Profile, Unresolvable, Unschedulable
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
    evaluator = snapshot.caches.get(profile)
    if not isinstance(evaluator, NodeEvaluator):  # memo of filter/score results, see there
        evaluator = snapshot.caches[profile] = NodeEvaluator(profile)
    order = sorted(pending, key=profile.queue_sort.sort_key)
    placements: list[Allocation] = []
    reasons: dict[int, PendingReason] = {}
    preemptions: list[tuple[int, str]] = []
    blocker: Job | None = None
    for position, job in enumerate(order, start=1):
        if blocker is not None:
            reasons[job.id] = PendingReason(
                f"waiting behind job {blocker.id} (ahead in priority order)", position
            )
            continue
        request = NodeRequest.of(job.spec, config.queue_placement(job.queue))
        outcome = place_gang(job, request, snapshot, profile, evaluator)
        if isinstance(outcome, Allocation):
            snapshot.assume(outcome)
            placements.append(outcome)
            continue
        reason, allow_others = outcome.reason, False
        for plugin in profile.post_filters:
            result = plugin.post_filter(job, request, snapshot)
            preemptions += [(victim, f"preempted for job {job.id}") for victim in result.preempt]
            reason = result.reason or reason
            allow_others = allow_others or result.allow_others
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
) -> Allocation | Unschedulable | Unresolvable:
    """All tasks of ``job`` on nodes of ``snapshot``, or why not (nothing is assumed).

    ``evaluator`` carries filter and score results from job to job within one cycle.
    """
    evaluator = evaluator or NodeEvaluator(profile)
    found = evaluator.evaluate(request, snapshot.views())
    chosen = profile.node_set.select(job, request, found.candidates)
    if not isinstance(chosen, list):
        return _explain(job, request, chosen, found.rejections, found.resolvable)
    tasks: list[TaskAllocation] = []
    for node_rank, view in enumerate(chosen):
        devices = profile.devices.select(request, view)
        if devices is None:
            return Unschedulable(f"node {view.name}: no device layout fits {request.describe()}")
        tasks += _tasks_on(job, request, view, node_rank, devices)
    return Allocation(job.id, job.attempt, tuple(tasks), job.priority, job.preemptible)


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
            gpus=gpus,
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
