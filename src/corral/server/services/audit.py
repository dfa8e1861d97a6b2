"""Reading the audit log (written by ``corral.server.audit.AuditMiddleware``)."""

from __future__ import annotations

from sqlalchemy import select

from corral.schemas.api import AuditOut
from corral.server.context import Context
from corral.server.db.models import AuditRow


def list_audit(
    ctx: Context, user: str | None = None, since: float | None = None, limit: int = 100
) -> list[AuditOut]:
    """The newest ``limit`` entries, oldest first; optionally only ``user``'s, at or after
    ``since``."""
    query = select(AuditRow)
    if user is not None:
        query = query.where(AuditRow.user == user)
    if since is not None:
        query = query.where(AuditRow.at >= since)
    query = query.order_by(AuditRow.id.desc()).limit(limit)
    with ctx.sessions() as session:
        rows = list(session.scalars(query))
    return [
        AuditOut(
            id=r.id,
            at=r.at,
            user=r.user,
            role=r.role,
            token_id=r.token_id,
            method=r.method,
            path=r.path,
            target=r.target,
            status=r.status,
        )
        for r in reversed(rows)
    ]
