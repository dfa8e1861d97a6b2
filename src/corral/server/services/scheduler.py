"""The scheduling cycle in the control plane: load, call the pure scheduler, apply.

Load and apply happen in one transaction; placing a job is a guarded update
(``state = pending`` and the same attempt) so a job cancelled meanwhile is never started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from corral.core.allocation import Allocation
from corral.core.job import JobState
from corral.core.lifecycle import transition
from corral.core.units import format_duration
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.server.context import Context
from corral.server.db.models import JobRow, NodeRow, TaskRow
from corral.server.services.converters import allocations_of, job_of, node_of, spec_of
from corral.server.services.notify import notify_jobs
from corral.server.services.transitions import move_job, record

DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class CycleResult:
    placed: int
    pending: int
    duration: float


def run_cycle(ctx: Context) -> CycleResult:
    now = ctx.clock()
    with ctx.sessions.begin() as session:
        node_rows = list(session.scalars(select(NodeRow)))
        held = list(session.scalars(select(TaskRow).where(TaskRow.released.is_(False))))
        pending_rows = list(
            session.scalars(select(JobRow).where(JobRow.state == JobState.PENDING.value))
        )
        state = ClusterState(
            nodes=tuple(node_of(r) for r in node_rows),
            allocations=tuple(allocations_of(held, _expected_ends(session, held))),
        )
        decisions = schedule(state, [job_of(r) for r in pending_rows], ctx.config, now, ctx.profile)
        ports = _ports_in_use(session, held)
        placed = _apply(session, decisions, {r.id: r for r in pending_rows}, node_rows, ports, now)
    ctx.watch.bump({node for alloc in decisions.placements for node in alloc.nodes})
    return CycleResult(placed, len(pending_rows) - placed, ctx.clock() - now)


def _apply(
    session: Session,
    decisions: Decisions,
    pending: dict[int, JobRow],
    nodes: list[NodeRow],
    ports: dict[str, set[int]],
    now: float,
) -> int:
    by_name = {n.name: n for n in nodes}
    placed = 0
    for alloc in decisions.placements:
        job = pending[alloc.job_id]
        port = _pick_port(by_name.get(alloc.tasks[0].node), ports)
        reason = f"placed on {', '.join(alloc.nodes)}" + (f" ({alloc.note})" if alloc.note else "")
        guarded = session.execute(
            update(JobRow)
            .where(
                JobRow.id == job.id,
                JobRow.state == JobState.PENDING.value,
                JobRow.attempt == alloc.attempt,
            )
            .values(
                state=JobState.RUNNING.value,
                reason=reason,
                position=None,
                master_port=port,
                started_at=None,
                updated_at=now,
            )
            .execution_options(synchronize_session=False)
        )
        if guarded.rowcount != 1:
            continue
        placement = transition(JobState.PENDING, JobState.RUNNING, now, reason)
        record(session, "job", str(job.id), alloc.attempt, placement)
        _add_tasks(session, alloc)
        placed += 1
    for job_id, pend in decisions.pending.items():
        job = pending[job_id]
        if job.reason != pend.reason or job.position != pend.position:
            job.reason, job.position = pend.reason, pend.position
    return placed


def _expected_ends(session: Session, held: list[TaskRow]) -> dict[int, float]:
    """When each job holding resources should end: its start (or placement) plus its
    run-time estimate (else time limit); jobs without either are left out (never)."""
    ends = {}
    for job in session.scalars(select(JobRow).where(JobRow.id.in_({t.job_id for t in held}))):
        expected = spec_of(job).expected_runtime
        if expected != math.inf:
            ends[job.id] = (job.started_at or job.updated_at) + expected
    return ends


def _add_tasks(session: Session, alloc: Allocation) -> None:
    for task in alloc.tasks:
        session.add(
            TaskRow(
                job_id=alloc.job_id,
                attempt=alloc.attempt,
                rank=task.rank,
                node=task.node,
                node_rank=task.node_rank,
                local_rank=task.local_rank,
                gpus=list(task.gpus),
                gpu_milli=task.gpu_milli,
                mig_slots=list(task.mig_slots),
                cpus=task.cpus,
                memory=task.memory,
                state="assigned",
                released=False,
                log_size=0,
            )
        )


def _ports_in_use(session: Session, held: list[TaskRow]) -> dict[str, set[int]]:
    """Master ports of jobs holding resources, by the node of their rank 0."""
    masters = {(t.job_id, t.attempt): t.node for t in held if t.rank == 0}
    if not masters:
        return {}
    used: dict[str, set[int]] = {}
    rows = session.execute(
        select(JobRow.id, JobRow.attempt, JobRow.master_port).where(
            JobRow.id.in_({job_id for job_id, _ in masters})
        )
    )
    for job_id, attempt, port in rows:
        node = masters.get((job_id, attempt))
        if node and port:
            used.setdefault(node, set()).add(port)
    return used


def _pick_port(node: NodeRow | None, ports: dict[str, set[int]]) -> int:
    """A port the master node's agent reported free and no running job of it uses."""
    if node is None:
        return DEFAULT_MASTER_PORT
    used = ports.setdefault(node.name, set())
    port = next((p for p in node.free_ports or [] if p not in used), None)
    if port is None:
        port = next(
            p for p in range(DEFAULT_MASTER_PORT, DEFAULT_MASTER_PORT + 10000) if p not in used
        )
    used.add(port)
    return port


def enforce_time_limits(ctx: Context) -> list[int]:
    """Fail running jobs past their ``time_limit``; their tasks are then stopped."""
    now = ctx.clock()
    ended = []
    with ctx.sessions.begin() as session:
        overdue = session.scalars(
            select(JobRow).where(
                JobRow.state == JobState.RUNNING.value,
                JobRow.time_limit.is_not(None),
                JobRow.started_at + JobRow.time_limit < now,
            )
        )
        for job in overdue:
            limit = format_duration(job.time_limit)
            move_job(session, job, JobState.FAILED, f"time limit {limit} exceeded", now)
            ended.append(job.id)
    notify_jobs(ctx, ended)
    return ended
