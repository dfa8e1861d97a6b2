"""Benchmark: one full scheduling cycle, ``corral.scheduling.cycle.schedule()``.

Synthetic clusters of N nodes x 8 GPUs (H100, NVLink domains of 4, a leaf/spine network
path, some nodes labelled, 1% draining) carry a deterministic mix of running allocations;
a queue of pending jobs (single-node 1/2/4/8-GPU jobs and 2-16 node gangs of 8 GPUs, random
priorities and submission times) is then scheduled in one call. Three situations:

* ``fits``: an empty-ish cluster (about 5% of GPUs busy) and only single-node jobs, so the
  cycle places job after job until the cluster fills: measures the cost per placement.
* ``mixed``: a half-full cluster and the full job mix; the default policy places jobs in
  its order, and backfills behind the first one that does not fit.
* ``blocked``: the ``mixed`` cluster and queue, headed by a top-priority gang one node
  larger than the cluster's free nodes: the head fails and gets a reservation; the jobs
  behind it are placed only where they leave it room (backfill; with ``backfill: false``
  every other job gets its "waiting behind" reason).

Each cycle is timed with ``time.perf_counter`` (best of ``--repeats``); the profile is built
once outside the timing. ``snapshot ms`` times ``Snapshot.build`` alone (it also runs
inside every cycle). A cycle that runs past ``--cap`` seconds is interrupted (SIGALRM) and
reported as capped, with the placements it had made by then.

    python bench/scheduler_cycle.py                 # full matrix (~6 min on 2 cores)
    python bench/scheduler_cycle.py --quick         # small subset, < 20 s
    python bench/scheduler_cycle.py --cprofile fits:1000:10000   # where the time goes
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
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rich.console import Console
from rich.table import Table

from corral.core.allocation import Allocation, TaskAllocation
from corral.core.job import Job, JobSpec, JobState
from corral.core.node import Device, Node, NodeState
from corral.core.resources import GpuKind, GpuRequest
from corral.scheduling.config import SchedulerConfig
from corral.scheduling.cycle import ClusterState, Decisions, schedule
from corral.scheduling.framework import Profile
from corral.scheduling.registry import build_profile
from corral.scheduling.snapshot import Snapshot

GB = 1000**3
GPUS_PER_NODE = 8
NVLINK_DOMAIN = 4
GPU_MODEL = "H100-SXM-80GB"
NODE_CPUS = 192.0
NODE_MEMORY = 2000 * GB
CPUS_PER_GPU = 16.0
MEMORY_PER_GPU = 200 * GB
NOW = 1_000_000.0

SCENARIOS = ("fits", "mixed", "blocked")
FULL_NODES = (100, 1000, 4000)
FULL_PENDING = (1000, 10000, 20000)
QUICK = (("fits", 100, 1000), ("mixed", 100, 1000), ("blocked", 100, 1000),
         ("fits", 1000, 500), ("mixed", 1000, 10000), ("blocked", 1000, 10000))  # fmt: skip


# --- the cluster -------------------------------------------------------------------------


def make_nodes(count: int, rng: random.Random) -> list[Node]:
    """``count`` nodes of 8 GPUs: 32 to a leaf switch, half labelled ``fabric=ndr``."""
    nodes = []
    for i in range(count):
        leaf = i // 32
        labels = [("rack", f"r{leaf:03d}")]
        if rng.random() < 0.5:
            labels.append(("fabric", "ndr"))
        if i % 10 == 0:
            labels.append(("pool", "research"))
        devices = tuple(
            Device(index=d, model=GPU_MODEL, memory=80 * GB, nvlink_domain=d // NVLINK_DOMAIN)
            for d in range(GPUS_PER_NODE)
        )
        nodes.append(
            Node(
                name=f"node-{i:05d}",
                devices=devices,
                cpus=NODE_CPUS,
                memory=NODE_MEMORY,
                network=("zone-a", f"spine-{leaf // 8}", f"leaf-{leaf}"),
                labels=tuple(sorted(labels)),
                state=NodeState.DRAINING if rng.random() < 0.01 else NodeState.READY,
            )
        )
    return nodes


class _Filler:
    """Hands out aligned device blocks on nodes, for building running allocations."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.free = [[True] * GPUS_PER_NODE for _ in nodes]
        self.next_id = 1_000_000  # running jobs; pending jobs count from 1

    def used(self, node: int) -> int:
        return GPUS_PER_NODE - sum(self.free[node])

    def take(self, node: int, count: int) -> tuple[int, ...] | None:
        free = self.free[node]
        for start in range(0, GPUS_PER_NODE - count + 1, count):
            if all(free[start : start + count]):
                for i in range(start, start + count):
                    free[i] = False
                return tuple(range(start, start + count))
        return None

    def job_id(self) -> int:
        self.next_id += 1
        return self.next_id


