"""``GET /pools``: each pool with its units, desired size, backoff and cost now."""

from __future__ import annotations

from sqlalchemy import select

from corral.core.pools import PoolFailures, UnitPhase
from corral.schemas.api import PoolOut, UnitOut
from corral.server.db.models import PoolFailureRow, PoolUnitRow


def list_pools(ctx) -> list[PoolOut]:  # noqa: ANN001 -- Context
    with ctx.sessions() as session:
        units = list(session.scalars(select(PoolUnitRow).order_by(PoolUnitRow.requested_at)))
        failures = {r.pool: r for r in session.scalars(select(PoolFailureRow))}
    now = ctx.clock()
    found = []
    for pool in ctx.settings.pools:
        mine = [u for u in units if u.pool == pool.name]
        count = {phase: sum(u.phase == phase.value for u in mine) for phase in UnitPhase}
        desired = count[UnitPhase.PROVISIONING] + count[UnitPhase.READY]
        failed = failures.get(pool.name)
        retry = None
        if failed is not None:
            at = ctx.config.autoscaling.retry_after(PoolFailures(failed.count, failed.last))
            retry = at if at > now else None
        found.append(
            PoolOut(
                name=pool.name,
                provider=pool.provider,
                min=pool.min,
                max=pool.max,
                desired=desired,
                ready=count[UnitPhase.READY],
                provisioning=count[UnitPhase.PROVISIONING],
                draining=count[UnitPhase.DRAINING] + count[UnitPhase.DELETING],
                hosts_per_unit=pool.hosts_per_unit,
                unit=pool.describe_unit(),
                spot=pool.spot,
                cost_per_hour=pool.cost_per_hour,
                cost_now=round(
                    pool.unit_cost_per_hour * sum(u.phase != UnitPhase.FAILED.value for u in mine),
                    6,
                ),
                failures=failed.count if failed is not None else 0,
                retry_at=retry,
                units=[
                    UnitOut(
                        name=u.name,
                        phase=u.phase,
                        nodes=list(u.nodes),
                        since=u.since,
                        requested_at=u.requested_at,
                        idle_since=u.idle_since,
                        deadline=u.deadline,
                        reason=u.reason,
                    )
                    for u in mine
                ],
            )
        )
    return found
