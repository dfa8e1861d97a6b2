"""Telemetry end to end: real agents on simulated GPUs, tasks that set their own load,
an idle job flagged and another preempted by their queues' policies, and an injected
GPU error that drains a node and moves its work."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from tests.e2e.cluster import LocalCluster, wait_for

CONFIG = """
queues:
  - name: default
    idle: {threshold: 5, after: 2s, action: preempt}
  - name: lab
    idle: {threshold: 5, after: 1s, action: flag}
"""

# a task that declares its GPU load through the simulated-load contract, then works
LOAD = """
import json, os, sys, time
path = os.environ["CORRAL_SIM_LOAD_FILE"]
with open(path + ".tmp", "w") as f:
    json.dump({"utilization": float(sys.argv[1]), "memory_used": "20GB"}, f)
os.replace(path + ".tmp", path)
time.sleep(600)
"""


def _job(name: str, util: int, gpus: int, queue: str = "default") -> dict:
    return {
        "name": name,
        "queue": queue,
        "command": [sys.executable, "-c", LOAD, str(util)],
        "resources": {"gpus": gpus},
        "grace_period": "2s",
    }


@pytest.mark.cluster_options(config=CONFIG)
def test_load_idle_policies_and_gpu_errors(cluster: LocalCluster) -> None:
    c = cluster.client()
    busy = c.submit(_job("busy", 73, 2))
    lab = c.submit(_job("lab", 1, 1, queue="lab"))

    def busy_readings() -> list:
        return [s for s in c.job_telemetry(busy.id) if s.utilization == 73.0]

    reading = wait_for(busy_readings, 30, "the task's own load in its job's telemetry")[-1]
    assert reading.memory_used == 20 * 10**9 and reading.memory_total == 80 * 10**9
    assert (reading.temperature, reading.power) == (68.5, 529.9)  # follow the utilization
    assert reading.job_id == busy.id
    placed = c.get(busy.id)
    node = placed.tasks[0].node
    held = placed.tasks[0].gpus
    assert {s.gpu for s in busy_readings()} == set(held)
    assert f'corral_gpu_utilization_percent{{gpu="{held[0]}",model="H100",node="{node}"}} 73.0' in (
        c.metrics()
    )

    wait_for(lambda: c.get(lab.id).idle, 30, "the lab job flagged idle")
    line = next(
        row
        for row in cluster.cli("jobs").stdout.splitlines()
        if row.split()[:2] == [str(lab.id), "lab"]
    )
    assert "running idle" in line
    assert c.get(lab.id).state == "running"  # the lab queue only flags
    assert c.get(lab.id).attempts[0].outcome is None  # a flag does not end the attempt
    assert not c.get(busy.id).idle

    idle = c.submit(_job("idle", 0, 1))
    wait_for(lambda: c.get(idle.id).attempt >= 1, 30, "the idle job preempted and requeued")
    reasons = [e.reason for e in c.get(idle.id).events]
    assert c.get(idle.id).attempts[0].outcome == (
        "preempting: idle: GPU utilization at or below 5% for 2s; "
        "preempted by the queue's idle policy"
    )
    assert (
        "idle: GPU utilization at or below 5% for 2s; preempted by the queue's idle policy"
        in reasons
    )
    c.cancel(idle.id)

    faults = cluster.home / "agents" / node / "sim-faults.json"
    faults.write_text(json.dumps({str(held[0]): {"xid_errors": 1, "xid": 79}}))

    def drained() -> bool:
        n = next(x for x in c.nodes() if x.name == node)
        return n.state == "draining" and "Xid 79" in (n.reason or "")

    wait_for(drained, 30, f"{node} drained for its GPU error")

    def moved() -> bool:
        job = c.get(busy.id)
        return job.state == "running" and job.attempt == 1 and job.tasks[0].node != node

    wait_for(moved, 60, "the busy job requeued onto another node")
    wait_for(busy_readings, 30, "the requeued job's load on its new node")

    cluster.cli("undrain", node)
    ready = wait_for(
        lambda: next(x for x in c.nodes() if x.name == node).state == "ready", 10, "undrained"
    )
    assert ready
    since = max(s.at for s in c.node_telemetry(node))
    wait_for(lambda: c.node_telemetry(node, since=since), 10, "a later sync of the node")
    assert next(x for x in c.nodes() if x.name == node).state == "ready"  # errors acted on

    events = json.loads(cluster.cli("events", "--node", node, "-o", "json").stdout)["events"]
    pairs = [(e["from_state"], e["to_state"]) for e in events]
    assert pairs[-2:] == [("ready", "draining"), ("draining", "ready")]
    assert _followed(cluster, node)[-2:] == pairs[-2:]
    assert any("GPU errors" in e["reason"] for e in events)
    rows = list(
        csv.DictReader(io.StringIO(cluster.cli("usage", "--by", "job", "-o", "csv").stdout))
    )
    by_job = {r["job"]: r for r in rows}
    assert float(by_job[str(busy.id)]["gpu_hours_allocated"]) > 0
    assert float(by_job[str(busy.id)]["gpu_hours_used"]) > 0
    assert int(by_job[str(idle.id)]["preemptions"]) >= 1
    for job in (busy, lab):
        c.cancel(job.id)


def _followed(cluster: LocalCluster, node: str) -> list[tuple[str, str]]:
    """``corral events -f -o json`` from the first event: the JSON lines the server
    streams, read until the node's undrain."""
    follow = subprocess.Popen(
        [sys.executable, "-m", "corral", "events", "-f", "--since-id", "0", "--node", node]
        + ["-o", "json"],
        env={**cluster.env, "CORRAL_SERVER": cluster.url},
        stdout=subprocess.PIPE,
        text=True,
    )
    pairs: list[tuple[str, str]] = []
    try:
        assert follow.stdout is not None
        for line in follow.stdout:
            event = json.loads(line)
            assert event["entity_id"] == node
            pairs.append((event["from_state"], event["to_state"]))
            if pairs[-1] == ("draining", "ready"):
                break
    finally:
        follow.terminate()
        follow.wait(timeout=10)
    return pairs
