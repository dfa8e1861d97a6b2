"""What the database backend must get right when requests race, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

import pytest

from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, report


def sync_together(barrier: threading.Barrier, node: FakeHardwareAgent, task: dict) -> None:
    barrier.wait()
    node.sync([task])


def test_the_last_tasks_of_a_gang_exiting_at_once_on_two_nodes_end_the_job(
    server: Server,
) -> None:
    """Each agent's sync settles the job from every task's state: under READ COMMITTED,
    two syncs that do not serialize on the job would each miss the other's exit."""
    nodes = [FakeHardwareAgent(server, "node-a"), FakeHardwareAgent(server, "node-b")]
    client = server.client()
    for _ in range(8):
        job = client.submit({"nodes": 2, "resources": {"gpus": 8}, "command": "x"})
        wait_for(lambda j=job.id: client.get(j).state == "running", 10, "the gang placed")
        for node in nodes:
            assert len(node.sync()["tasks"]) == 1
        ranks = {t.node: t.rank for t in client.get(job.id).tasks}
        for node in nodes:
            node.sync([report(job.id, ranks[node.name], "running", pid=7, started_at=1.0)])
        barrier = threading.Barrier(2)
        exits = [
            (barrier, n, report(job.id, ranks[n.name], "exited", exit_code=0, ended_at=2.0))
            for n in nodes
        ]
        threads = [threading.Thread(target=sync_together, args=args) for args in exits]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert client.get(job.id).state == "succeeded"


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_value_the_database_refuses_is_a_422_not_a_500(server: Server) -> None:
    """PostgreSQL refuses NUL characters in text (SQLite stores them): the schemas refuse
    them first, on both, naming the field (the database's refusal is a 422 too)."""
    answer = server.http(server.admin_token).post(
        "/jobs", json={"name": "a\u0000b", "command": "true"}
    )
    assert answer.status_code == 422
    assert answer.json()["message"].startswith("name: must not contain a NUL character")
