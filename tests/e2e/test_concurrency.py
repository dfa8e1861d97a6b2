"""Many clients at once against a real ``corral server`` process, on SQLite and PostgreSQL.

Twenty clients submit 5,000 jobs in total at the same moment. Every submission must be
answered 201 with a fresh id, every job stored exactly once, and the scheduler must keep
up: the declared node (registered through the agent protocol; only its hardware is
played) has room for every job, so shortly after the last submission none is pending.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from tests.e2e.cluster import LocalCluster, wait_for
from tests.integration.conftest import BACKENDS, database_url

CLIENTS = 20
JOBS = 5000


def register_node(cluster: LocalCluster, name: str, cpus: float) -> None:
    """A node with ``cpus`` CPUs and no GPUs, registered as its agent would."""
    join = (cluster.home / "join-token").read_text().strip()
    answer = httpx.post(
        f"{cluster.url}/api/v1/agent/register",
        headers={"Authorization": f"Bearer {join}"},
        json={
            "name": name,
            "agent_id": f"{name}-agent",
            "address": "127.0.0.1",
            "devices": [],
            "cpus": cpus,
            "memory": 512 * 10**9,
        },
        timeout=30,
    )
    answer.raise_for_status()


@pytest.mark.parametrize("backend", BACKENDS)
def test_twenty_clients_submit_5000_jobs_at_once(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    home = tmp_path / "home"
    cluster = LocalCluster(home, node_timeout=600, db=database_url(backend, request, home))
    cluster.start_server()
    try:
        register_node(cluster, "big", cpus=JOBS * 0.01 + 1)
        token = (home / "token").read_text().strip()
        answers: list[list[tuple[int, int]]] = [[] for _ in range(CLIENTS)]
        start = threading.Barrier(CLIENTS)

        def client(index: int) -> None:
            with httpx.Client(
                base_url=f"{cluster.url}/api/v1",
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            ) as http:
                start.wait()
                for k in range(JOBS // CLIENTS):
                    job = {"name": f"c{index}-{k}", "command": "true", "resources": {"cpus": 0.01}}
                    answer = http.post("/jobs", json=job)
                    answers[index].append((answer.status_code, answer.json().get("id", -1)))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        flat = [a for per_client in answers for a in per_client]
        assert {status for status, _ in flat} == {201}
        ids = [job_id for _, job_id in flat]
        assert len(ids) == JOBS and len(set(ids)) == JOBS

        with httpx.Client(
            base_url=f"{cluster.url}/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        ) as http:

            def nothing_pending() -> bool:
                return not http.get("/jobs", params={"state": "pending"}).json()["jobs"]

            wait_for(nothing_pending, 60, "the scheduler to place every job")
            stored = http.get("/jobs", params={"all": True, "limit": 100_000}).json()["jobs"]
        assert sorted(j["id"] for j in stored) == sorted(ids)  # each exactly once, none lost
        names = sorted(j["name"] for j in stored)
        assert names == sorted(f"c{i}-{k}" for i in range(CLIENTS) for k in range(JOBS // CLIENTS))
        assert {j["state"] for j in stored} == {"running"}
        assert all(len(j["tasks"]) == 1 and j["tasks"][0]["node"] == "big" for j in stored)
    finally:
        cluster.stop()
