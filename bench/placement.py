"""Benchmark: placement speed of the scheduling cycle as the cluster grows.

Clusters of N nodes x 8 GPUs (H100, two NVLink domains of 4), 8 nodes to a leaf switch
(1,000 nodes: 125 leaves), 16 leaves to a spine, start empty; 10,000 pending jobs are
scheduled in one ``schedule()`` call (the snapshot is built inside the timing, as the
server does each cycle). The job mix, by count as in production traces where most jobs
are small: 45% one GPU, 25% a share of a GPU (0.25 or 0.5), 10% 2 or 4 GPUs, 12% a whole
8-GPU node, 8% gangs of 2-16 nodes x 8 GPUs (half of them asking for one leaf switch,
preferred). Two orders:

* ``strict``: priority order; the first job that does not fit blocks the rest (measures
  placements until the cluster is full);
* ``backfill``: EASY backfill; every job is tried, so the cycle also pays for every job
  that cannot be placed (its reason) and for the reservation search.

The profile is the default (``policy.sharing: corral``) with the request mix learned from
the pending jobs, as the control plane learns it before the cycle (``scheduling/mix.py``).

``placements/s`` is jobs placed per second of cycle; ``us/node`` is the cycle time per
node and ``/ n log n`` the cycle time over n log2 n normalised to the smallest cluster:
a flat or falling column means the cycle grows no faster than n log n.

    python bench/placement.py                       # 100, 1,000 and 10,000 nodes
    python bench/placement.py --nodes 1000 --order strict --repeats 1
"""

from __future__ import annotations

import argparse
import gc
import math
import platform
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from corral.core.job import Job, JobSpec, JobState, Topology, TopologyLevel, TopologyMode
from corral.core.node import Device, Node
from corral.core.resources import GpuKind, GpuRequest
from corral.scheduling.config import Policy, SchedulerConfig
from corral.scheduling.cycle import ClusterState, schedule
from corral.scheduling.mix import MixLearner, gpu_supply
from corral.scheduling.registry import build_profile

GB = 1000**3
NOW = 1_000_000.0
NODES_PER_LEAF = 8
LEAVES_PER_SPINE = 16


def make_nodes(count: int) -> list[Node]:
    devices = tuple(
        Device(index=d, model="H100-SXM-80GB", memory=80 * GB, nvlink_domain=d // 4)
        for d in range(8)
    )
    return [
        Node(
            name=f"node-{i:05d}",
            devices=devices,
            cpus=192.0,
            memory=2000 * GB,
            network=(
                "zone-a",
                f"spine-{i // NODES_PER_LEAF // LEAVES_PER_SPINE}",
                f"leaf-{i // NODES_PER_LEAF}",
            ),
        )
        for i in range(count)
    ]


def _spec(rng: random.Random) -> JobSpec:
    roll = rng.random()
    leaf = Topology(TopologyLevel.LEAF, TopologyMode.PREFERRED)
    if roll < 0.45:
        return JobSpec(("train",), gpus=GpuRequest(GpuKind.WHOLE, count=1), cpus=8)
    if roll < 0.70:
        milli = rng.choice((250, 500))
        return JobSpec(("serve",), gpus=GpuRequest(GpuKind.FRACTION, milli=milli), cpus=2)
    if roll < 0.82:
        return JobSpec(("train",), gpus=GpuRequest(GpuKind.WHOLE, count=8), cpus=96)
    if roll < 0.92:
        count = rng.choice((2, 4))
        return JobSpec(("train",), gpus=GpuRequest(GpuKind.WHOLE, count=count), cpus=8 * count)
    nodes = rng.randint(2, 16)
    return JobSpec(
        ("train",),
        nodes=nodes,
        tasks_per_node=8,
        gpus=GpuRequest(GpuKind.WHOLE, count=8),
        cpus=96,
        topology=leaf if rng.random() < 0.5 else None,
        runtime_estimate=rng.choice((1800.0, 3600.0, 4 * 3600.0)),
    )


def make_jobs(count: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    return [
        Job(
            id=i,
            spec=_spec(rng),
            state=JobState.PENDING,
            priority=rng.choice((0, 100, 100, 1000)),
            preemptible=True,
            submitted_at=NOW - rng.uniform(0, 86400.0),
        )
        for i in range(1, count + 1)
    ]


@dataclass(frozen=True)
class Result:
    order: str
    nodes: int
    pending: int
    placed: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.placed / self.seconds if self.seconds else 0.0


def run(order: str, nodes: int, pending: int, seed: int, repeats: int) -> Result:
    config = SchedulerConfig(policy=Policy(backfill=order == "backfill"))
    cluster, jobs = make_nodes(nodes), make_jobs(pending, seed)
    mixes = MixLearner()  # what the control plane learns from the jobs it sees
    mixes.sync((job.id, job.spec) for job in jobs)
    profile = build_profile(config, learned=mixes.refresh(gpu_supply(cluster)))
    best, placed = math.inf, 0
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        decisions = schedule(ClusterState(tuple(cluster)), jobs, config, NOW, profile)
        best = min(best, time.perf_counter() - start)
        placed = len(decisions.placements)
        assert len(decisions.placements) + len(decisions.pending) == len(jobs)
    return Result(order, nodes, pending, placed, best)


def render(results: Sequence[Result], console: Console) -> None:
    table = Table(title="placement: one schedule() call on an empty cluster")
    for column in ("order", "nodes", "pending", "placed", "cycle ms", "placements/s"):
        table.add_column(column, justify="right" if column != "order" else "left")
    table.add_column("us/node", justify="right")
    table.add_column("/ n log n", justify="right")
    base: dict[str, float] = {}
    for r in results:
        nlogn = r.nodes * math.log2(r.nodes)
        ratio = r.seconds / nlogn
        base.setdefault(r.order, ratio)
        table.add_row(
            r.order,
            f"{r.nodes:,}",
            f"{r.pending:,}",
            f"{r.placed:,}",
            f"{r.seconds * 1000:,.1f}",
            f"{r.per_second:,.0f}",
            f"{r.seconds / r.nodes * 1e6:,.1f}",
            f"{ratio / base[r.order]:.2f}",
        )
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--pending", type=int, default=10000)
    parser.add_argument("--order", choices=("strict", "backfill", "both"), default="both")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    console = Console()
    console.print(
        f"python {platform.python_version()}, {platform.machine()}, seed={args.seed}, "
        f"best of {args.repeats}"
    )
    orders = ("strict", "backfill") if args.order == "both" else (args.order,)
    results = []
    for order in orders:
        for nodes in sorted(args.nodes):
            with console.status(f"{order}: {nodes:,} nodes x {args.pending:,} jobs"):
                results.append(run(order, nodes, args.pending, args.seed, args.repeats))
    render(results, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
