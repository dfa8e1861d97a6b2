"""PostgreSQL restarted under load, with real agents running jobs.

The server process stays up throughout: while the database is down every API call is
answered 503 (never 500), agents keep their tasks and retry, and the control loop carries
on once the database is back. Afterwards every job that was acknowledged (201) exists and
succeeded, and no device ever ran two jobs' tasks at the same time.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.e2e.cluster import LocalCluster, free_port, wait_for
from tests.postgres import PostgresServer

JOB = {
    "command": [sys.executable, "-c", "import time; time.sleep(0.3)"],
    "resources": {"gpus": 2},
}


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own, since the test stops it; commits are
    synchronous, as in production, so that an immediate stop keeps what was acknowledged."""
    server = PostgresServer(free_port(), synchronous_commit=True)
    server.start()
    try:
        yield server
    finally:
        server.destroy()


class Submitter(threading.Thread):
    """Submits jobs until stopped; a 503 or a refused connection is retried later."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.http = httpx.Client(
            base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        self.acknowledged: list[int] = []
        self.statuses: dict[int, int] = defaultdict(int)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                answer = self.http.post("/jobs", json=JOB)
            except httpx.TransportError:
                self.statuses[0] += 1
            else:
                self.statuses[answer.status_code] += 1
                if answer.status_code == 201:
                    self.acknowledged.append(answer.json()["id"])
            self.stop.wait(0.05)


def device_intervals(url: str) -> dict[tuple[str, int], list[tuple[float, float, int]]]:
    """(start, end, job) of every task that ran, by (node, GPU index)."""
    by_device: dict[tuple[str, int], list[tuple[float, float, int]]] = defaultdict(list)
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "select job_id, node, gpus, started_at, ended_at from tasks"
            " where started_at is not null"
        ).fetchall()
    for job_id, node, gpus, started, ended in rows:
        for gpu in gpus:
            by_device[(node, gpu)].append((started, ended if ended is not None else 1e18, job_id))
    return by_device


def test_postgres_restart_under_load_loses_nothing_and_double_books_nothing(
    tmp_path: Path, own_postgres: PostgresServer
) -> None:
    db = own_postgres.new_database()
    cluster = LocalCluster(tmp_path / "home", db=db)
    cluster.start_server()
    submitter: Submitter | None = None
    try:
        for name in ("node-a", "node-b"):
            cluster.start_agent(name)
        cluster.wait_nodes("node-a", "node-b")
        token = (cluster.home / "token").read_text().strip()
        submitter = Submitter(cluster.url, token)
        submitter.start()
        wait_for(lambda: len(submitter.acknowledged) >= 20, 60, "a first batch of jobs")

        own_postgres.stop("immediate")
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
            down = [http.get(f"{cluster.url}/api/v1/jobs").status_code for _ in range(3)]
            assert set(down) == {503}
            body = http.get(f"{cluster.url}/api/v1/nodes").json()
            assert body["code"] == "unavailable" and "database" in body["message"]
        time.sleep(2.0)  # agents, the loop and the submitter all meet the outage
        own_postgres.start()

        acknowledged_at_restart = len(submitter.acknowledged)
        wait_for(
            lambda: len(submitter.acknowledged) >= acknowledged_at_restart + 20,
            60,
            "submissions to succeed again",
        )
        submitter.stop.set()
        submitter.join()
        assert submitter.statuses[500] == 0, dict(submitter.statuses)
        assert cluster.server is not None and cluster.server.poll() is None  # never restarted

        client = cluster.client()
        done = client.wait(submitter.acknowledged, timeout=120)
        assert [j.state for j in done] == ["succeeded"] * len(done), [
            (j.id, j.state, j.reason) for j in done if j.state != "succeeded"
        ]
        assert all(j.attempt == 0 for j in done)

        for device, runs in device_intervals(db).items():
            runs.sort()
            for (_, end, job), (start, _, other) in zip(runs, runs[1:], strict=False):
                assert start >= end, f"{device}: job {other} started before job {job} ended"
        assert "Traceback" not in (cluster.home / "logs" / "server.log").read_text()
    finally:
        if submitter is not None:
            submitter.stop.set()
        cluster.stop()
