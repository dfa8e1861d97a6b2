"""Spot termination notices (``corral node notice NODE --deadline 2m``, or a provider's).

A node given notice is drained, remembers when it leaves (``NodeRow.leave_at``), and
its running jobs are preempted at once: their tasks get SIGTERM, and the agent shortens
their grace so that they are gone before the deadline (``SyncResponse.stop_grace``);
corral.train saves a checkpoint on SIGTERM, and the jobs are requeued elsewhere. A pool
unit's nodes leave together (a TPU slice is one unit): the autoscaler deletes the unit
once it is empty or past the deadline. A fixed node stays drained until an admin
undrains it.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.core.job import JobState
from corral.core.node import NodeState
from corral.core.pools import UNIT_LABEL, UnitPhase
from corral.core.units import format_duration
from corral.errors import ConflictError, NotFoundError, ValidationError
from corral.server.db.models import NodeRow, PoolUnitRow, TaskRow
from corral.server.services.notify import notify_jobs
from corral.server.services.transitions import lock_job, move_job, move_node

MAX_DEADLINE = 24 * 3600.0


def give_notice_in(
    session: Session, node: NodeRow, leave_at: float, by: str, now: float
) -> set[int]:
    """Give ``node`` notice that it leaves at ``leave_at`` (in the caller's transaction);
    returns the ids of the jobs preempted."""
    if node.leave_at is not None and node.leave_at <= leave_at:
        return set()  # an earlier notice stands
    node.leave_at = leave_at
    why = f"spot notice ({by}): leaves in {format_duration(max(0.0, leave_at - now))}"
    if node.state != NodeState.LOST.value:
        move_node(session, node, NodeState.DRAINING, why, now)
    jobs = set(
        session.scalars(
            select(TaskRow.job_id).where(TaskRow.node == node.name, TaskRow.released.is_(False))
        )
    )
    preempted = set()
    for job_id in sorted(jobs):  # the lock order of agent syncs
        job = lock_job(session, job_id)
        if job is not None and job.state == JobState.RUNNING.value:
            move_job(
                session, job, JobState.PREEMPTING, f"node {node.name} is reclaimed: {why}", now
            )
            preempted.add(job_id)
    return preempted


def give_notice(ctx, name: str, deadline: float, term=None) -> list[str]:  # noqa: ANN001
    """``corral node notice``: ``name`` (and the rest of its pool unit) leaves in
    ``deadline`` seconds. Returns the nodes given notice."""
    if not 0 <= deadline <= MAX_DEADLINE:
        raise ValidationError(f"deadline: between 0 and 24h, got {deadline:g}s")
    now = ctx.clock()
    leave_at = now + deadline
    with ctx.sessions.begin() as session:
        if term is not None:
            term.fence(session)
        node = session.get(NodeRow, name)
        if node is None:
            raise NotFoundError(f"node {name} is not registered (see `corral nodes`)")
        if node.state == NodeState.LOST.value:
            raise ConflictError(f"node {name} is lost; there is nothing on it to stop")
        names = [name]
        unit = session.get(PoolUnitRow, (node.labels or {}).get(UNIT_LABEL, ""))
        if unit is not None:
            names = list(unit.nodes)
            if unit.deadline is None or leave_at < unit.deadline:
                unit.deadline = leave_at
            if unit.phase in (UnitPhase.READY.value, UnitPhase.PROVISIONING.value):
                from corral.server.services.autoscaling import pool_event

                reason = f"{unit.name}: spot notice on {name}"
                pool_event(session, unit.pool, UnitPhase.DRAINING.value, reason, now)
                unit.phase, unit.since, unit.reason = UnitPhase.DRAINING.value, now, reason
        jobs: set[int] = set()
        for each in names:
            row = session.get(NodeRow, each)
            if row is not None:
                jobs |= give_notice_in(session, row, leave_at, "admin", now)
        if term is not None:
            term.announce(session, names)
    ctx.watch.bump(set(names))
    notify_jobs(ctx, jobs)
    ctx.wake()
    return names
