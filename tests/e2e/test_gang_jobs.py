"""Real server + two real agents on loopback: gang jobs, their environment, ordering."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from corral.core.hostlist import expand
from tests.e2e.cluster import LocalCluster

RECORD = r"""
import json, os, sys, time
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "NNODES",
        "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "CORRAL_JOB_ID", "CORRAL_ATTEMPT",
        "CORRAL_NODE", "CORRAL_CHECKPOINT_DIR", "CORRAL_GRACE_PERIOD", "CUSTOM",
        "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
        "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_PROCID",
        "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GPUS_ON_NODE", "SLURM_SUBMIT_DIR",
        "SLURM_CPUS_PER_TASK")
rec = {k: os.environ.get(k) for k in keys}
rec["start"] = time.time()
rec["pid"] = os.getpid()
rec["cwd"] = os.getcwd()
time.sleep(float(os.environ.get("SLEEP", "0")))
rec["end"] = time.time()
name = f"{rec['CORRAL_JOB_ID']}-{rec['CORRAL_ATTEMPT']}-{rec['RANK']}.json"
with open(os.path.join(os.environ["OUT"], name), "w") as f:
    json.dump(rec, f)
print(f"rank {rec['RANK']} done")
print(f"rank {rec['RANK']} stderr line", file=sys.stderr)
"""


def gang(out: Path, sleep: float = 0.0, **extra: object) -> dict:
    return {
        "nodes": 2,
        "tasks_per_node": 8,
        "resources": {"gpus": 8},
        "command": [sys.executable, "-c", RECORD],
        "env": {"OUT": str(out), "SLEEP": str(sleep), "CUSTOM": "yes"},
        **extra,
    }


def records(out: Path, job_id: int, attempt: int = 0) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob(f"{job_id}-{attempt}-*.json"))]


def test_two_node_gang_sees_a_consistent_distributed_environment(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    job = client.submit(gang(out, workdir=str(tmp_path)))
    done = client.wait(job.id, timeout=60)[0]
    assert done.state == "succeeded", done.reason

    recs = records(out, job.id)
    assert sorted(int(r["RANK"]) for r in recs) == list(range(16))
    assert {r["WORLD_SIZE"] for r in recs} == {"16"}
    assert {r["NNODES"] for r in recs} == {"2"}
    assert {r["LOCAL_WORLD_SIZE"] for r in recs} == {"8"}
    assert {(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in recs} == {
        (recs[0]["MASTER_ADDR"], recs[0]["MASTER_PORT"])
    }
    assert int(recs[0]["MASTER_PORT"]) > 0
    assert {r["CUSTOM"] for r in recs} == {"yes"}
    assert {r["cwd"] for r in recs} == {str(tmp_path)}
    assert {r["CORRAL_ATTEMPT"] for r in recs} == {"0"}
    assert all(Path(r["CORRAL_CHECKPOINT_DIR"]).is_dir() for r in recs)
    by_node: dict[str, list[dict]] = defaultdict(list)
    for r in recs:
        by_node[r["CORRAL_NODE"]].append(r)
    assert set(by_node) == {"node-a", "node-b"}
    for node_recs in by_node.values():
        assert sorted(int(r["LOCAL_RANK"]) for r in node_recs) == list(range(8))
        assert len({r["NODE_RANK"] for r in node_recs}) == 1
        devices = [r["CUDA_VISIBLE_DEVICES"] for r in node_recs]
        assert len(set(devices)) == 8 and all(d.isdigit() for d in devices)
        # global rank = node_rank * 8 + local_rank
        for r in node_recs:
            assert int(r["RANK"]) == int(r["NODE_RANK"]) * 8 + int(r["LOCAL_RANK"])

    # SLURM_* (SPEC 9): Slurm's names for the same ranks; the nodes in node-rank order
    first = next(r["CORRAL_NODE"] for r in recs if r["RANK"] == "0")
    second = ({"node-a", "node-b"} - {first}).pop()
    for r in recs:
        assert (r["SLURM_PROCID"], r["SLURM_LOCALID"], r["SLURM_NODEID"]) == (
            r["RANK"],
            r["LOCAL_RANK"],
            r["NODE_RANK"],
        )
        assert (r["SLURM_JOB_ID"], r["SLURM_JOB_NAME"]) == (str(job.id), Path(sys.executable).name)
        assert r["SLURM_JOB_NODELIST"] == r["SLURM_NODELIST"] == f"{first},{second}"
        assert expand(r["SLURM_JOB_NODELIST"])[int(r["NODE_RANK"])] == r["CORRAL_NODE"]
        assert (r["SLURM_JOB_NUM_NODES"], r["SLURM_NTASKS"], r["SLURM_NTASKS_PER_NODE"]) == (
            "2",
            "16",
            "8",
        )
        assert (r["SLURM_GPUS_ON_NODE"], r["SLURM_SUBMIT_DIR"]) == ("8", str(tmp_path))
        assert r["SLURM_CPUS_PER_TASK"] is None  # the job asked for no CPUs

    shown = client.get(job.id)
    assert [t.rank for t in shown.tasks] == list(range(16))
    assert all(t.state == "exited" and t.exit_code == 0 for t in shown.tasks)
    assert shown.started_at is not None and shown.ended_at is not None
    assert [e.to_state for e in shown.events] == ["pending", "running", "succeeded"]
    log = client.logs(job.id, task=5)
    assert "rank 5 done" in log and "rank 5 stderr line" in log


def test_gang_ranks_really_meet_at_the_master_address(cluster: LocalCluster) -> None:
    client = cluster.client()
    job = client.submit(
        {
            "name": "allreduce",
            "nodes": 2,
            "tasks_per_node": 8,
            "resources": {"gpus": 8},
            "command": [sys.executable, "-m", "corral.examples.allreduce"],
        }
    )
    done = client.wait(job.id, timeout=60)[0]
    assert done.state == "succeeded", done.reason
    for rank in (0, 9, 15):
        assert "sum of ranks = 120 (ok)" in client.logs(job.id, task=rank)


def test_three_full_cluster_jobs_run_one_after_another(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    ids = [client.submit(gang(out, sleep=0.5)).id for _ in range(3)]
    queued = {j.id: j for j in client.list()}
    assert any(queued[i].state == "pending" for i in ids[1:])
    finished = client.wait(ids, timeout=120)
    assert [j.state for j in finished] == ["succeeded"] * 3
    spans = []
    for job_id in ids:
        recs = records(out, job_id)
        assert len(recs) == 16
        spans.append((min(r["start"] for r in recs), max(r["end"] for r in recs)))
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, f"jobs overlapped: {spans}"
    # Submission order is kept among equal priorities.
    starts = [client.get(i).started_at for i in ids]
    assert starts == sorted(starts)


def test_higher_priority_job_goes_first(cluster: LocalCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    client = cluster.client()
    blocker = client.submit(gang(out, sleep=1.5))
    low = client.submit(gang(out, priority="low"))
    high = client.submit(gang(out, priority="high"))
    pending = {j.id: j for j in client.list(state="pending")}
    assert pending[low.id].reason
    client.wait([blocker.id, low.id, high.id], timeout=120)
    assert client.get(high.id).started_at < client.get(low.id).started_at


def test_failing_task_fails_the_job_and_stops_its_peers(cluster: LocalCluster) -> None:
    client = cluster.client()
    script = "import os, sys, time\nif os.environ['RANK'] == '3': sys.exit(7)\ntime.sleep(60)"
    job = client.submit(
        {
            "nodes": 2,
            "tasks_per_node": 2,
            "resources": {"gpus": 2},
            "grace_period": "2s",
            "command": [sys.executable, "-c", script],
        }
    )
    done = client.wait(job.id, timeout=60)[0]
    assert done.state == "failed"
    assert done.exit_code == 7
    assert "task 3" in (done.reason or "") and "code 7" in (done.reason or "")

    def peers_stopped() -> bool:
        tasks = client.get(job.id).tasks
        return all(t.state == "exited" for t in tasks)

    from tests.e2e.cluster import wait_for

    wait_for(peers_stopped, 30, "the failed job's other tasks to be stopped")
    nodes = client.nodes()
    assert all(n.gpus_used == 0 for n in nodes)


@pytest.mark.cluster_options(sync_interval=30.0, node_timeout=120.0)
def test_work_reaches_agents_at_once_not_at_their_next_sync(cluster: LocalCluster) -> None:
    """Agents long-poll a per-node change version, so with a 30 s sync interval a job
    still starts, and a cancel still stops it, right away."""
    from tests.e2e.cluster import wait_for

    client = cluster.client()
    job = client.submit({"command": ["sleep", "300"], "resources": {"gpus": 8}})

    def running() -> bool:
        tasks = client.get(job.id).tasks
        return bool(tasks) and tasks[0].state == "running"

    wait_for(running, 10, "the job to start well before the next sync")
    client.cancel(job.id)
    wait_for(lambda: client.get(job.id).tasks[0].state == "exited", 10, "the cancel to land")
