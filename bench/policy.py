"""Benchmark: one full policy cycle -- quotas, fair share, backfill and preemption.

The cluster of ``bench/placement.py`` (N nodes x 8 GPUs, 8 nodes to a leaf switch) runs a
load placed by the scheduler itself: jobs of 50 queues (10 cohorts of 5; each queue a
nominal quota of its share of the GPUs, borrowing up to as much again) at random
priorities, started over the past hours with run-time estimates and checkpoints. Then
``--pending`` jobs (the same mix: 1-GPU, shares, 2/4/8-GPU, gangs of 2-16 nodes, some with
a leaf topology) wait, and one ``schedule()`` call runs with ``backfill`` and
``preemption`` on and the fair-share order over a usage ledger. The cycle builds its
snapshot from scratch, as the server does. Timed: best of ``--repeats``.

    python bench/policy.py                           # 1,000 nodes x 20,000 pending
    python bench/policy.py --nodes 250 1000 4000 --pending 5000 20000
"""

from __future__ import annotations

import argparse
import gc
import math
import platform
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from placement import make_nodes  # bench/placement.py: the same cluster
from rich.console import Console
from rich.table import Table

from corral.core.allocation import Allocation
from corral.core.job import Job, JobSpec, JobState, Topology, TopologyLevel, TopologyMode
from corral.core.resources import GpuKind, GpuRequest
from corral.scheduling.config import Policy, QueueConfig, SchedulerConfig
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.scheduling.fairshare import UsageLedger
from corral.scheduling.registry import build_profile

NOW = 1_000_000.0
QUEUES = 50
COHORT_SIZE = 5
PRIORITIES = (0, 100, 100, 100, 500, 1000)


def make_config(gpus: int) -> SchedulerConfig:
    share = gpus / QUEUES
    queues = tuple(
        QueueConfig(
            f"q{i:02d}",
            weight=1.0 + i % 3,
            quota=(("gpus", share),),
            cohort=f"c{i // COHORT_SIZE}",
            borrowing_limit=(("gpus", share),),
        )
        for i in range(QUEUES)
    )
    return SchedulerConfig(queues=queues, policy=Policy(backfill=True, preemption=True))


def _spec(rng: random.Random, queue: str) -> JobSpec:
    roll = rng.random()
    estimate = rng.choice((600.0, 1800.0, 3600.0, 4 * 3600.0))
    common = {"queue": queue, "runtime_estimate": estimate}
    if roll < 0.45:
        return JobSpec(("t",), gpus=GpuRequest(GpuKind.WHOLE, count=1), cpus=8, **common)
    if roll < 0.70:
        milli = rng.choice((250, 500))
        return JobSpec(("t",), gpus=GpuRequest(GpuKind.FRACTION, milli=milli), **common)
    if roll < 0.82:
        return JobSpec(("t",), gpus=GpuRequest(GpuKind.WHOLE, count=8), cpus=96, **common)
    if roll < 0.92:
        count = rng.choice((2, 4))
        return JobSpec(("t",), gpus=GpuRequest(GpuKind.WHOLE, count=count), **common)
    leaf = Topology(TopologyLevel.LEAF, TopologyMode.PREFERRED) if rng.random() < 0.5 else None
    return JobSpec(
        ("t",),
        nodes=rng.randint(2, 16),
        tasks_per_node=8,
        gpus=GpuRequest(GpuKind.WHOLE, count=8),
        topology=leaf,
        **common,
    )


def make_jobs(count: int, rng: random.Random, first_id: int, submitted: float) -> list[Job]:
    jobs = []
    for i in range(count):
        priority = rng.choice(PRIORITIES)
        jobs.append(
            Job(
                id=first_id + i,
                spec=_spec(rng, f"q{rng.randrange(QUEUES):02d}"),
                state=JobState.PENDING,
                priority=priority,
                preemptible=priority < 1000,
                submitted_at=submitted - rng.uniform(0, 3600.0),
            )
        )
    return jobs


def running_load(nodes, config: SchedulerConfig, rng: random.Random) -> tuple[Allocation, ...]:
    """What the scheduler itself placed from a backlog, started over the past 4 hours, each
    with a last checkpoint some time after its start."""
    backlog = make_jobs(len(nodes) * 4, rng, 1_000_000, NOW - 4 * 3600)
    quiet = replace(config, policy=Policy())  # fill the cluster without preempting
    placed = schedule(ClusterState(tuple(nodes)), backlog, quiet, NOW - 4 * 3600).placements
    running = []
    for alloc in placed:
        started = NOW - rng.uniform(60.0, 4 * 3600.0)
        saved = started + rng.uniform(0.0, NOW - started) if rng.random() < 0.7 else None
        running.append(
            replace(
                alloc,
                started_at=started,
                last_checkpoint=saved,
                expected_end=started + rng.choice((1800.0, 3600.0, 8 * 3600.0)),
            )
        )
    return tuple(running)


@dataclass(frozen=True)
class Result:
    nodes: int
    pending: int
    running: int
    seconds: float
    decisions: Decisions


def run(nodes: int, pending: int, seed: int, repeats: int) -> Result:
    rng = random.Random(seed)
    cluster = make_nodes(nodes)
    config = make_config(nodes * 8)
    profile = build_profile(config)
    running = running_load(cluster, config, rng)
    ledger = UsageLedger.start(NOW - 86400.0, config.policy.fair_share_half_life)
    ledger = ledger.advance(NOW, running)
    jobs = make_jobs(pending, rng, 1, NOW)
    state = ClusterState(tuple(cluster), running, usage=ledger)
    best, decisions = math.inf, Decisions()
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        decisions = schedule(state, jobs, config, NOW, profile)
        best = min(best, time.perf_counter() - start)
    return Result(nodes, pending, len(running), best, decisions)


def render(results: Sequence[Result], console: Console) -> None:
    table = Table(title="policy cycle: quotas + fair share + backfill + preemption")
    for column in ("nodes", "running", "pending", "cycle ms", "placed", "preemptions"):
        table.add_column(column, justify="right")
    table.add_column("us/pending job", justify="right")
    for r in results:
        table.add_row(
            f"{r.nodes:,}",
            f"{r.running:,}",
            f"{r.pending:,}",
            f"{r.seconds * 1000:,.0f}",
            f"{len(r.decisions.placements):,}",
            f"{len(r.decisions.preemptions):,}",
            f"{r.seconds / r.pending * 1e6:,.1f}",
        )
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000])
    parser.add_argument("--pending", type=int, nargs="+", default=[20000])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    console = Console()
    console.print(
        f"python {platform.python_version()}, {platform.machine()}, seed={args.seed}, "
        f"best of {args.repeats}, {QUEUES} queues"
    )
    results = []
    for nodes in args.nodes:
        for pending in args.pending:
            with console.status(f"{nodes:,} nodes x {pending:,} pending"):
                results.append(run(nodes, pending, args.seed, args.repeats))
    render(results, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
