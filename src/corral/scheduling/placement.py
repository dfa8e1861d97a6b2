"""A trial placement of one gang: its nodes, its devices, and why not.

:func:`place_gang` runs the profile's filter, score, node-set and device plugins for one
job on a snapshot and answers an :class:`Allocation` (nothing is assumed) or why it cannot
start (:class:`Unschedulable`: freeing resources may help; :class:`Unresolvable`: the
ready nodes could not host it even if they were empty). The cycle, the forward plan
(``scheduling.plan``), preemption and the advice all place through it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.job import Job, TopologyLevel
from corral.core.node import Node
from corral.core.resources import MILLI, GpuKind
from corral.scheduling.evaluation import NodeEvaluator
from corral.scheduling.framework import NodeRequest, Profile, Unresolvable, Unschedulable
from corral.scheduling.plugins.topology import TIGHT_TO_LOOSE, common_level
from corral.scheduling.roles import place_roles
from corral.scheduling.snapshot import NodeView, Snapshot


def place_gang(
    job: Job,
    request: NodeRequest,
    snapshot: Snapshot,
    profile: Profile,
    evaluator: NodeEvaluator | None = None,
    reserved: Mapping[str, int] | None = None,
    now: float = 0.0,
    *,
    holds: Sequence[Allocation] = (),
) -> Allocation | Unschedulable | Unresolvable:
    """All tasks of ``job`` on nodes of ``snapshot``, or why not (nothing is assumed).
    A job with roles has each role placed as its own gang, all or nothing
    (``scheduling.roles``); ``request`` is then its largest role's.

    ``evaluator`` carries filter and score results from job to job over ``snapshot``
    (default: a new one, for this placement only); ``reserved`` maps nodes the job may not
    use to the job they are held for. ``holds``: what reservations will take (their
    planned devices, MIG instances, CPUs and memory; ``Reservation.hold``) is taken for
    the trial, so the job may share a reserved node but never what is reserved on it
    (devices busy now and held as well count twice: still busy); a job that would fit but
    for them is told which jobs they are reserved for.
    """
    evaluator = evaluator or NodeEvaluator(profile)
    if not holds:
        return _place(job, request, snapshot, profile, evaluator, reserved, now)
    undo = [snapshot.assume(hold) for hold in holds]
    try:
        outcome = _place(job, request, snapshot, profile, evaluator, reserved, now)
    finally:
        for step in reversed(undo):
            step()
    if not isinstance(outcome, Unschedulable) or not isinstance(
        _place(job, request, snapshot, profile, evaluator, reserved, now), Allocation
    ):
        return outcome
    held = "; ".join(
        f"{', '.join(sorted(hold.nodes))} reserved for job {hold.job_id}" for hold in holds
    )
    return Unschedulable(f"{outcome.reason} (what it fits on now is held: {held})")


def _place(
    job: Job,
    request: NodeRequest,
    snapshot: Snapshot,
    profile: Profile,
    evaluator: NodeEvaluator,
    reserved: Mapping[str, int] | None,
    now: float,
) -> Allocation | Unschedulable | Unresolvable:
    if job.spec.roles:
        return place_roles(job, request, snapshot, profile, evaluator, reserved, now, _place)
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
        expected_end=now + job.expected_remaining,
        note=_topology_note(job, [v.node for v in chosen]),
        queue=job.queue,
        started_at=now,
        requeue=job.spec.requeue,
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
    # the most common reasons, ties by name: the same text however the counts were kept
    common = sorted(rejections.items(), key=_most_then_name)[:3]
    details = "; ".join(
        f"{count} node{'s' if count > 1 else ''}: {reason}" for reason, count in common
    )
    if not rejections and not resolvable:
        return Unschedulable(f"waiting for nodes: {need}; no node is registered")
    text = f"{need}; {outcome.reason}" + (f" ({details})" if details else "")
    if resolvable < nodes:
        return Unresolvable(f"cannot run on the ready nodes: {text}")
    return Unschedulable(f"waiting for resources: {text}")


def _most_then_name(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]
