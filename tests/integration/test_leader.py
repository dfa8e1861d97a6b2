"""Leader election and fencing against a real database (a SQLite file and PostgreSQL).

Two ``Leadership`` objects play two replicas over one database, with a clock the test
moves, so that lease expiry needs no waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from corral.errors import FencedError, UnschedulableError
from corral.schemas.agent import DeviceIn, RegisterRequest
from corral.schemas.manifest import parse_manifest
from corral.server.app import build_context
from corral.server.context import Context, ServerSettings
from corral.server.db.models import JobRow, TaskRow
from corral.server.leader import Leadership, nudges
from corral.server.services.jobs import JobService
from corral.server.services.nodes import NodeService
from corral.server.services.scheduler import apply_cycle, plan_cycle, run_cycle

TTL = 4.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def ctx(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Context]:
    """A control plane context (no loop) on a fresh database, with one 2-GPU node."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'corral.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    context = build_context(ServerSettings(db_url=url, home=tmp_path / "home"))
    NodeService(context).register(
        RegisterRequest(
            name="node-a",
            agent_id="agent-1",
            address="127.0.0.1",
            devices=[DeviceIn(index=i, model="H100", memory=80 * 10**9) for i in range(2)],
            cpus=32,
            memory=256 * 10**9,
        )
    )
    yield context
    context.sessions.kw["bind"].dispose()


def replicas(ctx: Context, clock: Clock) -> tuple[Leadership, Leadership]:
    a = Leadership(ctx.sessions, "http://a", TTL, clock, replica_id="a")
    b = Leadership(ctx.sessions, "http://b", TTL, clock, replica_id="b")
    return a, b


def submit(ctx: Context, gpus: int = 2) -> int:
    manifest = parse_manifest({"command": "true", "resources": {"gpus": gpus}})
    job, _created = JobService(ctx).submit(manifest, user="alice")
    return job.id


def tasks(ctx: Context) -> int:
    with ctx.sessions() as session:
        return session.scalar(select(func.count()).select_from(TaskRow)) or 0


def state(ctx: Context, job_id: int) -> str:
    with ctx.sessions() as session:
        return session.get_one(JobRow, job_id).state


def test_exactly_one_leader_and_takeover_only_after_expiry(ctx: Context) -> None:
    clock = Clock()
    a, b = replicas(ctx, clock)
    first = a.step()
    assert first is not None and first.epoch == 1
    assert b.step() is None  # a live lease is never taken
    clock.now += TTL / 2
    assert a.step() == first  # renewed: same term
    clock.now += TTL * 0.9
    assert b.step() is None  # renewal moved the expiry on
    clock.now += TTL  # a stops renewing (paused, partitioned, killed)
    second = b.step()
    assert second is not None and second.epoch == 2
    assert a.step() is None and not a.is_leader  # a finds out it was deposed
    assert b.read().holder == "b" and b.read().address == "http://b"
    b.resign()  # a clean shutdown hands over at once
    third = a.step()
    assert third is not None and third.epoch == 3


def test_a_deposed_leader_cannot_apply_a_cycle_it_computed(ctx: Context) -> None:
    clock = Clock()
    a, b = replicas(ctx, clock)
    old = a.step()
    assert old is not None
    job = submit(ctx)
    with pytest.raises(FencedError), ctx.sessions.begin() as session:
        plan = plan_cycle(ctx, session)  # a decides to place the job ...
        assert [p.job_id for p in plan.decisions.placements] == [job]
        clock.now += TTL * 2  # ... stalls past its lease, and b takes over
        assert b.step() is not None
        old.fence(session)  # what run_cycle does before applying
        apply_cycle(ctx, session, plan)
    assert state(ctx, job) == "pending" and tasks(ctx) == 0
    with pytest.raises(FencedError):  # a whole cycle on the stale term applies nothing
        run_cycle(ctx, old)
    assert state(ctx, job) == "pending" and tasks(ctx) == 0
    assert run_cycle(ctx, b.term).placed == 1  # the new leader places it, once
    assert state(ctx, job) == "running" and tasks(ctx) == 1


def test_a_takeover_waits_for_the_fenced_write_in_flight(ctx: Context) -> None:
    """Fencing locks the lease: a replica taking over blocks until the leader's write
    transaction commits, so that write is ordered before the new term."""
    clock = Clock()
    a, b = replicas(ctx, clock)
    term = a.step()
    assert term is not None
    job = submit(ctx)
    took: list[object] = []
    with ctx.sessions.begin() as session:
        plan = plan_cycle(ctx, session)
        term.fence(session)
        clock.now += TTL * 2
        contender = threading.Thread(target=lambda: took.append(b.step()))
        contender.start()
        contender.join(0.5)
        assert contender.is_alive()  # blocked on the lease row until we commit
        apply_cycle(ctx, session, plan)
    contender.join(30)
    assert took and took[0] is not None and took[0].epoch == 2  # type: ignore[attr-defined]
    assert state(ctx, job) == "running" and tasks(ctx) == 1
    with pytest.raises(FencedError):
        run_cycle(ctx, term)


def test_wakes_reach_the_leader_and_its_changes_reach_the_followers(ctx: Context) -> None:
    clock = Clock()
    a, b = replicas(ctx, clock)
    term = a.step()
    b.step()
    assert not a.woken()  # the first look only learns the count
    b.request_wake()
    assert a.woken() and not a.woken()
    before = b.last
    submit(ctx)
    run_cycle(ctx, term)  # places the job on node-a
    b.step()
    assert before is not None and b.last is not None
    assert nudges(before, b.last) == {"node-a"}
    assert nudges(b.last, b.last) == set()
    run_cycle(ctx, term)  # nothing to place: nothing announced
    submit(ctx, gpus=1)
    assert nudges(before, b.read()) == {"node-a"}
    # a lost node: any node's agent may have work to stop
    ctx.clock = lambda: time.time() + ctx.settings.node_timeout + 1
    ctx.started_at = 0.0
    assert NodeService(ctx).check_liveness(term) == ["node-a"]
    after = b.read()
    assert nudges(b.last, after) is None and nudges(before, after) is None


def test_a_replica_accepts_jobs_for_a_node_another_replica_just_registered(
    ctx: Context, tmp_path: Path
) -> None:
    other = build_context(ServerSettings(db_url=ctx.settings.db_url, home=tmp_path / "other"))
    try:
        with pytest.raises(UnschedulableError):
            submit(other, gpus=4)  # its inventory now caches node-a's 2 GPUs
        NodeService(ctx).register(
            RegisterRequest(
                name="node-b",
                agent_id="agent-2",
                address="127.0.0.1",
                devices=[DeviceIn(index=i, model="H100", memory=80 * 10**9) for i in range(4)],
                cpus=32,
                memory=256 * 10**9,
            )
        )
        assert state(other, submit(other, gpus=4)) == "pending"
    finally:
        other.sessions.kw["bind"].dispose()
