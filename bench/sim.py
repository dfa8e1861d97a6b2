"""Simulator speed: synthetic workloads of growing size on a 1,000-GPU cluster.

125 nodes x 8 GPUs; Poisson arrivals at ~90% offered load; 1/2/4/8-GPU jobs and some
2-4 node gangs; log-normal durations (median ~20 min). Prints wall time per run and
simulated jobs per second. The scheduler runs the default configuration unless a
scheduler.yaml (``--config``) or policy flags say otherwise (the flags win).

    python bench/sim.py                 # 10k, 30k, 100k jobs
    python bench/sim.py --jobs 10000    # one size
    python bench/sim.py --jobs 10000 --backfill --preemption --order fair-share
    python bench/sim.py --config scheduler.yaml
    python bench/sim.py --jobs 20000 --backfill --cprofile sim.prof   # hot spots
"""

from __future__ import annotations

import argparse
import cProfile
import random
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from corral.core.node import Device, Node
from corral.scheduling.config import SchedulerConfig
from corral.schemas.config import load_config
from corral.schemas.manifest import parse_manifest
from corral.sim.engine import simulate
from corral.sim.workload import SimJob, Workload

NODES, GPUS = 125, 8


def cluster() -> list[Node]:
    devices = tuple(Device(i, "H100", 80 * 10**9, i // 4) for i in range(GPUS))
    return [Node(f"n{i:03d}", devices, 96.0, 10**12) for i in range(NODES)]


def workload(count: int, seed: int) -> Workload:
    rng = random.Random(seed)
    shapes = [(1, 1, 0.4), (1, 2, 0.2), (1, 4, 0.15), (1, 8, 0.15), (2, 8, 0.07), (4, 8, 0.03)]
    mean_gpu_seconds = 0.0
    jobs, specs = [], {}
    for _nodes, gpus, share in shapes:
        mean_gpu_seconds += share * _nodes * gpus
    mean_duration = 1200 * 1.6  # log-normal(mu=ln 1200, sigma=1) has mean ~1.65 x median
    rate = 0.9 * NODES * GPUS / (mean_gpu_seconds * mean_duration)
    t = 0.0
    for i in range(count):
        t += rng.expovariate(rate)
        nodes, gpus, _ = rng.choices(shapes, weights=[s[2] for s in shapes])[0]
        key = (nodes, gpus)
        if key not in specs:
            specs[key] = parse_manifest(
                {"nodes": nodes, "resources": {"gpus": gpus}, "command": "sim"}
            ).to_spec()
        duration = max(10.0, rng.lognormvariate(7.09, 1.0))
        jobs.append(SimJob(f"j{i:06d}", specs[key], round(t, 3), round(duration, 3)))
    return Workload(tuple(jobs), source=f"synthetic {count} jobs")


def scheduler_config(args: argparse.Namespace) -> SchedulerConfig:
    """The configuration to run: ``--config`` (else the default), then the policy flags."""
    config = load_config(args.config.read_text(), str(args.config)) if args.config else None
    config = config or SchedulerConfig()
    flags = {
        name: value
        for name in ("backfill", "preemption", "order")
        if (value := getattr(args, name)) is not None
    }
    return replace(config, policy=replace(config.policy, **flags)) if flags else config


def describe(config: SchedulerConfig) -> str:
    policy = config.policy
    parts = [policy.order]
    parts += [name for name in ("backfill", "preemption") if getattr(policy, name)]
    return " + ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", type=Path, help="scheduler.yaml (default: the defaults)")
    parser.add_argument("--backfill", action=argparse.BooleanOptionalAction, help="policy.backfill")
    parser.add_argument(
        "--preemption", action=argparse.BooleanOptionalAction, help="policy.preemption"
    )
    parser.add_argument("--order", help="policy.order (the queue sort)")
    parser.add_argument("--cprofile", type=Path, help="write a cProfile of the runs here")
    args = parser.parse_args()
    config = scheduler_config(args)
    table = Table(title=f"corral sim speed ({NODES} nodes x {GPUS} GPUs, {describe(config)})")
    for col in ("jobs", "wall s", "jobs/s", "cycles", "max pending", "completed"):
        table.add_column(col, justify="right")
    profiler = cProfile.Profile() if args.cprofile else None
    for count in args.jobs:
        load = workload(count, args.seed)
        began = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        result = simulate(cluster(), load, config)
        if profiler is not None:
            profiler.disable()
        wall = time.perf_counter() - began
        done = sum(1 for j in result.jobs if j.state.value == "completed")
        table.add_row(
            f"{count:,}",
            f"{wall:.1f}",
            f"{count / wall:,.0f}",
            f"{len(result.samples):,}",
            f"{max(s.pending_jobs for s in result.samples):,}",
            f"{done:,}",
        )
        Console().print(f"{count:,} jobs: {wall:.1f} s")
    Console().print(table)
    if profiler is not None:
        profiler.dump_stats(args.cprofile)
        Console().print(f"profile written to {args.cprofile} (python -m pstats {args.cprofile})")


if __name__ == "__main__":
    main()