def _task(rank: int, node: Node, node_rank: int, local: int, gpus: tuple[int, ...]):
    return TaskAllocation(
        rank=rank,
        node=node.name,
        node_rank=node_rank,
        local_rank=local,
        gpus=gpus,
        cpus=CPUS_PER_GPU * len(gpus),
        memory=MEMORY_PER_GPU * len(gpus),
    )


def _small_job(filler: _Filler, node: Node, index: int, count: int, rng: random.Random):
    gpus = filler.take(index, count)
    if gpus is None:
        return None
    priority = rng.choice((0, 100, 100, 1000))
    return Allocation(filler.job_id(), 0, (_task(0, node, 0, 0, gpus),), priority, priority < 1000)


def running_allocations(nodes: Sequence[Node], rng: random.Random, load: str) -> list[Allocation]:
    """``load="half"``: ~25% of nodes in running 8-GPU gangs, ~60% partly used by 1/2/4-GPU
    jobs, the rest idle (about half the GPUs busy). ``load="light"``: ~5% of GPUs busy."""
    filler = _Filler(nodes)
    allocs: list[Allocation] = []
    i = 0
    while i < len(nodes):
        roll = rng.random()
        if load == "half" and roll < 0.036:
            size = min(rng.randint(2, 16), len(nodes) - i)
            tasks = []
            for node_rank in range(size):
                gpus = filler.take(i + node_rank, GPUS_PER_NODE)
                assert gpus is not None
                for local, gpu in enumerate(gpus):
                    tasks.append(_task(len(tasks), nodes[i + node_rank], node_rank, local, (gpu,)))
            allocs.append(Allocation(filler.job_id(), 0, tuple(tasks), 100, True))
            i += size
            continue
        busy = rng.randint(1, 6) if load == "half" and roll < 0.82 else 0
        if load == "light" and roll < 0.15:
            busy = rng.randint(1, 4)
        while filler.used(i) < busy:
            count = rng.choice([c for c in (1, 2, 4) if c <= busy - filler.used(i)])
            alloc = _small_job(filler, nodes[i], i, count, rng)
            if alloc is None:
                break
            allocs.append(alloc)
        i += 1
    return allocs


# --- the queue ---------------------------------------------------------------------------


def _job(job_id: int, rng: random.Random, gpus: int, nodes: int, selector=()) -> Job:
    tasks = gpus if nodes > 1 else 1  # gangs run one task per GPU, torchrun style
    priority = rng.choice((0, 0, 0, 100, 100, 100, 100, 100, 100, 1000))
    spec = JobSpec(
        command=("python", "train.py"),
        nodes=nodes,
        tasks_per_node=tasks,
        gpus=GpuRequest(kind=GpuKind.WHOLE, count=gpus),
        cpus=CPUS_PER_GPU * gpus,
        memory=MEMORY_PER_GPU * gpus,
        node_selector=selector,
    )
    return Job(
        id=job_id,
        spec=spec,
        state=JobState.PENDING,
        priority=priority,
        preemptible=priority < 1000,
        submitted_at=NOW - rng.uniform(0, 86400.0),
    )


