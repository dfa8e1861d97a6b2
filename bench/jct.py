"""Benchmark: mean job completion time of each scheduling policy on the Philly-derived traces.

Replays each trace through the production scheduler (``corral.sim``) under several
configurations and prints mean JCT over the lower bound ``mean run time`` (no job ends
sooner than it runs; 1.00 is every job starting at once), per trace:

- ``FIFO``: strict priority then submission order, no backfill (the old default);
- ``EASY``: FIFO with EASY backfill on the run times it can know (learned predictions);
- ``SJF oracle``: shortest job first with the true run times, no preemption;
- ``SRTF oracle``: the ``jct`` order and its preemption with the true run times;
- ``default``: Corral's default configuration, no run times given (learned online).

A trace with several virtual clusters (queues; Helios logs) also gets a row per queue.

Every job saves its state when preempted and pays the Helios restore cost when it starts
again (``SimJob.saves_on_preemption``, as ``corral sim --trace`` does by default), as the
traces record no checkpoints and as the Helios simulator (SC'21) assumes. GPUs per node
come from the cluster (32 x 4 V100 by default, the Gavel setting).

    python bench/jct.py                                  # every trace in ../shared/traces
    python bench/jct.py --traces gavel:../shared/traces/philly-gavel/b436b2.trace -o json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.sim.engine import simulate
from corral.sim.result import JobRecord, Outcome, SimResult
from corral.sim.traces.common import cluster_gpus_per_node
from corral.sim.traces.registry import read_trace
from corral.sim.workload import Workload

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
C32 = "nodes: [{name: 'v100-{00..31}', gpus: {count: 4, model: V100}, cpus: 32, memory: 256GB}]"
TRACES = (
    ("6214e9", "gavel:{shared}/philly-gavel/6214e9.trace"),
    ("11cb48", "gavel:{shared}/philly-gavel/11cb48.trace"),
    ("b436b2", "gavel:{shared}/philly-gavel/b436b2.trace"),
    ("2869ce", "gavel:{shared}/philly-gavel/2869ce.trace"),
    ("tiresias-60", "philly:{shared}/tiresias/60_job.csv"),
)
CONFIGS = (  # (name, scheduler.yaml text, reveal true run times)
    ("FIFO", "policy: {order: priority-fifo, backfill: false, preemption: false}", False),
    ("EASY", "policy: {order: priority-fifo, backfill: true, preemption: false}", False),
    ("SJF oracle", "policy: {order: shortest-first, backfill: true, preemption: false}", True),
    ("SRTF oracle", "", True),
    ("default", "", False),
)


@dataclass(frozen=True)
class Row:
    trace: str
    config: str
    jobs: int
    ratio: float | None  # mean JCT / mean run time
    avg_jct_h: float | None
    preemptions: int
    wall_s: float


def run(trace: str, spec: str, cluster: str, chosen: set[str] | None) -> list[Row]:
    nodes = load_cluster(cluster).to_nodes()
    per_node = cluster_gpus_per_node(nodes)
    workload = read_trace(spec.format(shared=SHARED), gpus_per_node=per_node)
    workload = workload.saving_on_preemption()  # as `corral sim --trace` does by default
    rows = []
    for name, text, oracle in CONFIGS:
        if chosen and name not in chosen:
            continue
        load: Workload = workload.with_true_runtimes() if oracle else workload
        began = time.perf_counter()
        result = simulate(nodes, load, load_config(text), name)
        rows += _rows(trace, name, result, time.perf_counter() - began)
    return rows


def _rows(trace: str, name: str, result: SimResult, wall: float) -> list[Row]:
    """The whole trace's row, then one per virtual cluster (queue) when it has several."""
    queues = sorted({j.queue for j in result.jobs})
    rows = [_row(trace, name, result.jobs, wall)]
    if len(queues) > 1:
        rows += [
            _row(f"{trace} / {q}", name, [j for j in result.jobs if j.queue == q], 0.0)
            for q in queues
        ]
    return rows


def _row(trace: str, name: str, jobs: Sequence[JobRecord], wall: float) -> Row:
    done = [j for j in jobs if j.state is Outcome.COMPLETED and j.end_time is not None]
    preemptions = sum(j.preemptions for j in jobs)
    if not done:
        return Row(trace, name, 0, None, None, preemptions, wall)
    jct = statistics.fmean(j.end_time - j.submit_time for j in done)  # type: ignore[operator]
    bound = statistics.fmean(j.run_time for j in done)
    return Row(trace, name, len(done), jct / bound, jct / 3600, preemptions, wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", nargs="*", help="FORMAT:PATH specs (default: the shared ones)")
    parser.add_argument("--configs", nargs="*", help="only these configurations (names above)")
    parser.add_argument("--cluster", default=C32, help="cluster.yaml text (default: 32 x 4 V100)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args()
    traces = [(Path(t.split(":", 1)[1]).stem, t) for t in args.traces] if args.traces else TRACES
    chosen = set(args.configs) if args.configs else None
    rows = [row for name, spec in traces for row in run(name, spec, args.cluster, chosen)]
    if args.output == "json":
        print(json.dumps([r.__dict__ for r in rows], indent=2))
        return
    table = Table(title="mean JCT / mean run time (1.00 = no waiting)")
    for column in ("trace", "config", "jobs", "JCT ratio", "avg JCT h", "preemptions", "wall s"):
        table.add_column(column, justify="left" if column in ("trace", "config") else "right")
    for r in rows:
        table.add_row(
            r.trace,
            r.config,
            f"{r.jobs:,}",
            "-" if r.ratio is None else f"{r.ratio:.3f}",
            "-" if r.avg_jct_h is None else f"{r.avg_jct_h:,.1f}",
            f"{r.preemptions:,}",
            f"{r.wall_s:.1f}" if r.wall_s else "",
        )
    Console(width=120).print(table)
    print(f"{platform.python_implementation()} {platform.python_version()}, {platform.machine()}")


if __name__ == "__main__":
    main()
