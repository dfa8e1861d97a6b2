"""What would let a pending job start sooner, computed on demand from the cluster's state."""

from __future__ import annotations

from corral.core.job import JobState
from corral.errors import NotFoundError
from corral.scheduling.advice import start_sooner
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
        job, estimated = job_of(row), row.estimated_start
        state = load_cluster(session).state
    snapshot = Snapshot.build(state.nodes, state.allocations)
    hints = start_sooner(job, snapshot, ctx.profile, ctx.config, now, estimated)
    return AdviceOut(hints=hints)