def pending_jobs(count: int, rng: random.Random, gangs: bool) -> list[Job]:
    """Single-node 1/2/4/8-GPU jobs and (``gangs``) 15% gangs of 2-16 nodes x 8 GPUs;
    some ask for ``fabric=ndr`` nodes."""
    jobs = []
    for job_id in range(1, count + 1):
        roll = rng.random()
        if gangs and roll < 0.15:
            selector = (("fabric", "ndr"),) if rng.random() < 0.3 else ()
            jobs.append(_job(job_id, rng, GPUS_PER_NODE, rng.randint(2, 16), selector))
            continue
        gpus = rng.choices((1, 2, 4, 8), weights=(40, 25, 20, 15))[0]
        selector = (("fabric", "ndr"),) if rng.random() < 0.05 else ()
        jobs.append(_job(job_id, rng, gpus, 1, selector))
    return jobs


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int
    pending: int
    state: ClusterState
    jobs: list[Job]

    @property
    def gpu_use(self) -> float:
        busy = sum(len(t.gpus) for a in self.state.allocations for t in a.tasks)
        return busy / (len(self.state.nodes) * GPUS_PER_NODE)


def build_scenario(name: str, nodes: int, pending: int, seed: int) -> Scenario:
    # the cluster depends only on (seed, load, nodes) and the queue on (seed, mix, pending):
    # every pending size meets the same cluster, and "blocked" the cluster of "mixed"
    load = "light" if name == "fits" else "half"
    rng = random.Random(f"{seed}:{load}:{nodes}")
    node_list = make_nodes(nodes, rng)
    allocs = running_allocations(node_list, rng, load)
    rng = random.Random(f"{seed}:{load}:{pending}")
    jobs = pending_jobs(pending, rng, gangs=name != "fits")
    if name == "blocked":
        used = {t.node for a in allocs for t in a.tasks}
        idle = sum(1 for n in node_list if n.name not in used and n.state is NodeState.READY)
        head = _job(0, rng, GPUS_PER_NODE, idle + 1)
        jobs = [replace(head, priority=10_000, preemptible=False), *jobs[:-1]]
    return Scenario(name, nodes, pending, ClusterState(tuple(node_list), tuple(allocs)), jobs)


# --- timing ------------------------------------------------------------------------------


class _CycleCapped(Exception):
    pass


def _alarm(signum, frame):
    raise _CycleCapped


