"""Answers for users over a real server: estimated starts, and what would start a job sooner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from corral.client import Client
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent

HOUR = 3600.0


def register(server: Server, name: str, leaf: str, **labels: str) -> None:
    """A node of 8 H100s under ``zone/spine-1/leaf`` (no agent process: nothing runs)."""
    body = {
        "name": name,
        "agent_id": uuid.uuid4().hex,
        "address": "127.0.0.1",
        "devices": [{"index": i, "model": "H100", "memory": 80 * 10**9} for i in range(8)],
        "cpus": 64,
        "memory": 512 * 10**9,
        "network": ["zone", "spine-1", leaf],
        "labels": labels,
    }
    with server.http(server.join_token) as http:
        http.post("/agent/register", json=body).raise_for_status()


def corral(server: Server, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CORRAL_SERVER": server.url, "CORRAL_TOKEN": server.admin_token}
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def pending_with_reason(client: Client, job_id: int, words: str) -> bool:
    job = client.get(job_id)
    return job.state == "pending" and words in (job.reason or "")


def test_a_job_behind_a_running_job_with_an_estimate_gets_an_estimated_start(
    server: Server,
) -> None:
    FakeHardwareAgent(server, "node-a", gpus=8)
    client = server.client()
    first = client.submit({"command": "x", "resources": {"gpus": 8}, "runtime_estimate": "1h"})
    wait_for(lambda: client.get(first.id).state == "running", 10, "the first job to start")
    second = client.submit({"command": "x", "resources": {"gpus": 8}})
    wait_for(lambda: pending_with_reason(client, second.id, "waiting for resources"), 10, "a cycle")
    placed_at = next(e.at for e in client.get(first.id).events if e.to_state == "running")
    waiting = client.get(second.id)
    assert waiting.estimated_start == pytest.approx(placed_at + HOUR, abs=1.0)
    listing = corral(server, "jobs")
    row = next(line for line in listing.stdout.splitlines() if line.startswith(str(second.id)))
    assert "~in 59m" in row or "~in 1h00m" in row
    assert "START" in listing.stdout.splitlines()[0]
    shown = corral(server, "show", str(second.id))
    assert "Est. start" in shown.stdout and "if running jobs end as estimated" in shown.stdout
    # once it starts, the estimate is gone
    client.cancel(first.id)
    FakeHardwareAgent(server, "node-b", gpus=8)
    wait_for(lambda: client.get(second.id).state == "running", 10, "the second job to start")
    assert client.get(second.id).estimated_start is None


def test_show_says_a_gang_fits_now_with_its_topology_preferred(server: Server) -> None:
    # two leaves of two nodes; one node of each leaf busy: two free nodes, in no one leaf
    for name, leaf in (("a0", "leaf-a"), ("a1", "leaf-a"), ("b0", "leaf-b"), ("b1", "leaf-b")):
        register(server, name, leaf, **({"hold": "yes"} if name.endswith("1") else {}))
    client = server.client()
    for _ in range(2):
        holder = {"command": "x", "resources": {"gpus": 8}, "node_selector": {"hold": "yes"}}
        held = client.submit(holder)
        wait_for(lambda held=held: client.get(held.id).state == "running", 10, "a holder")
    gang = client.submit(
        {
            "command": "x",
            "nodes": 2,
            "resources": {"gpus": 8},
            "topology": {"level": "leaf", "mode": "required"},
        }
    )
    wait_for(lambda: pending_with_reason(client, gang.id, "leaf domain"), 10, "a cycle")
    expected = (
        "fits now with topology preferred instead of required "
        "(it would run within spine zone/spine-1)"
    )
    assert client.advice(gang.id) == [expected]
    shown = corral(server, "show", str(gang.id))
    assert shown.returncode == 0, shown.stderr
    assert "To start sooner" in shown.stdout
    assert "fits now with topology preferred instead of required" in shown.stdout
    as_json = json.loads(corral(server, "show", str(gang.id), "-o", "json").stdout)
    assert as_json["advice"] == [expected]
    assert "estimated_start" in as_json
    listing = json.loads(corral(server, "jobs", "-o", "json").stdout)
    assert all("estimated_start" in job for job in listing["jobs"])
    # advice is for pending jobs only; unknown jobs are not found
    assert client.advice(held.id) == []
    assert server.http(server.admin_token).get("/jobs/999/advice").status_code == 404


@pytest.mark.server_options(
    config="policy:\n  backfill: true\n  preemption: false\n  order: priority-fifo\n"
)
def test_show_names_the_reservation_that_holds_a_job_back(server: Server) -> None:
    FakeHardwareAgent(server, "node-a", gpus=8)
    client = server.client()
    first = client.submit({"command": "x", "resources": {"gpus": 4}, "runtime_estimate": "5m"})
    wait_for(lambda: client.get(first.id).state == "running", 10, "the first job to start")
    # a 2-minute job on every GPU gets the node when the first job ends; a 10-minute
    # 1-GPU job fits the 4 free GPUs but would still run then: it is held back
    gang = client.submit({"command": "x", "resources": {"gpus": 8}, "runtime_estimate": "2m"})
    wait_for(lambda: pending_with_reason(client, gang.id, "reserved for it"), 10, "a reservation")
    small = client.submit({"command": "x", "resources": {"gpus": 1}, "runtime_estimate": "10m"})
    held = f"reserved for job {gang.id}"
    wait_for(lambda: pending_with_reason(client, small.id, held), 10, "a cycle")
    hints = client.advice(small.id)
    assert hints[0].startswith(
        f"held back by job {gang.id}'s reservation of node-a (it starts in about 4m"
    ), hints
    assert "with its runtime estimate of 10m00s it would still run then" in hints[0]
    # after the first job's 5 minutes and the gang's 2
    assert "; expected to start in about 6m" in hints[0], hints
    assert hints[1].startswith("fits now with runtime_estimate: "), hints
    assert hints[1].endswith(f"(it would end before job {gang.id}'s reservation starts)")
    assert not any("fits now as asked" in hint for hint in hints)
    shown = corral(server, "show", str(small.id))
    assert shown.returncode == 0, shown.stderr
    assert f"held back by job {gang.id}'s reservation" in shown.stdout
    assert "fits now as asked" not in shown.stdout
