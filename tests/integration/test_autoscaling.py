"""The control plane's autoscaling pass against a real database (SQLite and PostgreSQL),
with a clock the test moves and a scripted provider standing in for a cloud (the only
part simulated): admission of jobs only a pool could hold, the waits shown, readiness on
registration, provider failures with backoff, provisioning timeouts, idle scale-down and
removal of the unit's nodes, and a provider's spot notice."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from corral.core.node import Node
from corral.core.pools import Pool
from corral.errors import UnschedulableError
from corral.providers.base import Provider, ProviderContext, ProviderError, ProviderUnit, UnitState
from corral.schemas.agent import DeviceIn, RegisterRequest
from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.schemas.manifest import parse_manifest
from corral.server.app import build_context
from corral.server.context import Context, ServerSettings
from corral.server.db.models import EventRow, JobRow, NodeRow, PoolUnitRow
from corral.server.services.autoscaling import Autoscaling
from corral.server.services.jobs import JobService
from corral.server.services.nodes import NodeService
from corral.server.services.scheduler import run_cycle

POOLS = (
    "pools:\n"
    "  - name: gpu\n"
    "    node: {gpus: {count: 8, model: H100}, cpus: 64, memory: 512GB}\n"
    "    max: 2\n"
    "    provisioning_time: 2m\n"
    "    cost_per_hour: 30\n"
)


class Clock:
    def __init__(self) -> None:
        # from now: job specs are memoized per process by (id, submission time, user)
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class ScriptedCloud(Provider):
    """Units appear as asked, unless told to refuse (``fail``) or to hang (``hang``)."""

    name = "local"

    def __init__(self) -> None:
        super().__init__(ProviderContext("http://x", None, Path("/nonexistent")))
        self.units_: dict[str, ProviderUnit] = {}
        self.created: list[str] = []
        self.fail = False

    def create(self, pool: Pool, unit: str, nodes: tuple[Node, ...]) -> None:
        if self.fail:
            raise ProviderError("ZONE_RESOURCE_POOL_EXHAUSTED")
        self.created.append(unit)
        self.units_[unit] = ProviderUnit(unit, UnitState.CREATING)

    def delete(self, pool: Pool, unit: str) -> None:
        self.units_.pop(unit, None)

    def units(self, pool: Pool) -> dict[str, ProviderUnit]:
        return dict(self.units_)


@pytest.fixture(params=["sqlite", "postgresql"])
def ctx(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Context]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'corral.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    pools = load_cluster(POOLS).to_pools()
    settings = ServerSettings(db_url=url, home=tmp_path / "home", pools=pools)
    context = build_context(settings)
    context.config = load_config("autoscaling: {scale_down_idle: 10m, backoff: 1m}")
    context.clock = Clock()
    yield context
    context.sessions.kw["bind"].dispose()


def scaler(ctx: Context) -> tuple[Autoscaling, ScriptedCloud]:
    autoscaling = Autoscaling(ctx)
    cloud = ScriptedCloud()
    autoscaling._providers = {"local": cloud}
    return autoscaling, cloud


def submit(ctx: Context, gpus: int, nodes: int = 1) -> int:
    manifest = parse_manifest({"command": "true", "nodes": nodes, "resources": {"gpus": gpus}})
    job, _ = JobService(ctx).submit(manifest, user="alice")
    return job.id


def cycle_and_pass(ctx: Context, autoscaling: Autoscaling) -> None:
    autoscaling.run(None, run_cycle(ctx).waiting)


def register(ctx: Context, unit_nodes: tuple[Node, ...]) -> None:
    for node in unit_nodes:
        NodeService(ctx).register(
            RegisterRequest(
                name=node.name,
                agent_id=f"agent-{node.name}",
                address="127.0.0.1",
                devices=[
                    DeviceIn(index=d.index, model=d.model, memory=d.memory) for d in node.devices
                ],
                cpus=node.cpus,
                memory=node.memory,
                labels=dict(node.labels),
            )
        )


def job_row(ctx: Context, job_id: int) -> JobRow:
    with ctx.sessions() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        return row


def unit_phases(ctx: Context) -> dict[str, str]:
    with ctx.sessions() as session:
        return {r.name: r.phase for r in session.scalars(select(PoolUnitRow))}


def pool_events(ctx: Context) -> list[str]:
    with ctx.sessions() as session:
        rows = session.scalars(
            select(EventRow).where(EventRow.entity == "pool").order_by(EventRow.id)
        )
        return [f"{r.to_state}: {r.reason}" for r in rows]


def test_a_gang_only_a_pool_can_hold_waits_for_two_nodes_which_become_ready_on_registration(
    ctx: Context,
) -> None:
    autoscaling, cloud = scaler(ctx)
    job = submit(ctx, gpus=8, nodes=2)  # accepted: no node exists, but the pool may add two
    with pytest.raises(UnschedulableError, match=r"counting the nodes pools gpu may add"):
        submit(ctx, gpus=8, nodes=3)  # more than the pool's max: refused at once
    cycle_and_pass(ctx, autoscaling)
    assert cloud.created == ["gpu-0", "gpu-1"]  # both at once
    reason = job_row(ctx, job).reason or ""
    assert "waiting for pool gpu to provision 2 nodes" in reason and "2m" in reason, reason
    ctx.clock.now += 30
    cycle_and_pass(ctx, autoscaling)
    assert cloud.created == ["gpu-0", "gpu-1"]  # in flight: nothing more asked
    ctx.metrics.bind(ctx)
    scraped = ctx.metrics.render().decode()
    assert 'corral_pool_units{phase="provisioning",pool="gpu"} 2.0' in scraped
    assert 'corral_pool_cost_per_hour{pool="gpu"} 60.0' in scraped
    pool = autoscaling.by_name["gpu"]
    register(ctx, pool.unit_nodes("gpu-0"))
    cycle_and_pass(ctx, autoscaling)
    assert unit_phases(ctx) == {"gpu-0": "ready", "gpu-1": "provisioning"}
    register(ctx, pool.unit_nodes("gpu-1"))
    cycle_and_pass(ctx, autoscaling)
    assert unit_phases(ctx) == {"gpu-0": "ready", "gpu-1": "ready"}
    run_cycle(ctx)
    assert job_row(ctx, job).state == "running" or job_row(ctx, job).state == "starting"
    assert any(e.startswith("provision: gpu-0, gpu-1") for e in pool_events(ctx))


def test_a_failing_provider_backs_off_and_the_job_says_so(ctx: Context) -> None:
    autoscaling, cloud = scaler(ctx)
    job = submit(ctx, gpus=4)
    cloud.fail = True
    cycle_and_pass(ctx, autoscaling)
    assert unit_phases(ctx) == {"gpu-0": "failed"}, pool_events(ctx)
    assert any("ZONE_RESOURCE_POOL_EXHAUSTED" in e for e in pool_events(ctx))
    cloud.fail = False
    ctx.clock.now += 5
    cycle_and_pass(ctx, autoscaling)  # the failed unit is cleaned up; the pool backs off
    cycle_and_pass(ctx, autoscaling)
    assert cloud.created == []
    assert "gpu" in (job_row(ctx, job).reason or "") and "retry" in (job_row(ctx, job).reason or "")
    ctx.clock.now += 61  # past the backoff (1m after one failure)
    cycle_and_pass(ctx, autoscaling)
    cycle_and_pass(ctx, autoscaling)
    assert len(cloud.created) == 1


def test_a_unit_that_never_comes_is_given_up_after_the_timeout(ctx: Context) -> None:
    autoscaling, cloud = scaler(ctx)
    submit(ctx, gpus=1)
    cycle_and_pass(ctx, autoscaling)
    assert unit_phases(ctx) == {"gpu-0": "provisioning"}
    ctx.clock.now += 3 * 120 + 1  # provisioning_timeout 3 x 2m (min_timeout 5m)
    cycle_and_pass(ctx, autoscaling)
    assert unit_phases(ctx) == {"gpu-0": "deleting"}
    cycle_and_pass(ctx, autoscaling)  # the provider no longer lists it: gone
    assert "gpu-0" not in unit_phases(ctx)
    events = pool_events(ctx)
    assert (
        any(e.startswith("deleting: gpu-0") for e in events) and "deleted: gpu-0: deleted" in events
    )


def test_an_idle_unit_is_drained_deleted_and_its_nodes_removed(ctx: Context) -> None:
    autoscaling, cloud = scaler(ctx)
    job = submit(ctx, gpus=1)
    cycle_and_pass(ctx, autoscaling)
    register(ctx, autoscaling.by_name["gpu"].unit_nodes("gpu-0"))
    JobService(ctx).cancel(job)  # the work went away before it started
    cycle_and_pass(ctx, autoscaling)
    assert unit_phases(ctx) == {"gpu-0": "ready"}
    ctx.clock.now += 599
    cycle_and_pass(ctx, autoscaling)
    assert unit_phases(ctx) == {"gpu-0": "ready"}  # not idle long enough yet
    ctx.clock.now += 2
    cycle_and_pass(ctx, autoscaling)
    cycle_and_pass(ctx, autoscaling)
    cycle_and_pass(ctx, autoscaling)
    assert unit_phases(ctx) == {}
    with ctx.sessions() as session:
        assert session.scalars(select(NodeRow)).all() == []


def test_a_providers_spot_notice_drains_the_unit(ctx: Context) -> None:
    autoscaling, cloud = scaler(ctx)
    autoscaling.pools = tuple(autoscaling.pools)
    submit(ctx, gpus=8)
    cycle_and_pass(ctx, autoscaling)
    register(ctx, autoscaling.by_name["gpu"].unit_nodes("gpu-0"))
    cycle_and_pass(ctx, autoscaling)
    leave = ctx.clock.now + 120
    cloud.units_["gpu-0"] = ProviderUnit("gpu-0", UnitState.RUNNING, notice=leave)
    cycle_and_pass(ctx, autoscaling)
    assert unit_phases(ctx)["gpu-0"] == "draining"
    with ctx.sessions() as session:
        node = session.get(NodeRow, "gpu-0")
        assert node is not None and node.state == "draining" and node.leave_at == leave


def test_a_mostly_free_unit_is_consolidated_its_job_preempted_to_move(ctx: Context) -> None:
    autoscaling, cloud = scaler(ctx)
    pool = autoscaling.by_name["gpu"]
    now = ctx.clock.now
    cloud.units_ = {u: ProviderUnit(u, UnitState.RUNNING) for u in ("gpu-0", "gpu-1")}
    with ctx.sessions.begin() as session:
        for unit in ("gpu-0", "gpu-1"):
            names = [n.name for n in pool.unit_nodes(unit)]
            session.add(
                PoolUnitRow(
                    name=unit, pool="gpu", phase="ready", since=now, requested_at=now, nodes=names
                )
            )
    for unit in ("gpu-0", "gpu-1"):
        register(ctx, pool.unit_nodes(unit))
    small, big = (
        JobService(ctx)
        .submit(
            parse_manifest(
                {
                    "command": "true",
                    "resources": {"gpus": gpus},
                    "node_selector": {"corral.pool/unit": unit},
                }
            ),
            user="alice",
        )[0]
        .id
        for gpus, unit in ((1, "gpu-0"), (6, "gpu-1"))
    )
    run_cycle(ctx)
    with ctx.sessions.begin() as session:  # both run; the small one checkpointed just now
        for job_id in (small, big):
            row = session.get(JobRow, job_id)
            assert row is not None and row.state in ("starting", "running")
            row.state, row.last_checkpoint_at = "running", ctx.clock.now + 600
    ctx.clock.now += 601  # the units have been ready for scale_down_idle
    plan = autoscaling.run(None, [])
    assert [job for job, _ in plan.preemptions] == [small]
    assert unit_phases(ctx) == {"gpu-0": "draining", "gpu-1": "ready"}
    moved = job_row(ctx, small)
    assert moved.state == "preempting" and "moved off gpu-0" in (moved.reason or "")
    assert job_row(ctx, big).state == "running"
    assert any(e.startswith("draining: gpu-0: consolidating") for e in pool_events(ctx))
