"""Submit-to-running and cancel-to-exited latency on a real local cluster.

Starts a ``corral server`` and one ``corral agent`` (8 simulated GPUs) as processes, then
submits an 8-GPU job, waits until its task reports running, cancels it and waits until the
task has exited; repeated. Run for several agent sync intervals to show that work reaches
agents through the watch long-poll, not at their next sync.

    python bench/start_latency.py [--runs 20] [--intervals 0.5 2 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.cluster import LocalCluster, wait_for  # noqa: E402


def measure(interval: float, runs: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(
            Path(tmp), sync_interval=interval, node_timeout=max(30, 4 * interval)
        )
        cluster.start_server()
        cluster.start_agent("node-a")
        cluster.wait_nodes("node-a")
        client = cluster.client()
        starts, stops = [], []
        try:
            for _ in range(runs):
                began = time.perf_counter()
                job = client.submit({"command": ["sleep", "300"], "resources": {"gpus": 8}})

                def running(job_id: int = job.id) -> bool:
                    tasks = client.get(job_id).tasks
                    return bool(tasks) and tasks[0].state == "running"

                wait_for(running, 60, "the job to run")
                starts.append(time.perf_counter() - began)
                began = time.perf_counter()
                client.cancel(job.id)
                wait_for(lambda j=job.id: client.get(j).tasks[0].state == "exited", 60, "exit")
                stops.append(time.perf_counter() - began)
        finally:
            cluster.stop()
    return starts, stops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--intervals", type=float, nargs="+", default=[0.5, 2.0, 10.0])
    args = parser.parse_args()
    table = Table(title="latency on a local cluster (ms; includes the client's 100 ms polling)")
    for col in ("sync interval", "submit->running p50", "p95", "cancel->exited p50", "p95"):
        table.add_column(col, justify="right")
    for interval in args.intervals:
        starts, stops = measure(interval, args.runs)
        q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1] * 1000  # noqa: E731
        table.add_row(
            f"{interval:g} s",
            f"{statistics.median(starts) * 1000:.0f}",
            f"{q(starts, 95):.0f}",
            f"{statistics.median(stops) * 1000:.0f}",
            f"{q(stops, 95):.0f}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
