"""Cancel, server crash and agent loss, with real processes and real signals."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from corral.schemas.api import JobOut
from tests.e2e.cluster import LocalCluster, kill_groups, pid_alive, wait_for

# Each task starts two grandchildren (one ignores SIGTERM) and records every pid.
TREE = r"""
import os, signal, subprocess, sys, time
out = os.environ["OUT"]
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"
kids = [subprocess.Popen(["sleep", "1000"]), subprocess.Popen([sys.executable, "-c", stubborn])]
name = f"{os.environ['CORRAL_ATTEMPT']}-{os.environ['RANK']}"
with open(os.path.join(out, name + ".pids"), "w") as f:
    f.write(" ".join(str(p) for p in [os.getpid(), *(k.pid for k in kids)]))
time.sleep(1000)
"""


def tree_job(out: Path, **extra: object) -> dict:
    return {
        "nodes": 2,
        "tasks_per_node": 2,
        "resources": {"gpus": 4},
        "grace_period": "1s",
        "command": [sys.executable, "-c", TREE],
        "env": {"OUT": str(out)},
        **extra,
    }


def all_pids(out: Path, attempt: int = 0) -> list[int]:
    return [int(p) for f in out.glob(f"{attempt}-*.pids") for p in f.read_text().split()]


def pids_on(out: Path, job: JobOut, node: str) -> list[int]:
    """Every pid (tasks and their children) of attempt 0's tasks on ``node``."""
    return [
        int(p)
        for t in job.tasks
        if t.node == node
        for p in (out / f"0-{t.rank}.pids").read_text().split()
    ]


