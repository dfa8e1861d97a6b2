"""The control plane learns the corral policy's request mix from the jobs it sees (pending,
running, and the last to end, read back from the database after a restart)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from corral.scheduling.plugins.fgd import RequestClass
from corral.schemas.agent import DeviceIn, RegisterRequest
from corral.schemas.manifest import parse_manifest
from corral.server.app import build_context
from corral.server.context import Context, ServerSettings
from corral.server.db.models import TaskRow
from corral.server.services.jobs import JobService
from corral.server.services.nodes import NodeService
from corral.server.services.scheduler import run_cycle

T4 = {"command": "true", "resources": {"gpus": 1, "gpu_model": "T4"}}
ANY = {"command": "true", "resources": {"gpus": 1}}


def context(home: Path, config: str | None = None) -> Context:
    path = None
    if config is not None:
        home.mkdir(parents=True, exist_ok=True)
        path = home / "scheduler.yaml"
        path.write_text(config)
    url = f"sqlite:///{home / 'corral.db'}"
    return build_context(ServerSettings(db_url=url, home=home, config_path=path))


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Context]:
    """A control plane (no loop) on SQLite with a T4 node and a G2 node, one GPU each."""
    context_ = context(tmp_path / "home")
    for name, model in (("a-t4", "T4"), ("b-g2", "G2")):
        NodeService(context_).register(
            RegisterRequest(
                name=name,
                agent_id=f"agent-{name}",
                address="127.0.0.1",
                devices=[DeviceIn(index=0, model=model, memory=16 * 10**9)],
                cpus=32,
                memory=256 * 10**9,
            )
        )
    yield context_
    context_.sessions.kw["bind"].dispose()


def submit(ctx: Context, manifest: dict) -> int:
    job, _created = JobService(ctx).submit(parse_manifest(manifest), user="alice")
    return job.id


def node_of(ctx: Context, job_id: int) -> str | None:
    with ctx.sessions() as session:
        return session.scalar(select(TaskRow.node).where(TaskRow.job_id == job_id))


def test_the_profile_takes_the_mix_of_the_pending_and_running_jobs(ctx: Context) -> None:
    assert ctx.profile.scores[0].mix == ()  # type: ignore[attr-defined]  # packs until then
    for manifest in (T4, T4, T4, ANY):
        submit(ctx, manifest)
    run_cycle(ctx)
    score = ctx.profile.scores[0]
    assert score.name == "corral"
    assert score.mix == (  # type: ignore[attr-defined]
        RequestClass(1000, 1, 0.0, "T4", 0.75),
        RequestClass(1000, 1, 0.0, None, 0.25),
    )
    assert score.fragmentation.supply == {"G2": 1, "T4": 1}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("config", "node"),
    [
        pytest.param(None, "b-g2", id="learned-from-history"),
        pytest.param("policy: {sharing: packing}", "a-t4", id="packing"),
    ],
)
def test_a_restarted_control_plane_learns_from_the_jobs_that_ended(
    ctx: Context, tmp_path: Path, config: str | None, node: str
) -> None:
    for _ in range(3):
        JobService(ctx).cancel(submit(ctx, T4))  # they ended before any cycle saw them
    restarted = context(tmp_path / "home", config)
    try:
        job_id = submit(restarted, ANY)
        run_cycle(restarted)
        # 3 of the 4 jobs seen wanted a T4: the any-model job keeps off the only T4
        assert node_of(restarted, job_id) == node
    finally:
        restarted.sessions.kw["bind"].dispose()
