"""Queues: configuration plus live counts."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import func, select

from corral.schemas.api import QueueOut
from corral.server.context import Context
from corral.server.db.models import JobRow, TaskRow


def list_queues(ctx: Context) -> list[QueueOut]:
    with ctx.sessions() as session:
        counts = {
            (queue, state): n
            for queue, state, n in session.execute(
                select(JobRow.queue, JobRow.state, func.count())
                .where(JobRow.state.in_(("pending", "running", "preempting")))
                .group_by(JobRow.queue, JobRow.state)
            )
        }
        used: Counter[str] = Counter()
        for queue, gpus, milli in session.execute(
            select(JobRow.queue, TaskRow.gpus, TaskRow.gpu_milli)
            .join(TaskRow, TaskRow.job_id == JobRow.id)
            .where(TaskRow.released.is_(False))
        ):
            used[queue] += len(gpus) * milli / 1000
    return [
        QueueOut(
            name=q.name,
            weight=q.weight,
            quota=dict(q.quota),
            cohort=q.cohort,
            running=counts.get((q.name, "running"), 0) + counts.get((q.name, "preempting"), 0),
            pending=counts.get((q.name, "pending"), 0),
            gpus_used=round(used[q.name], 3),
        )
        for q in ctx.config.queues
    ]
