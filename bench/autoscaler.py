"""Benchmark: one autoscaler pass, ``corral.scheduling.autoscaler.autoscale()``.

Synthetic clusters of P pools x N nodes each: pools cycle through four kinds (8x H100,
8x A100, 4x L4 and, one pool in ten, v5p TPU slices of 4 hosts), each with units ready
(N nodes' worth), a few in flight and a few draining, ``max`` twice its size and ``min`` a
tenth. Two loads:

* ``mixed``: of the ready units 60% run whole-node jobs, 20% small jobs (1-4 GPUs), 20%
  are idle (half of them for longer than ``scale_down_idle``: a burst of drains);
* ``steady``: ``mixed`` as a pass finds it in steady operation, every few seconds: the
  idle units idle for up to ``scale_down_idle`` and 5 s (those past it crossed it since
  the pass before);
* ``busy``: every ready unit runs a whole-node job, so the pending jobs are all demand.

The pending queue (``--pending``, 300 by default) mixes 1/2/4/8-GPU jobs, 2-4 node gangs
of 8 GPUs, A100-only jobs and v5p:2x2x4 slices. Each pass is timed with
``time.perf_counter`` after a ``gc.collect()``; the profile and the policies are built once,
outside the timing, as the control plane and the simulator do.

Passes are timed two ways: given the keeper's ``ScalingIndex`` (``AutoscaleInput.index``,
``scheduling/scaling_index.py``: built once, outside the timing, and kept between passes;
before each pass ``--churn`` allocations, 20 by default, are released and held again, as
jobs end and start, each change timed: ``update us``, the median; the first change after
a build also maps nodes to units, once), and without one (``no index ms``:
the pass sorts the input itself, as a caller that keeps no index pays on every pass).
``index ms`` is building the index from scratch once.

    python bench/autoscaler.py                    # full matrix (~2 min on 2 cores)
    python bench/autoscaler.py --quick            # 10 and 100 pools x 10 nodes
    python bench/autoscaler.py --pools 100 --nodes 1000   # 100 pools x 1,000 nodes each
    python bench/autoscaler.py --cprofile mixed:100:1000   # where the time goes (index kept)
    python bench/autoscaler.py --cprofile mixed:100:1000 --no-index
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import io
import os
import platform
import pstats
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rich.console import Console
from rich.table import Table

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.job import Job, JobSpec, JobState
from corral.core.node import Device, Node
from corral.core.pools import Pool, Unit, UnitPhase
from corral.core.resources import GpuKind, GpuRequest
from corral.core.tpu import parse_tpu
from corral.scheduling.autoscaler import autoscale
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.registry import build_profile
from corral.scheduling.scaling import AutoscaleInput, Delete, Drain, Provision, ScalePlan
from corral.scheduling.scaling_index import ScalingIndex
from corral.scheduling.scaling_registry import check_policies
from corral.schemas.cluster import PoolDecl

GB = 1000**3
NOW = 1_000_000.0
LOADS = ("mixed", "steady", "busy")
FULL_POOLS = (10, 100)
FULL_NODES = (10, 100, 1000)
QUICK = (("mixed", 10, 10), ("busy", 10, 10), ("mixed", 100, 10), ("busy", 100, 10))


# --- the cluster -------------------------------------------------------------------------


def gpu_template(model: str, gpus: int) -> Node:
    devices = tuple(Device(index=i, model=model, memory=80 * GB) for i in range(gpus))
    return Node("template", devices, cpus=96.0, memory=1000 * GB)


def make_pool(index: int, nodes: int) -> Pool:
    """Pool ``index`` of its kind, sized for ``nodes`` registered nodes."""
    name = f"pool{index:03d}"
    if index % 10 == 9:
        units = max(1, nodes // 4)
        decl = PoolDecl(
            name=name,
            tpu={"generation": "v5p", "shape": [2, 2, 4], "chips_per_host": [2, 2, 1]},
            max=2 * units,
            min=units // 10,
            cost_per_hour=4.2 + index / 100,
        )
        return decl.to_pool()
    model, gpus, cost = (("H100", 8, 98.3), ("A100", 8, 40.0), ("L4", 4, 8.0))[index % 3]
    return Pool(
        name,
        (gpu_template(model, gpus),),
        min=nodes // 10,
        max=2 * nodes,
        cost_per_hour=cost + index / 100,
    )


def _whole(job_id: int, nodes: Sequence[Node]) -> Allocation:
    tasks = tuple(
        TaskAllocation(r, n.name, r, 0, gpus=tuple(range(len(n.devices))))
        for r, n in enumerate(nodes)
    )
    return Allocation(job_id, 0, tasks)


def _small(job_id: int, node: Node, gpus: int) -> Allocation:
    return Allocation(job_id, 0, (TaskAllocation(0, node.name, 0, 0, gpus=tuple(range(gpus))),))


@dataclass
class Scenario:
    load: str
    pools: int
    nodes_per_pool: int
    inp: AutoscaleInput

    @property
    def nodes(self) -> int:
        return len(self.inp.nodes)


def build_scenario(load: str, pools: int, per_pool: int, pending: int, seed: int) -> Scenario:
    rng = random.Random(seed)
    all_pools = [make_pool(i, per_pool) for i in range(pools)]
    units: list[Unit] = []
    nodes: list[Node] = []
    allocations: list[Allocation] = []
    job_ids = iter(range(1_000_000, 10_000_000))
    for pool in all_pools:
        count = max(1, per_pool // pool.hosts_per_unit)
        for i in range(count):
            name = pool.unit_name(i)
            members = pool.unit_nodes(name)
            roll = rng.random()
            if roll < 0.05:
                requested = NOW - rng.uniform(0, pool.provisioning_time)
                units.append(
                    Unit(name, pool.name, UnitPhase.PROVISIONING, requested, requested, ())
                )
                continue
            phase = UnitPhase.DRAINING if roll < 0.10 else UnitPhase.READY
            names = tuple(n.name for n in members)
            nodes += members
            work = rng.random()
            idle_since = None
            if load == "busy" or work < 0.6 or phase is UnitPhase.DRAINING:
                allocations.append(_whole(next(job_ids), members))
            elif work < 0.8 and not pool.tpu:
                allocations.append(_small(next(job_ids), members[0], rng.choice((1, 2, 4))))
            else:
                idle_since = NOW - rng.uniform(0, 605 if load == "steady" else 1200)
            units.append(Unit(name, pool.name, phase, NOW - 7200, NOW - 7200, names, idle_since))
    inp = AutoscaleInput(
        pools=tuple(all_pools),
        units=tuple(units),
        nodes=tuple(nodes),
        allocations=tuple(allocations),
        pending=tuple(pending_jobs(pending, rng, tpu=pools >= 10)),
        now=NOW,
    )
    return Scenario(load, pools, per_pool, inp)


def pending_jobs(count: int, rng: random.Random, tpu: bool) -> list[Job]:
    jobs = []
    for job_id in range(1, count + 1):
        roll = rng.random()
        spec = JobSpec(command=("true",))
        if roll < 0.40:
            spec = replace(spec, gpus=GpuRequest(GpuKind.WHOLE, count=1))
        elif roll < 0.55:
            spec = replace(spec, gpus=GpuRequest(GpuKind.WHOLE, count=2))
        elif roll < 0.65:
            spec = replace(spec, gpus=GpuRequest(GpuKind.WHOLE, count=4))
        elif roll < 0.80:
            spec = replace(spec, gpus=GpuRequest(GpuKind.WHOLE, count=8))
        elif roll < 0.90:
            spec = replace(spec, gpus=GpuRequest(GpuKind.WHOLE, count=8), nodes=rng.randint(2, 4))
        elif roll < 0.95 or not tpu:
            spec = replace(spec, gpus=GpuRequest(GpuKind.WHOLE, count=8), gpu_model="A100")
        else:
            spec = replace(spec, tpu=parse_tpu("v5p:2x2x4"), nodes=4)
        jobs.append(Job(job_id, spec, JobState.PENDING, 0, True, NOW - 600 + job_id))
    return jobs


# --- timing --------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: Scenario
    times: list[float]  # passes given the kept index
    plain: list[float]  # passes without one
    build: float  # the index from scratch
    updates: list[float]  # each change to the kept index
    plan: ScalePlan


def time_passes(scenario: Scenario, config: SchedulerConfig, passes: int, churn: int) -> Result:
    profile = build_profile(config)
    policies = check_policies(config.autoscaling)
    inp = scenario.inp
    gc.collect()
    start = time.perf_counter()
    index = ScalingIndex.of(inp.pools, inp.units, inp.nodes, inp.allocations)
    build = time.perf_counter() - start
    kept = replace(inp, index=index)
    rng = random.Random(len(inp.nodes))
    times, plain, updates = [], [], []
    plan = ScalePlan()
    for _ in range(passes):
        for alloc in rng.sample(inp.allocations, min(churn, len(inp.allocations))):
            for change in (index.release, index.hold):  # a job ends, one starts
                start = time.perf_counter()
                change(alloc)
                updates.append(time.perf_counter() - start)
        gc.collect()
        start = time.perf_counter()
        plan = autoscale(kept, config, profile, policies=policies)
        times.append(time.perf_counter() - start)
    for _ in range(passes):
        gc.collect()
        start = time.perf_counter()
        autoscale(inp, config, profile, policies=policies)
        plain.append(time.perf_counter() - start)
    return Result(scenario, times, plain, build, updates, plan)


def render(results: Sequence[Result], console: Console) -> None:
    table = Table(title="autoscaler: one autoscale() pass", title_justify="left")
    for column in ("load", "pools", "nodes/pool", "nodes", "pending"):
        table.add_column(column, justify="left" if column == "load" else "right")
    for column in (
        "mean ms",
        "p50 ms",
        "max ms",
        "no index ms",
        "index ms",
        "update us",
        "units added",
        "drains",
        "waits",
        "passes",
    ):
        table.add_column(column, justify="right")
    for r in results:
        s, plan = r.scenario, r.plan
        added = sum(len(a.units) for a in plan.actions if isinstance(a, Provision))
        drains = sum(1 for a in plan.actions if isinstance(a, Drain | Delete))
        table.add_row(
            s.load,
            f"{s.pools:,}",
            f"{s.nodes_per_pool:,}",
            f"{s.nodes:,}",
            f"{len(s.inp.pending):,}",
            f"{statistics.mean(r.times) * 1e3:,.1f}",
            f"{statistics.median(r.times) * 1e3:,.1f}",
            f"{max(r.times) * 1e3:,.1f}",
            f"{statistics.mean(r.plain) * 1e3:,.1f}",
            f"{r.build * 1e3:,.1f}",
            f"{statistics.median(r.updates) * 1e6:,.0f}" if r.updates else "-",
            f"{added:,}",
            f"{drains:,}",
            f"{len(plan.waits):,}",
            str(len(r.times)),
        )
    console.print(table)


def machine() -> str:
    return (
        f"nproc={os.cpu_count()}, "
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    )


def run_cprofile(  # noqa: PLR0913
    spec: str, pending: int, seed: int, config: SchedulerConfig, indexed: bool, console: Console
) -> None:
    load, pools, per_pool = spec.split(":")
    scenario = build_scenario(load, int(pools), int(per_pool), pending, seed)
    profile, policies = build_profile(config), check_policies(config.autoscaling)
    inp = scenario.inp
    if indexed:  # the keeper's index, and a pass before (as between passes)
        inp = replace(inp, index=ScalingIndex.of(inp.pools, inp.units, inp.nodes, inp.allocations))
        autoscale(inp, config, profile, policies=policies)
    gc.collect()
    profiler = cProfile.Profile()
    profiler.runcall(autoscale, inp, config, profile, policies=policies)
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order).print_stats(22)
        console.print(out.getvalue(), markup=False, highlight=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small subset")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument("--passes", type=int, default=5, help="passes timed (default 5)")
    parser.add_argument("--pending", type=int, default=300, help="pending jobs (default 300)")
    parser.add_argument("--load", choices=LOADS, action="append", help="only these loads")
    parser.add_argument("--pools", type=int, action="append", help="only these pool counts")
    parser.add_argument("--nodes", type=int, action="append", help="only these nodes per pool")
    parser.add_argument(
        "--churn", type=int, default=20, help="allocations changed before each pass (default 20)"
    )
    parser.add_argument("--cprofile", metavar="LOAD:POOLS:NODES", help="profile one pass")
    parser.add_argument(
        "--no-index", action="store_true", help="--cprofile: a pass without the kept index"
    )
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 150)
    config = SchedulerConfig()
    if args.cprofile:
        run_cprofile(args.cprofile, args.pending, args.seed, config, not args.no_index, console)
        return 0
    matrix = (
        list(QUICK)
        if args.quick
        else [(load, p, n) for p in FULL_POOLS for n in FULL_NODES for load in LOADS]
    )
    matrix = [
        (load, p, n)
        for load, p, n in matrix
        if (not args.load or load in args.load)
        and (not args.pools or p in args.pools)
        and (not args.nodes or n in args.nodes)
    ]
    console.print(f"[dim]{machine()}; seed={args.seed}; {args.passes} passes each", highlight=False)
    results = []
    started = time.perf_counter()
    for load, pools, per_pool in matrix:
        scenario = build_scenario(load, pools, per_pool, args.pending, args.seed)
        result = time_passes(scenario, config, args.passes, args.churn)
        results.append(result)
        console.print(
            f"[dim]  {load:6} {pools:>4} pools x {per_pool:>5} nodes: "
            f"{statistics.mean(result.times) * 1e3:,.1f} ms "
            f"({statistics.mean(result.plain) * 1e3:,.1f} ms without the index)",
            highlight=False,
        )
    render(results, console)
    console.print(f"[dim]total {time.perf_counter() - started:,.0f} s", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
