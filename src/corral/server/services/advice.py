"""What would let a pending job start sooner, computed on demand from the cluster's state."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from corral.core.job import Job, JobState
from corral.errors import NotFoundError
from corral.scheduling.advice import start_sooner
from corral.scheduling.plan import MAX_JOBS, wait_of
from corral.scheduling.snapshot import Snapshot
from corral.schemas.api import AdviceOut
from corral.server.context import Context
from corral.server.db.models import JobRow
from corral.server.services.converters import job_of
from corral.server.services.scheduler import load_cluster


def job_advice(ctx: Context, job_id: int) -> AdviceOut:
    """Hints for a pending job (``scheduling.advice.start_sooner`` on the cluster as the
    scheduling cycle loads it); none for a job that is not pending."""
    now = ctx.clock()
    with ctx.sessions() as session:
        row = session.get(JobRow, job_id)
        if row is None:
            raise NotFoundError(f"no job with id {job_id}")
        if row.state != JobState.PENDING.value:
            return AdviceOut(hints=[])
        ctx.runtimes.refresh(session)  # (a replica that is not the leader learns here)
        job, estimated = ctx.runtimes.with_prediction(job_of(row), row.user), row.estimated_start
        state = load_cluster(session, ctx.runtimes).state
        ahead = _ahead(ctx, session, row)
    snapshot = Snapshot.build(state.nodes, state.allocations)
    # the plan from now: its start behind the jobs ahead, and whose reservation holds it
    wait = wait_of(job, ahead, snapshot, state.allocations, ctx.profile, ctx.config, now)
    start = wait.start if wait.start is not None else estimated
    hints = start_sooner(job, snapshot, ctx.profile, ctx.config, now, start, wait.reservation)
    return AdviceOut(hints=hints)


def _ahead(ctx: Context, session: Session, row: JobRow) -> list[Job]:
    """The pending jobs before ``row`` in the last cycle's order that wait for resources
    (not for their queue's quota), the first ``MAX_JOBS - 1``, as the cycle sees them."""
    if row.position is None:
        return []
    rows = session.scalars(
        select(JobRow)
        .where(JobRow.state == JobState.PENDING.value, JobRow.position < row.position)
        .order_by(JobRow.position)
        .limit(MAX_JOBS - 1)
    )
    return [
        ctx.runtimes.with_prediction(job_of(r), r.user)
        for r in rows
        if not (r.reason or "").startswith("quota:")
    ]
