"""Placing a job with roles (SPEC section 8): every role's gang, all or nothing.

Roles are placed largest first (what one node of the role asks for, then its node count),
each on a snapshot that already holds the roles placed before it, so that two roles may
share a machine when it has room for both; a role that does not fit fails the whole job
with its reason. Ranks and node ranks are then numbered role after role in the order the
manifest lists them. A job-level ``topology`` (leaf, spine, zone) applies to the whole
job: every role is placed within one domain of that level, the first one (by name) that
holds them all; ``preferred`` falls back to anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from corral.core.allocation import Allocation
from corral.core.job import Job, TopologyLevel, TopologyMode
from corral.scheduling.evaluation import NodeEvaluator
from corral.scheduling.framework import NodeRequest, Profile, Unresolvable, Unschedulable
from corral.scheduling.plugins.topology import domain_of
from corral.scheduling.snapshot import Snapshot

Outcome = Allocation | Unschedulable | Unresolvable
PlaceOne = Callable[
    [Job, NodeRequest, Snapshot, Profile, NodeEvaluator, Mapping[str, int] | None, float],
    Outcome,
]
WHOLE_JOB_LEVELS = (TopologyLevel.LEAF, TopologyLevel.SPINE, TopologyLevel.ZONE)


def place_roles(
    job: Job,
    request: NodeRequest,
    snapshot: Snapshot,
    profile: Profile,
    evaluator: NodeEvaluator,
    reserved: Mapping[str, int] | None,
    now: float,
    place: PlaceOne,
) -> Outcome:
    """All roles of ``job`` (``job.spec.roles``) placed with ``place`` (one homogeneous
    gang), or the first role's reason why not. Nothing is assumed on return."""
    topology = job.spec.topology
    if topology is None or topology.level not in WHOLE_JOB_LEVELS:
        return _roles(job, request, snapshot, profile, evaluator, reserved, now, place)
    domains: dict[tuple[str, ...], list[str]] = {}
    for view in snapshot.views():
        key = domain_of(view.node, topology.level)
        if key is not None:
            domains.setdefault(key, []).append(view.name)
    everything = set(snapshot.nodes)
    for key in sorted(domains):
        outside = {name: job.id for name in everything.difference(domains[key])}
        fenced = {**outside, **(reserved or {})}
        found = _roles(job, request, snapshot, profile, evaluator, fenced, now, place)
        if isinstance(found, Allocation):
            return replace(
                found, note=_joined(f"within {topology.level.value} {'/'.join(key)}", found.note)
            )
    if topology.mode is TopologyMode.PREFERRED:
        found = _roles(job, request, snapshot, profile, evaluator, reserved, now, place)
        if isinstance(found, Allocation):
            note = (
                f"across {topology.level.value}s ({topology.level.value} preferred; none had room)"
            )
            return replace(found, note=_joined(note, found.note))
        return found
    return Unschedulable(
        f"waiting for resources: no {topology.level.value} has room for all its roles "
        f"(topology {topology.level.value}, required)"
    )


def _roles(
    job: Job,
    request: NodeRequest,
    snapshot: Snapshot,
    profile: Profile,
    evaluator: NodeEvaluator,
    reserved: Mapping[str, int] | None,
    now: float,
    place: PlaceOne,
) -> Outcome:
    spec = job.spec
    order = sorted(range(len(spec.roles)), key=lambda i: spec.roles[i].size(), reverse=True)
    placed: dict[int, Allocation] = {}
    undo = []
    try:
        for index in order:
            part = spec.parts[index]
            outcome = place(
                replace(job, spec=part),
                NodeRequest.of(part, request.placement),
                snapshot,
                profile,
                evaluator,
                reserved,
                now,
            )
            if not isinstance(outcome, Allocation):
                return type(outcome)(f"role {spec.roles[index].name}: {outcome.reason}")
            placed[index] = outcome
            undo.append(snapshot.assume(outcome))
    finally:
        for step in reversed(undo):
            step()
    return _combined(job, [placed[i] for i in range(len(spec.roles))])


def _combined(job: Job, parts: list[Allocation]) -> Allocation:
    """One allocation of the parts (in role order): ranks and node ranks run on."""
    tasks = []
    rank = node_rank = 0
    notes = []
    for role, part in zip(job.spec.roles, parts, strict=True):
        for task in part.tasks:
            tasks.append(replace(task, rank=rank + task.rank, node_rank=node_rank + task.node_rank))
        rank += role.world_size
        node_rank += role.nodes
        if part.note:
            notes.append(f"{role.name} {part.note}")
    return replace(parts[0], job_id=job.id, tasks=tuple(tasks), note="; ".join(notes))


def _joined(first: str, second: str) -> str:
    return f"{first}; {second}" if second else first
