"""Cost of GPU telemetry in the control plane, against a real SQLite database.

Registers N nodes of 8 simulated GPUs with one running 8-GPU job each, then times, through
the services the API calls (no HTTP):

- an agent sync without telemetry and with 8 GPU readings (ingest: history ring, GPU time
  used, GPU-error check), median of every node's sync;
- one idle-GPU check over all running jobs (the control loop does one a second);
- one ``/metrics`` render, one node's telemetry query (an hour of history), and one
  ``usage`` report by job.

Times are CPU time of this process (``time.process_time``), steadier than wall time on a
shared machine; SQLite writes to a temporary directory.

    python bench/telemetry.py              # 32, 128 and 512 nodes
    python bench/telemetry.py --nodes 64
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from corral.schemas.agent import DeviceIn, GpuTelemetry, RegisterRequest, SyncRequest, TaskReport
from corral.schemas.manifest import parse_manifest
from corral.server.app import build_context
from corral.server.context import ServerSettings
from corral.server.services.idle import check_idle
from corral.server.services.jobs import JobService
from corral.server.services.nodes import NodeService
from corral.server.services.scheduler import run_cycle
from corral.server.services.usage import usage

HISTORY = 362  # samples per GPU: an hour at the default 10 s spacing


def _readings(util: float) -> list[GpuTelemetry]:
    return [
        GpuTelemetry(
            index=i,
            utilization=util,
            memory_used=40 * 10**9,
            memory_total=80 * 10**9,
            temperature=70.0,
            power=600.0,
        )
        for i in range(8)
    ]


def measure(nodes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        ctx = build_context(ServerSettings(db_url=f"sqlite:///{home / 'c.db'}", home=home))
        ctx.metrics.bind(ctx)  # as create_app does
        service = NodeService(ctx)
        devices = [DeviceIn(index=i, model="H100", memory=80 * 10**9) for i in range(8)]
        names = [f"n{i:05d}" for i in range(nodes)]
        for name in names:
            service.register(
                RegisterRequest(
                    name=name,
                    agent_id=name,
                    address="127.0.0.1",
                    devices=devices,
                    cpus=96,
                    memory=10**12,
                )
            )
        jobs = JobService(ctx)
        for _ in range(nodes):
            jobs.submit(
                parse_manifest({"command": "train", "resources": {"gpus": 8}}), "bench", admin=True
            )
        run_cycle(ctx)
        placed = {t.node: (j.id, t.rank) for j in jobs.list() for t in j.tasks}
        now = time.time()

        def sync(name: str, gpus: list[GpuTelemetry] | None) -> float:
            job_id, rank = placed[name]
            report = TaskReport(
                job_id=job_id, attempt=0, rank=rank, state="running", pid=1, started_at=now
            )
            started = time.process_time()
            service.sync(SyncRequest(node=name, agent_id=name, tasks=[report], gpus=gpus))
            return time.process_time() - started

        plain = statistics.median(sync(n, None) for n in names)
        with_telemetry = statistics.median(sync(n, _readings(85.0)) for n in names)
        # an hour of history on every GPU, as a long-running server holds
        for ring in ctx.telemetry._rings.values():
            last = ring[-1]
            for k in range(HISTORY - len(ring)):
                ring.appendleft((last[0] - 10.0 * (k + 1), *last[1:]))
        started = time.process_time()
        check_idle(ctx)
        idle_s = time.process_time() - started
        started = time.process_time()
        text = ctx.metrics.render()
        metrics_s = time.process_time() - started
        started = time.process_time()
        samples = ctx.telemetry.node_samples(names[0])
        node_query_s = time.process_time() - started
        started = time.process_time()
        usage(ctx, "job", None, None)
        usage_s = time.process_time() - started
    return {
        "sync_ms": plain * 1000,
        "sync_tel_ms": with_telemetry * 1000,
        "idle_ms": idle_s * 1000,
        "metrics_ms": metrics_s * 1000,
        "metrics_kb": len(text) / 1000,
        "node_query_ms": node_query_s * 1000,
        "node_samples": len(samples),
        "usage_ms": usage_s * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[32, 128, 512])
    args = parser.parse_args()
    table = Table(title="telemetry in the control plane: CPU ms (SQLite, services, no HTTP)")
    columns = (
        "nodes",
        "sync ms",
        "sync+8 GPUs ms",
        "idle check ms",
        "/metrics ms",
        "/metrics KB",
        "node 1h query ms",
        "usage by job ms",
    )
    for col in columns:
        table.add_column(col, justify="right")
    console = Console()
    for nodes in args.nodes:
        with console.status(f"{nodes} nodes..."):
            r = measure(nodes)
        table.add_row(
            str(nodes),
            f"{r['sync_ms']:.1f}",
            f"{r['sync_tel_ms']:.1f}",
            f"{r['idle_ms']:.0f}",
            f"{r['metrics_ms']:.0f}",
            f"{r['metrics_kb']:.0f}",
            f"{r['node_query_ms']:.1f} ({r['node_samples']:.0f})",
            f"{r['usage_ms']:.0f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
