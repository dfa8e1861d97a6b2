"""Job step latency on a real local cluster: from a task's call to its step's process.

Starts a ``corral server`` and two ``corral agent`` processes (8 simulated GPUs each),
runs a 2-node job that sleeps, and, with that job's own token (what ``CORRAL_JOB_TOKEN``
holds inside a task), starts a step running ``true`` on the second node; repeated. Two
numbers per run: call -> the step's process started (the agent's report of its start
time, same host clock) and call -> the step seen ended by a client polling every 50 ms.
Then ``corral step run --node node-b -- true`` as a task would run it, whole (its Python
start-up included). Run for several agent sync intervals: steps reach agents through the
watch long-poll, not at their next sync.

    python bench/step_latency.py [--runs 20] [--intervals 2 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.cluster import LocalCluster, wait_for  # noqa: E402

from corral.client import Client  # noqa: E402


def measure(interval: float, runs: int) -> tuple[list[float], list[float], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(
            Path(tmp), sync_interval=interval, node_timeout=max(30, 4 * interval)
        )
        cluster.start_server()
        for name in ("node-a", "node-b"):
            cluster.start_agent(name)
        cluster.wait_nodes("node-a", "node-b")
        client = cluster.client()
        started, ended, cli = [], [], []
        try:
            job = client.submit({"nodes": 2, "resources": {"gpus": 8}, "command": ["sleep", "600"]})
            wait_for(
                lambda: [t.state for t in client.get(job.id).tasks] == ["running"] * 2,
                60,
                "the job to run",
            )
            inside = Client(cluster.url, _job_token(cluster, job.id))
            for _ in range(runs):
                began = time.time()
                step = inside.start_step(job.id, ["true"], ["node-b"])
                while True:
                    seen = inside.step(job.id, step.step)
                    if seen.state == "ended":
                        break
                    time.sleep(0.05)
                ended.append(time.time() - began)
                started.append((seen.tasks[0].started_at or began) - began)
                env = {
                    **os.environ,
                    "CORRAL_SERVER": cluster.url,
                    "CORRAL_JOB_ID": str(job.id),
                    "CORRAL_JOB_TOKEN": _job_token(cluster, job.id),
                }
                began = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "corral", "step", "run", "--node", "node-b", "--quiet"]
                    + ["--", "true"],
                    env=env,
                    check=True,
                    timeout=60,
                )
                cli.append(time.perf_counter() - began)
        finally:
            cluster.stop()
    return started, ended, cli


def _job_token(cluster: LocalCluster, job_id: int) -> str:
    """The job's token, as its tasks see it (read from a task's environment)."""
    pids = [t.pid for t in cluster.client().get(job_id).tasks if t.pid]
    environ = Path(f"/proc/{pids[0]}/environ").read_bytes().split(b"\0")
    for entry in environ:
        if entry.startswith(b"CORRAL_JOB_TOKEN="):
            return entry.split(b"=", 1)[1].decode()
    raise RuntimeError("no CORRAL_JOB_TOKEN in the task's environment")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--intervals", type=float, nargs="+", default=[2.0, 10.0])
    args = parser.parse_args()
    table = Table(title="job step latency on a local cluster (ms)")
    columns = ("sync interval", "call->started p50", "p95", "call->ended p50", "p95")
    for col in (*columns, "`corral step run -- true` p50", "p95"):
        table.add_column(col, justify="right")
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1] * 1000  # noqa: E731
    for interval in args.intervals:
        started, ended, cli = measure(interval, args.runs)
        row = [f"{interval:g} s"]
        for xs in (started, ended, cli):
            row += [f"{statistics.median(xs) * 1000:.0f}", f"{q(xs, 95):.0f}"]
        table.add_row(*row)
    Console(width=130).print(table)


if __name__ == "__main__":
    main()
