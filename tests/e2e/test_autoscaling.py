"""Autoscaling end to end with the ``local`` provider through ``corral up --cluster``: a
2-node gang on an empty pool provisions two real agents, runs, and the pool returns to
zero; a spot notice on a running job's node preempts it within the deadline, requeues
it, and the node leaves."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.client import Client
from tests.e2e.cluster import free_port, pid_alive, run_corral, wait_for

CLUSTER = (
    "pools:\n"
    "  - name: burst\n"
    "    node: {gpus: {count: 2, model: H100}, cpus: 8, memory: 64GB}\n"
    "    max: 3\n"
    "    provisioning_time: 5s\n"
    "    cost_per_hour: 12.5\n"
)
CONFIG = "policy: {interval: 1s}\nautoscaling: {scale_down_idle: 2s}\n"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Client, dict[str, str], Path]]:
    home = tmp_path / "home"
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "scheduler.yaml").write_text(CONFIG)
    env = {**os.environ, "CORRAL_HOME": str(home), "COLUMNS": "200"}
    env.pop("CORRAL_SERVER", None)
    env.pop("CORRAL_TOKEN", None)
    up = run_corral(
        [
            "up",
            "--cluster",
            str(tmp_path / "cluster.yaml"),
            "--config",
            str(tmp_path / "scheduler.yaml"),
            "--detach",
            "--port",
            str(free_port()),
        ],
        env,
    )
    try:
        assert up.returncode == 0, up.stderr + up.stdout
        assert "0 node(s)" in up.stdout and "Pools" in up.stdout
        client = Client((home / "server").read_text().strip(), (home / "token").read_text().strip())
        yield client, env, home
    finally:
        down = run_corral(["down"], env)
        assert down.returncode == 0, down.stderr
        pids = json.loads((home / "pools" / "local-agents.json").read_text() or "{}")
        for entry in pids.values():
            for pid in entry["pids"].values():
                assert not pid_alive(pid), f"pool agent {pid} survived corral down"


def _pool(client: Client) -> object:
    (pool,) = client.pools()
    return pool


def test_a_gang_on_an_empty_pool_provisions_two_agents_runs_and_the_pool_returns_to_zero(
    cluster: tuple[Client, dict[str, str], Path],
) -> None:
    client, env, home = cluster
    assert client.nodes() == [] and _pool(client).desired == 0
    job = client.submit(
        {
            "command": ["python3", "-c", "import os; print('rank', os.environ['RANK'])"],
            "nodes": 2,
            "resources": {"gpus": 2},
        }
    )
    waiting = wait_for(
        lambda: (j := client.get(job.id)).reason and "pool burst" in j.reason and j,
        30,
        "the job to wait on the pool",
    )
    assert "provision 2 nodes" in waiting.reason, waiting.reason
    pools = json.loads(run_corral(["pools", "-o", "json"], env).stdout)["pools"]
    assert pools[0]["desired"] == 2 and pools[0]["max"] == 3
    done = client.wait([job.id], timeout=120)[0]
    assert done.state == "succeeded", done
    assert [client.logs(job.id, task=t).split()[:2] for t in range(2)] == [
        ["rank", "0"],
        ["rank", "1"],
    ]
    assert {t.node for t in done.tasks} == {"burst-0", "burst-1"}  # two nodes, all or nothing
    # idle for scale_down_idle (2s): drained, deleted, agents stopped; the pool is back at 0
    wait_for(lambda: _pool(client).desired == 0 and not _pool(client).units, 60, "scale-down")
    wait_for(lambda: client.nodes() == [], 30, "the pool's nodes to leave")
    table = run_corral(["pools"], env)
    assert table.returncode == 0 and "burst" in table.stdout, table.stderr
    events = run_corral(["events", "-o", "json"], env)
    kinds = [
        (e["entity"], e["to_state"])
        for e in json.loads(events.stdout)["events"]
        if e["entity"] == "pool"
    ]
    for what in ("provision", "ready", "draining", "deleting", "deleted"):
        assert ("pool", what) in kinds, kinds


def test_a_spot_notice_preempts_within_the_deadline_requeues_and_the_node_leaves(
    cluster: tuple[Client, dict[str, str], Path],
) -> None:
    client, env, _ = cluster
    program = (  # saves on SIGTERM, then lingers: only the shortened grace ends it
        "import os, signal, sys, time\n"
        "attempt = os.environ['CORRAL_ATTEMPT']\n"
        "def saved(*_):\n"
        "    print('checkpoint saved on SIGTERM, attempt', attempt, flush=True)\n"
        "signal.signal(signal.SIGTERM, saved)\n"
        "print('running attempt', attempt, 'on', os.environ['CORRAL_NODE'], flush=True)\n"
        "time.sleep(300 if attempt == '0' else 1)\n"
        "time.sleep(300 if attempt == '0' else 0)\n"
    )
    job = client.submit(
        {
            "command": ["python3", "-c", program],
            "resources": {"gpus": 1},
            "grace_period": "600s",
            "preemptible": True,
        }
    )
    wait_for(lambda: client.get(job.id).state == "running", 60, "the job to start on the pool")
    node = client.get(job.id).tasks[0].node
    assert node == "burst-0"
    began = time.monotonic()
    notice = run_corral(["node", "notice", node, "--deadline", "20s"], env)
    assert notice.returncode == 0 and "burst-0" in notice.stdout, notice.stderr
    shown = json.loads(run_corral(["nodes", "-o", "json"], env).stdout)["nodes"]
    assert [n["state"] for n in shown if n["name"] == node] == ["draining"]
    done = client.wait([job.id], timeout=120)[0]
    assert done.state == "succeeded" and done.attempt >= 1, done
    first = client.logs(job.id, task=0, attempt=0)
    assert "checkpoint saved on SIGTERM, attempt 0" in first
    # killed by the deadline (20s, less the agent's margin), not after the 600s grace
    assert time.monotonic() - began < 60
    second = client.logs(job.id, task=0)
    assert "running attempt 1 on burst-1" in second  # burst-0 was leaving: a new unit
    wait_for(lambda: node not in {n.name for n in client.nodes()}, 60, "the noticed node to leave")


@pytest.mark.parametrize(
    ("args", "files", "message"),
    [
        pytest.param(
            ["up", "--cluster", "{dir}/c.yaml", "--detach"],
            {"c.yaml": "pools: [{name: p, node: {cpus: 4}, max: 1, provider: gcp}]\n"},
            "c.yaml: pools.0.provider: unknown provider 'gcp' (known: local, sim",
            id="unknown-provider",
        ),
        pytest.param(
            ["server", "--pools", "{dir}/c.yaml"],
            {"c.yaml": "pools: [{name: p, node: {cpus: 4}, min: 2, max: 1}]\n"},
            "c.yaml: pools.0: min: 2 is above max: 1",
            id="min-above-max",
        ),
        pytest.param(
            ["server", "--pools", "{dir}/c.yaml", "--config", "{dir}/s.yaml", "--port", "1"],
            {
                "c.yaml": "pools: [{name: p, node: {cpus: 4}, max: 1}]\n",
                "s.yaml": "autoscaling: {policies: [queue-demand, warp]}\n",
            },
            "autoscaling.policies: unknown policy 'warp' (known: duty-cycle, queue-demand",
            id="unknown-policy",
        ),
    ],
)
def test_bad_pools_and_policies_stop_the_commands_with_the_field_named(
    tmp_path: Path, args: list[str], files: dict[str, str], message: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "CORRAL_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    done = run_corral([a.replace("{dir}", str(tmp_path)) for a in args], env, timeout=60)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
