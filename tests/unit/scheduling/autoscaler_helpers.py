"""Builders for the autoscaler's tests: pools, unit records, a pass, and a tiny keeper."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from corral.core.allocation import Allocation
from corral.core.job import Job
from corral.core.node import Node
from corral.core.pools import AutoscalingConfig, Pool, PoolFailures, Unit, UnitPhase
from corral.core.tpu import parse_tpu
from corral.scheduling.autoscaler import autoscale
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.registry import build_profile
from corral.scheduling.scaling import AutoscaleInput, Delete, Drain, Provision, ScalePlan
from corral.schemas.cluster import PoolDecl
from tests.builders import job, node

NOW = 1_000_000.0
CONFIG = SchedulerConfig()
PROFILE = build_profile(CONFIG)


def gpu_pool(
    name: str = "h100", gpus: int = 8, model: str = "H100", cost: float = 10.0, **fields: object
) -> Pool:
    """A pool of ``gpus``-GPU nodes (max 8 unless told), ``cost`` per node-hour."""
    template = node("template").gpus(gpus, model=model).build()
    return Pool(name, (template,), **{"max": 8, "cost_per_hour": cost, **fields})  # type: ignore[arg-type]


def tpu_pool(name: str = "v5p", shape: tuple[int, ...] = (2, 2, 4), **fields: object) -> Pool:
    decl = PoolDecl(
        name=name,
        tpu={"generation": "v5p", "shape": list(shape), "chips_per_host": [2, 2, 1]},
        max=2,
        cost_per_hour=4.2,
    )
    return replace(decl.to_pool(), **fields)


def tpu_job(job_id: int, tpu: str) -> Job:
    """A TPU job submitted before any host of its generation registered (not sized)."""
    built = job(job_id).build()
    return replace(built, spec=replace(built.spec, tpu=parse_tpu(tpu), nodes=0))


def unit(
    pool: Pool,
    index: int,
    phase: UnitPhase = UnitPhase.READY,
    *,
    requested_at: float = NOW - 3600,
    idle_since: float | None = None,
    deadline: float | None = None,
) -> Unit:
    name = pool.unit_name(index)
    nodes = tuple(n.name for n in pool.unit_nodes(name))
    return Unit(
        name, pool.name, phase, requested_at, requested_at, nodes, idle_since, deadline=deadline
    )


def registered(pools: Sequence[Pool], units: Sequence[Unit]) -> list[Node]:
    """The nodes of the ready and draining units, as their agents register them."""
    by_name = {p.name: p for p in pools}
    return [
        n
        for u in units
        if u.phase in (UnitPhase.READY, UnitPhase.DRAINING) and u.pool in by_name
        for n in by_name[u.pool].unit_nodes(u.name)
    ]


def scale(
    pools: Sequence[Pool],
    units: Sequence[Unit] = (),
    pending: Sequence[Job | object] = (),
    *,
    allocations: Sequence[Allocation] = (),
    fixed: Sequence[Node] = (),
    now: float = NOW,
    config: SchedulerConfig = CONFIG,
    duty: Mapping[str, float] | None = None,
    failures: Mapping[str, PoolFailures] | None = None,
) -> ScalePlan:
    """One pass; ``pending`` takes jobs or job builders."""
    jobs = tuple(j if isinstance(j, Job) else j.build() for j in pending)  # type: ignore[attr-defined]
    inp = AutoscaleInput(
        pools=tuple(pools),
        units=tuple(units),
        nodes=(*fixed, *registered(pools, units)),
        allocations=tuple(allocations),
        pending=jobs,
        now=now,
        duty=duty or {},
        failures=failures or {},
    )
    return autoscale(inp, config, PROFILE)


def with_autoscaling(**fields: object) -> SchedulerConfig:
    return replace(CONFIG, autoscaling=AutoscalingConfig(**fields))  # type: ignore[arg-type]


def provisions(plan: ScalePlan) -> dict[str, tuple[str, ...]]:
    return {a.pool: a.units for a in plan.actions if isinstance(a, Provision)}


def drained(plan: ScalePlan) -> list[str]:
    return [a.unit for a in plan.actions if isinstance(a, Drain)]


def deleted(plan: ScalePlan) -> list[tuple[str, bool]]:
    return [(a.unit, a.failed) for a in plan.actions if isinstance(a, Delete)]


def keep(plan: ScalePlan, units: Sequence[Unit], now: float) -> list[Unit]:
    """What a keeper makes of ``plan``: provisions in flight, drains draining, deletes
    gone."""
    gone = {a.unit for a in plan.actions if isinstance(a, Delete)}
    draining = set(drained(plan))
    kept = [
        replace(u, phase=UnitPhase.DRAINING) if u.name in draining else u
        for u in units
        if u.name not in gone
    ]
    for action in plan.actions:
        if isinstance(action, Provision):
            kept += [
                Unit(name, action.pool, UnitPhase.PROVISIONING, now, now, ())
                for name in action.units
            ]
    return kept
