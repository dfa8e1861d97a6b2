"""Nudge the agents of the nodes whose desired tasks a committed change touched."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select

from corral.server.context import Context
from corral.server.db.models import TaskRow


def notify_jobs(ctx: Context, job_ids: Collection[int], skip: str | None = None) -> None:
    """Bump the watch version of every node holding a task of ``job_ids`` (but ``skip``).

    Call after the transaction that changed the jobs has committed.
    """
    if not job_ids:
        return
    with ctx.sessions() as session:
        nodes = set(
            session.scalars(
                select(TaskRow.node)
                .where(TaskRow.job_id.in_(list(job_ids)), TaskRow.released.is_(False))
                .distinct()
            )
        )
    nodes.discard(skip)
    ctx.watch.bump(nodes)
