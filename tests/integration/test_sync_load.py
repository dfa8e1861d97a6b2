"""What a sync costs the server: whom it wakes, what it writes, how often agents come.

Issue 21: every rank's start used to wake every other node of its gang (thousands of
syncs with nothing to do on a run of short gangs), every sync wrote the node's row, and
agents with quiet tasks synced every interval.
"""

from __future__ import annotations

from sqlalchemy import select

from corral.server.db.models import JobRow, NodeRow
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, report


def gang(server: Server, nodes: tuple[FakeHardwareAgent, ...]) -> int:
    """A job with one 8-GPU task on each of ``nodes``, placed; its id."""
    for node in nodes:
        node.sync()
    job = server.client().submit(
        {"nodes": len(nodes), "resources": {"gpus": 8}, "command": ["run"]}
    )
    wait_for(lambda: server.client().get(job.id).state == "running", 10, "the gang placed")
    return job.id


def rank_of(server: Server, job_id: int, node: str) -> int:
    return next(t.rank for t in server.client().get(job_id).tasks if t.node == node)


def test_a_rank_starting_or_ending_well_wakes_no_other_node(server: Server) -> None:
    a, b = FakeHardwareAgent(server, "node-a"), FakeHardwareAgent(server, "node-b")
    job_id = gang(server, (a, b))
    ra, rb = rank_of(server, job_id, "node-a"), rank_of(server, job_id, "node-b")
    watch = server.ctx.watch
    before = watch.version("node-b")
    a.sync([report(job_id, ra, "running", pid=1)])  # a rank starts
    b.sync([report(job_id, rb, "running", pid=2)])
    assert watch.version("node-b") == before
    a.sync([report(job_id, ra, "exited", exit_code=0)])  # one rank is done, the job is not
    assert watch.version("node-b") == before
    assert server.client().get(job_id).state == "running"


def test_a_rank_that_fails_wakes_the_other_nodes_of_its_gang(server: Server) -> None:
    a, b = FakeHardwareAgent(server, "node-a"), FakeHardwareAgent(server, "node-b")
    job_id = gang(server, (a, b))
    ra, rb = rank_of(server, job_id, "node-a"), rank_of(server, job_id, "node-b")
    a.sync([report(job_id, ra, "running", pid=1)])
    b.sync([report(job_id, rb, "running", pid=2)])
    before = server.ctx.watch.version("node-b")
    a.sync([report(job_id, ra, "exited", exit_code=3)])  # the job fails: its peer must stop
    assert server.ctx.watch.version("node-b") > before
    assert b.sync([report(job_id, rb, "running", pid=2)])["tasks"] == []


def test_a_sync_that_changes_nothing_writes_nothing(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    node.sync()
    with server.ctx.sessions() as session:
        first = session.scalar(select(NodeRow.last_heartbeat).where(NodeRow.name == "node-a"))
    answer = node.sync()  # at once: within the heartbeat period
    with server.ctx.sessions() as session:
        again = session.scalar(select(NodeRow.last_heartbeat).where(NodeRow.name == "node-a"))
    assert again == first
    settings = server.ctx.settings
    assert settings.heartbeat_period <= settings.node_timeout / 10
    # quiet agents sync less often, and still several times per node timeout
    assert answer["heartbeat_interval"] == settings.heartbeat_interval
    assert settings.sync_interval <= answer["heartbeat_interval"] <= settings.node_timeout / 3


def test_a_cycle_without_estimates_keeps_the_stored_ones(server: Server) -> None:
    """Estimated starts are computed at most every ``ESTIMATE_PERIOD``; the cycles in
    between keep each waiting job's last estimate instead of clearing it."""
    from corral.server.services.scheduler import run_cycle

    node = FakeHardwareAgent(server, "node-a")
    node.sync()
    client = server.client()
    busy = client.submit({"resources": {"gpus": 8}, "command": ["run"], "time_limit": "1h"})
    wait_for(lambda: client.get(busy.id).state == "running", 10, "the first job placed")
    waiting = client.submit({"resources": {"gpus": 8}, "command": ["run"], "time_limit": "1h"})
    server.ctx.estimated_at = None  # the next cycle estimates
    run_cycle(server.ctx)
    with server.ctx.sessions() as session:
        estimate = session.scalar(select(JobRow.estimated_start).where(JobRow.id == waiting.id))
    assert estimate is not None
    run_cycle(server.ctx)  # within the period: no estimates, the stored one stays
    with server.ctx.sessions() as session:
        kept = session.scalar(select(JobRow.estimated_start).where(JobRow.id == waiting.id))
    assert kept == estimate
