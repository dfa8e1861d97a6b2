"""Queues: configuration, quota usage and borrowing, fair share, live counts."""

from __future__ import annotations

from sqlalchemy import func, select

from corral.scheduling.fairshare import Capacity, queue_shares
from corral.scheduling.quota import QuotaBook
from corral.schemas.api import QueueOut
from corral.server.context import Context
from corral.server.db.models import JobRow
from corral.server.services.scheduler import load_cluster, stored_usage


def list_queues(ctx: Context) -> list[QueueOut]:
    """Every configured queue: quota, usage and borrowing per key (GPUs, or a model), its
    fair share (past usage decayed as of the last cycle, plus what it holds now, over its
    weight) and its running and pending jobs."""
    with ctx.sessions() as session:
        counts = {
            (queue, state): n
            for queue, state, n in session.execute(
                select(JobRow.queue, JobRow.state, func.count())
                .where(JobRow.state.in_(("pending", "running", "preempting")))
                .group_by(JobRow.queue, JobRow.state)
            )
        }
        state = load_cluster(session).state
        _, ledger = stored_usage(session, ctx.config.policy.fair_share_half_life, ctx.clock())
    book = QuotaBook.build(ctx.config, state.allocations, state.nodes)
    shares = queue_shares(ledger, state.allocations, Capacity.of(state.nodes))
    rows = book.rows()
    out = []
    for q in ctx.config.queues:
        mine = [r for r in rows if r.queue == q.name]
        out.append(
            QueueOut(
                name=q.name,
                weight=q.weight,
                quota=dict(q.quota),
                cohort=q.cohort,
                running=counts.get((q.name, "running"), 0) + counts.get((q.name, "preempting"), 0),
                pending=counts.get((q.name, "pending"), 0),
                gpus_used=round(book.usage(q.name).get("gpus", 0.0), 3),
                borrowed={r.key: round(r.borrowed, 3) for r in mine if r.borrowed},
                borrowing_limit=dict(q.borrowing_limit),
                share=round(shares.get(q.name, 0.0) / q.weight, 6),
            )
        )
    return out