class _CountingNodeSet:
    """Wraps the profile's node-set plugin to count gangs it chose nodes for, so a capped
    cycle can still say how far it got (one extra call per job tried: negligible)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.chosen = 0

    def select(self, job, request, candidates):
        result = self.inner.select(job, request, candidates)
        self.chosen += isinstance(result, list)
        return result


@dataclass(frozen=True)
class Result:
    scenario: Scenario
    cycle_s: float  # best complete cycle; the cap when capped
    snapshot_s: float
    placed: int
    runs: int
    capped: bool


def time_cycle(
    scenario: Scenario, config: SchedulerConfig, profile: Profile, repeats: int, cap: float
) -> Result:
    state, jobs = scenario.state, scenario.jobs
    snapshot_s = _best(lambda: Snapshot.build(state.nodes, state.allocations), 3)
    best, placed, runs = float("inf"), 0, 0
    for run in range(repeats):
        counting = _CountingNodeSet(profile.node_set)
        gc.collect()
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, cap)
        start = time.perf_counter()
        try:
            decisions: Decisions = schedule(
                state, jobs, config, NOW, replace(profile, node_set=counting)
            )
            elapsed = time.perf_counter() - start
        except _CycleCapped:
            return Result(scenario, cap, snapshot_s, counting.chosen, run + 1, True)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        best, placed, runs = min(best, elapsed), len(decisions.placements), run + 1
        _check(decisions, scenario, config)
        if elapsed * (repeats - run - 1) > cap:  # further repeats would take too long
            break
    return Result(scenario, best, snapshot_s, placed, runs, False)


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _check(decisions: Decisions, scenario: Scenario, config: SchedulerConfig) -> None:
    """Every job is either placed or has a reason (the cycle's contract); behind a blocked
    head only backfill (the default) places jobs."""
    placed = {a.job_id for a in decisions.placements}
    missing = [j.id for j in scenario.jobs if j.id not in placed and j.id not in decisions.pending]
    if missing:
        raise AssertionError(f"{scenario.name}: {len(missing)} jobs neither placed nor pending")
    if scenario.name == "blocked" and decisions.placements and not config.policy.backfill:
        raise AssertionError("blocked: the head gang should have blocked every job")


# --- output ------------------------------------------------------------------------------


def render(results: Sequence[Result], console: Console) -> None:
    table = Table(title="scheduling cycle: one schedule() call", title_justify="left")
    for column in ("scenario", "nodes", "pending", "placed", "cycle ms", "per-placed-job ms"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for column in ("us per pending job", "snapshot ms", "GPUs busy", "runs"):
        table.add_column(column, justify="right")
    for r in results:
        s = r.scenario
        cycle = f"> {r.cycle_s * 1e3:,.0f} (capped)" if r.capped else f"{r.cycle_s * 1e3:,.1f}"
        placed = f">= {r.placed:,}" if r.capped else f"{r.placed:,}"
        per_job = f"{r.cycle_s * 1e3 / r.placed:,.2f}" if r.placed else "-"
        if r.capped and r.placed:
            per_job = f"~{per_job}"
        table.add_row(
            s.name,
            f"{s.nodes:,}",
            f"{s.pending:,}",
            placed,
            cycle,
            per_job,
            "-" if r.capped else f"{r.cycle_s * 1e6 / s.pending:,.1f}",
            f"{r.snapshot_s * 1e3:,.1f}",
            f"{s.gpu_use:.0%}",
            str(r.runs),
        )
    console.print(table)


def machine() -> str:
    return (
        f"nproc={os.cpu_count()}, "
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.system()} {platform.machine()}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    )


def run_cprofile(spec: str, seed: int, cap: float, config: SchedulerConfig, console) -> None:
    name, nodes, pending = spec.split(":")
    scenario = build_scenario(name, int(nodes), int(pending), seed)
    profile = build_profile(config)
    profiler = cProfile.Profile()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, cap)
    try:
        profiler.runcall(schedule, scenario.state, scenario.jobs, config, NOW, profile)
    except _CycleCapped:
        console.print(f"[yellow]cycle capped at {cap:g} s; profile covers that much[/]")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order).print_stats(22)
        console.print(out.getvalue(), markup=False, highlight=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small subset (< 20 s)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument("--repeats", type=int, default=3, help="best of k cycles (default 3)")
    parser.add_argument("--cap", type=float, default=60.0, help="seconds before a cycle is cut")
    parser.add_argument("--scenario", choices=SCENARIOS, action="append", help="only these")
    parser.add_argument("--nodes", type=int, action="append", help="only these node counts")
    parser.add_argument("--pending", type=int, action="append", help="only these queue sizes")
    parser.add_argument(
        "--cprofile", metavar="SCENARIO:NODES:PENDING", help="profile one cycle instead"
    )
    args = parser.parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 150)  # files: no wrapping
    config = SchedulerConfig()
    if args.cprofile:
        run_cprofile(args.cprofile, args.seed, args.cap, config, console)
        return 0
    if args.quick:
        matrix = list(QUICK)
    else:
        matrix = [
            (s, n, p)
            for n in args.nodes or FULL_NODES
            for p in args.pending or FULL_PENDING
            for s in args.scenario or SCENARIOS
        ]
    matrix = [
        (s, n, p)
        for s, n, p in matrix
        if (not args.scenario or s in args.scenario)
        and (not args.nodes or n in args.nodes)
        and (not args.pending or p in args.pending)
    ]
    profile = build_profile(config)  # once, outside the timing
    console.print(f"[dim]{machine()}; seed={args.seed}; best of {args.repeats}; cap {args.cap:g} s")
    results = []
    started = time.perf_counter()
    for name, nodes, pending in matrix:
        scenario = build_scenario(name, nodes, pending, args.seed)
        result = time_cycle(scenario, config, profile, args.repeats, args.cap)
        results.append(result)
        console.print(
            f"[dim]  {name:8} {nodes:>5} nodes {pending:>6} pending: "
            f"{result.cycle_s * 1e3:,.1f} ms{' (capped)' if result.capped else ''}",
            highlight=False,
        )
    render(results, console)
    console.print(f"[dim]total {time.perf_counter() - started:,.0f} s", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