def test_cancel_kills_the_whole_process_tree(cluster: LocalCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job = client.submit(tree_job(out))
    wait_for(lambda: len(list(out.glob("0-*.pids"))) == 4, 30, "all tasks to start")
    pids = all_pids(out)
    assert len(pids) == 12 and all(pid_alive(p) for p in pids)

    cancelled = client.cancel(job.id)
    assert cancelled.state == "cancelled"
    wait_for(lambda: not any(pid_alive(p) for p in pids), 20, "every process of the job to die")
    # The devices are given back once the agents saw the tasks end.
    wait_for(lambda: all(n.gpus_used == 0 for n in client.nodes()), 20, "devices to be freed")
    tasks = client.get(job.id).tasks
    assert all(t.state == "exited" for t in tasks)
    # SIGTERM'd leaders die of the signal (143); nothing here exits 0.
    assert {t.exit_code for t in tasks} <= {143, 137}


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_server_sigkill_and_restart_loses_nothing(
    cluster: LocalCluster, tmp_path: Path, backend: str
) -> None:
    client = cluster.client()
    marker = tmp_path / "marks"
    marker.mkdir()
    script = (
        "import os, time\n"
        "name = os.environ['RANK'] + '-' + os.environ['CORRAL_ATTEMPT']\n"
        "p = os.path.join(os.environ['OUT'], name)\n"
        "open(p, 'a').write('start\\n')\n"
        "time.sleep(2)\n"
        "print('finished rank', os.environ['RANK'])\n"
    )
    job = client.submit(
        {
            "nodes": 2,
            "tasks_per_node": 8,
            "resources": {"gpus": 8},
            "command": [sys.executable, "-c", script],
            "env": {"OUT": str(marker)},
        }
    )
    queued = client.submit({"resources": {"gpus": 8}, "command": "echo after-restart"})
    wait_for(lambda: len(list(marker.iterdir())) == 16, 30, "all 16 tasks to start")
    cluster.kill_server()
    # The tasks finish while the server is down; their agents keep the outcome and logs.
    wait_for(lambda: all(p.read_text() == "start\n" for p in marker.iterdir()), 5, "marks")
    time.sleep(4.0)
    restarted_at = time.time()
    cluster.start_server()
    client = cluster.client()
    done = client.wait([job.id, queued.id], timeout=60)
    assert [j.state for j in done] == ["succeeded", "succeeded"]
    job_after = client.get(job.id)
    assert job_after.attempt == 0
    assert all(t.ended_at is not None and t.ended_at < restarted_at for t in job_after.tasks)
    # every task ran exactly once
    assert sorted(p.name for p in marker.iterdir()) == sorted(f"{r}-0" for r in range(16))
    assert all(p.read_text() == "start\n" for p in marker.iterdir())
    assert "finished rank 12" in client.logs(job.id, task=12)
    assert "after-restart" in client.logs(queued.id)


@pytest.mark.cluster_options(nodes=["node-a", "node-b", "node-c"], node_timeout=3.0)
def test_lost_agent_requeues_the_job_and_stops_its_peers(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job = client.submit(tree_job(out))
    try:
        wait_for(lambda: len(list(out.glob("0-*.pids"))) == 4, 30, "attempt 0 to start")
        first = client.get(job.id)
        victim = first.tasks[0].node
        peer = next(t.node for t in first.tasks if t.node != victim)
        peer_pids = pids_on(out, first, peer)
        cluster.kill_agent(victim)

        def requeued_and_running() -> bool:
            j = client.get(job.id)
            return j.attempt == 1 and j.state == "running"

        wait_for(requeued_and_running, 30, "the job to be requeued and placed again")
        nodes = {n.name: n.state for n in client.nodes()}
        assert nodes[victim] == "lost"
        # the peers of attempt 0 on the surviving node were stopped
        wait_for(lambda: not any(pid_alive(p) for p in peer_pids), 20, "attempt 0 peers to die")
        again = client.get(job.id)
        assert victim not in {t.node for t in again.tasks}
        reasons = [e.reason for e in again.events]
        assert any(f"node {victim} lost" in r for r in reasons)
        wait_for(lambda: len(list(out.glob("1-*.pids"))) == 4, 30, "attempt 1 to start")
        client.cancel(job.id)
    finally:
        kill_groups(list(out.glob("*.pids")))


@pytest.mark.cluster_options(nodes=["node-a", "node-b"], node_timeout=3.0)
def test_lost_agent_fails_a_job_that_does_not_requeue(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job = client.submit(tree_job(out, requeue=False))
    try:
        wait_for(lambda: len(list(out.glob("0-*.pids"))) == 4, 30, "the job to start")
        cluster.kill_agent("node-b")
        done = client.wait(job.id, timeout=30)[0]
        assert done.state == "failed"
        assert "node node-b lost" in (done.reason or "")
        assert "requeue is false" in (done.reason or "")
    finally:
        kill_groups(list(out.glob("*.pids")))


def test_time_limit_stops_the_job(cluster: LocalCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job = client.submit(tree_job(out, time_limit="2s"))
    try:
        done = client.wait(job.id, timeout=30)[0]
        assert done.state == "failed"
        assert done.reason == "time limit 2s exceeded"
        pids = all_pids(out)
        wait_for(lambda: not any(pid_alive(p) for p in pids), 20, "the job's processes to die")
    finally:
        kill_groups(list(out.glob("*.pids")))


@pytest.mark.cluster_options(nodes=["node-a", "node-b", "node-c"])
def test_stopping_an_agent_hands_its_work_back_at_once(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job = client.submit(tree_job(out))
    try:
        wait_for(lambda: len(list(out.glob("0-*.pids"))) == 4, 30, "attempt 0 to start")
        first = client.get(job.id)
        victim = first.tasks[0].node
        victim_pids = pids_on(out, first, victim)
        proc = cluster.agents[victim]
        proc.terminate()  # SIGTERM: a clean agent shutdown (node maintenance, corral down)
        proc.wait(timeout=30)
        wait_for(lambda: client.get(job.id).attempt == 1, 10, "the job to be requeued")
        assert not any(pid_alive(p) for p in victim_pids)  # the agent stopped its tasks
        node = next(n for n in client.nodes() if n.name == victim)
        assert node.state == "lost" and node.reason == f"agent on {victim} shut down"
        wait_for(lambda: len(list(out.glob("1-*.pids"))) == 4, 30, "attempt 1 to start")
        assert victim not in {t.node for t in client.get(job.id).tasks}
        client.cancel(job.id)
    finally:
        kill_groups(list(out.glob("*.pids")))
