"""Benchmark: an autoscaled node pool against a fixed-size cluster on the Philly-derived
traces, with a diurnal arrival pattern (issue 19).

For each Gavel/Philly trace (``{shared}/traces/philly-gavel/*.trace``) the same workload
runs in the simulator (``corral.sim.engine.simulate``, the default scheduler
configuration, every job saving its state when preempted as in ``bench/jct.py``) on:

- ``fixed``: a fixed cluster of ``--nodes`` nodes of ``--gpus-per-node`` V100 GPUs (32 x 4
  by default, the cluster of ``bench/jct.py``), no pools;
- ``idle 5m``, ``idle 30m`` (``--idle``): no fixed nodes, one pool of that same node type,
  ``min: 0``, ``max: --nodes``, ``provisioning_time: --provisioning-time`` (3m), priced
  ``--cost-per-gpu-hour`` (1) times the GPUs per node, autoscaled by the default
  ``queue-demand`` policy with ``autoscaling: {scale_down_idle: IDLE}``.

**The diurnal time warp.** The traces' arrivals have no day/night cycle, so they are
re-timed: the jobs and their order are kept and each arrival time ``t`` (measured from the
trace's first arrival) becomes the ``s`` that solves

    s + A*P/(2*pi) * (1 - cos(2*pi*s/P)) = t

with ``P`` = 24 h (``--period``) and ``A`` = 0.8 (``--amplitude``, 0 <= A < 1). This is the
inverse of the cumulative rate ``Lambda(s)``: where the trace had arrivals at a mean rate
``r``, the warped ones arrive at ``r * (1 + A*sin(2*pi*s/P))`` (1.8 r by day, 0.2 r by
night with A = 0.8), so the mean rate over whole days is kept, the warp is monotone (the
order is kept) and the span moves by at most ``A*P/pi`` (6.1 h). Day 0 starts at the first
arrival, taken as 08:00: arrivals peak at 14:00 and are fewest at 02:00. The run times are
not changed. Bursts of the trace (many jobs within minutes) stay bursts, moved in time, so
a trace's arrivals per hour of day (printed under its table) follow the cycle only roughly.

**What the table shows**, per trace and setup: mean wait (first start minus submission, s),
its difference from the fixed cluster's (``dwait``) and that over the provisioning time,
mean JCT and makespan (h), paid GPU-hours (fixed: its GPUs over the metrics' window, the
first submission to the last completion; pools: each unit's GPUs from its request to its
deletion, ``corral.sim.metrics.PoolTotals``), used GPU-hours (allocated GPU-time), the
overhead ``paid/used - 1``; ``packed``: the overhead had every moment's allocated GPUs sat
on the fewest whole nodes (the smallest node size offered; no provisioning, no idle
time), i.e. what only the node size costs and perfect consolidation would leave; pool
node-hours, cost, units provisioned, the simulation's wall time and the part of it spent
in the autoscaler (``PoolKeeper.autoscale``). Targets of issue 19, checked on each pool
row: paid GPU-hours within 15% of used GPU-hours, and a mean wait at most 1.5 x the
provisioning time above the fixed cluster's. ``-v`` splits each pool run's paid minus used
GPU-hours into provisioning, idle time before scale-down and the rest (free GPUs of nodes
that run something, idle gaps shorter than ``scale_down_idle``).

``--small-pool G`` adds a second pool of G-GPU nodes (up to the same GPUs, the same price
per GPU), the two capped together at the fixed cluster's price per hour
(``max_cost_per_hour``), so that they never pay for more GPUs at once than it has.

    python bench/autoscaling.py --shared ../shared          # four traces, ~2 min on 2 cores
    python bench/autoscaling.py --traces 2869ce --jobs 300 --idle 5m -v
    python bench/autoscaling.py --gpus-per-node 1 --nodes 128 -o json   # 1-GPU nodes
    python bench/autoscaling.py --small-pool 1 -o markdown  # 4-GPU and 1-GPU pools
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from corral.core.node import Node
from corral.core.pools import Pool
from corral.schemas.cluster import load_cluster
from corral.schemas.config import load_config
from corral.sim.engine import simulate
from corral.sim.metrics import compute_metrics
from corral.sim.pools import PoolKeeper
from corral.sim.result import SimResult
from corral.sim.traces.registry import read_trace
from corral.sim.workload import Workload

REPO = Path(__file__).resolve().parents[1]
TRACES = ("6214e9", "11cb48", "b436b2", "2869ce")
HOUR = 3600.0
DAY_START = 8.0  # the first arrival is taken as 08:00 (only the arrivals line uses it)
OVERHEAD_TARGET = 0.15  # paid GPU-hours at most 15% above used
WAIT_TARGET = 1.5  # mean wait at most 1.5 x provisioning_time above the fixed cluster's


# -- the workload ----------------------------------------------------------------------


def warp(t: float, amplitude: float, period: float) -> float:
    """The diurnal time of arrival ``t`` (seconds from the first arrival): the ``s`` with
    ``s + A*P/(2*pi)*(1 - cos(2*pi*s/P)) = t`` (module docstring), by bisection."""
    if amplitude == 0 or t <= 0:
        return max(0.0, t)
    c, w = amplitude * period / (2 * math.pi), 2 * math.pi / period
    low, high = max(0.0, t - 2 * c), t  # the cosine term lies in [0, 2c]
    for _ in range(100):
        mid = (low + high) / 2
        if mid + c * (1 - math.cos(w * mid)) < t:
            low = mid
        else:
            high = mid
        if high - low < 1e-3:
            break
    return (low + high) / 2


def diurnal(workload: Workload, amplitude: float, period: float) -> Workload:
    """``workload`` with its arrivals re-timed by :func:`warp` (jobs and order kept)."""
    if not workload.jobs:
        return workload
    first = workload.jobs[0].submit_time
    jobs = tuple(
        replace(j, submit_time=first + warp(j.submit_time - first, amplitude, period))
        for j in workload.jobs
    )
    source = f"{workload.source}; diurnal arrivals (A={amplitude:g}, period {period / HOUR:g} h)"
    return replace(workload, jobs=jobs, source=source)


def by_hour(workload: Workload, period: float, bins: int = 8) -> list[float]:
    """Share of the arrivals in each of ``bins`` slices of the day (from 00:00)."""
    first = workload.jobs[0].submit_time if workload.jobs else 0.0
    counts: Counter[int] = Counter()
    for job in workload.jobs:
        clock = (job.submit_time - first + DAY_START / 24 * period) % period
        counts[int(clock / period * bins) % bins] += 1
    total = max(1, len(workload.jobs))
    return [counts[b] / total for b in range(bins)]


# -- the clusters ----------------------------------------------------------------------


def node_yaml(gpus: int, model: str) -> dict[str, Any]:
    """The node type: GPUs, 8 CPUs and 64 GB per GPU (32 and 256GB for 4 GPUs)."""
    return {"gpus": {"count": gpus, "model": model}, "cpus": 8 * gpus, "memory": f"{64 * gpus}GB"}


def fixed_nodes(nodes: int, gpus: int, model: str) -> list[Node]:
    decl = {"name": f"{model.lower()}-{{0..{nodes - 1}}}", **node_yaml(gpus, model)}
    return load_cluster(yaml.safe_dump({"nodes": [decl]})).to_nodes()


def pool(
    name: str, nodes: int, gpus: int, model: str, provisioning: float, per_gpu_hour: float
) -> Pool:
    decl = {
        "name": name,
        "node": node_yaml(gpus, model),
        "min": 0,
        "max": nodes,
        "provider": "sim",
        "provisioning_time": provisioning,
        "cost_per_hour": per_gpu_hour * gpus,
    }
    return load_cluster(yaml.safe_dump({"pools": [decl]})).to_pools()[0]


def pools(args: argparse.Namespace) -> list[Pool]:
    """The pool of the fixed cluster's node type; with ``--small-pool G``, also a pool of
    G-GPU nodes (as many GPUs at most, the same price per GPU)."""
    model, price, wait = args.model, args.cost_per_gpu_hour, args.provisioning_time
    found = [pool(f"{model.lower()}-pool", args.nodes, args.gpus_per_node, model, wait, price)]
    if args.small_pool:
        most = args.nodes * args.gpus_per_node // args.small_pool
        found.append(pool(f"{model.lower()}-small", most, args.small_pool, model, wait, price))
    return found


def scheduler_config(base: str, idle: float | None, cap: float | None = None):  # noqa: ANN201
    """``base`` (scheduler.yaml text) with ``autoscaling.scale_down_idle`` set to ``idle``
    and ``max_cost_per_hour`` to ``cap`` (None: as ``base`` says)."""
    data = (yaml.safe_load(base) or {}) if base else {}
    if idle is not None:
        data.setdefault("autoscaling", {})["scale_down_idle"] = idle
    if cap is not None:
        data.setdefault("autoscaling", {})["max_cost_per_hour"] = cap
    return load_config(yaml.safe_dump(data) if data else "")


@contextmanager
def autoscaler_timer() -> Iterator[list[float]]:
    """Seconds spent in ``PoolKeeper.autoscale`` while the block runs (one-item list)."""
    spent = [0.0]
    original = PoolKeeper.autoscale

    def timed(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        began = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began

    PoolKeeper.autoscale = timed  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        PoolKeeper.autoscale = original  # type: ignore[method-assign]


# -- the runs --------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    trace: str
    setup: str
    jobs: int  # completed
    unfinished: int
    mean_wait_s: float | None
    dwait_s: float | None  # minus the fixed cluster's mean wait
    dwait_over_provisioning: float | None
    p95_wait_s: float | None
    mean_jct_h: float | None
    makespan_h: float | None
    paid_gpu_hours: float
    used_gpu_hours: float
    overhead: float | None  # paid / used - 1
    node_hours: float | None
    cost: float | None
    units: int | None
    provisioning_wait_jobs: int | None
    preemptions: int
    wall_s: float
    autoscaler_s: float | None
    overhead_ok: bool | None
    wait_ok: bool | None
    # where paid minus used GPU-hours went (pools): units being provisioned; units idle for
    # scale_down_idle before their deletion; the rest (free GPUs of busy nodes, idle gaps
    # shorter than scale_down_idle)
    provisioning_gpu_hours: float | None = None
    idle_tail_gpu_hours: float | None = None
    other_gpu_hours: float | None = None
    peak_units: int | None = None
    # paid GPU-hours had every moment's allocated GPUs been packed onto the fewest whole
    # nodes (no provisioning, no idle time): what perfect consolidation would pay
    packed_gpu_hours: float | None = None
    p50_wait_s: float | None = None


def fixed_row(trace: str, result: SimResult, per_node: int, wall: float) -> Row:
    """The fixed cluster: paid is its GPUs over the metrics' window (the first submission
    to the last completion), used the GPUs allocated in it."""
    m = compute_metrics(result)
    start, span = _window(result)[0], m.makespan or 0.0
    paid = result.capacity_gpus * span / HOUR
    used = (m.gpu_utilization or 0.0) * paid
    packed = packed_gpu_hours(result, per_node, start, start + span)
    return Row(
        trace, "fixed", m.completed, m.unfinished, m.avg_wait, 0.0, 0.0, m.p95_wait,
        _h(m.avg_jct), _h(m.makespan), paid, used, paid / used - 1 if used else None,
        None, None, None, None, m.preemptions, wall, None, None, None,
        packed_gpu_hours=packed, p50_wait_s=m.p50_wait,
    )  # fmt: skip


def pool_row(
    trace: str, setup: str, result: SimResult, fixed: Row, provisioning: float, idle: float,
    per_node: int, wall: float, auto: float,
) -> Row:  # fmt: skip
    m = compute_metrics(result)
    p = m.pools
    assert p is not None
    dwait = (
        None if m.avg_wait is None or fixed.mean_wait_s is None else m.avg_wait - fixed.mean_wait_s
    )
    ratio = None if dwait is None or not provisioning else dwait / provisioning
    overhead = p.paid_gpu_hours / p.used_gpu_hours - 1 if p.used_gpu_hours else None
    gpus = {r.name: r.gpu_hours_paid / r.node_hours if r.node_hours else 0.0 for r in p.by_pool}
    prov = sum(r.provisioning_hours * gpus[r.name] for r in p.by_pool)
    tail = sum(r.units_deleted * idle / HOUR * gpus[r.name] for r in p.by_pool)
    return Row(
        trace, setup, m.completed, m.unfinished, m.avg_wait, dwait, ratio, m.p95_wait,
        _h(m.avg_jct), _h(m.makespan), p.paid_gpu_hours, p.used_gpu_hours, overhead,
        p.pool_node_hours, p.pool_cost, p.pool_units_provisioned, p.provisioning_wait_jobs,
        m.preemptions, wall, auto,
        None if overhead is None else overhead <= OVERHEAD_TARGET,
        None if dwait is None else dwait <= WAIT_TARGET * provisioning,
        prov, tail, p.paid_gpu_hours - p.used_gpu_hours - prov - tail,
        max((r.peak_units for r in p.by_pool), default=0),
        packed_gpu_hours(result, per_node, *_window(result)), m.p50_wait,
    )  # fmt: skip


def packed_gpu_hours(result: SimResult, per_node: int, start: float, end: float) -> float:
    """GPU-hours of ``ceil(allocated / per_node)`` whole nodes over ``[start, end]`` (each
    sample holds until the next), from the run's samples."""
    samples = sorted(result.samples, key=lambda x: x.time)
    total = 0.0
    for i, sample in enumerate(samples):
        begin = max(sample.time, start)
        until = min(samples[i + 1].time, end) if i + 1 < len(samples) else end
        if until > begin:
            nodes = math.ceil(round(sample.allocated_gpus, 6) / per_node)
            total += nodes * per_node * (until - begin)
    return total / HOUR


def _window(result: SimResult) -> tuple[float, float]:
    """The metrics' window: the first submission to the run's end."""
    start = min((j.submit_time for j in result.jobs), default=0.0)
    ends = [j.end_time for j in result.jobs if j.end_time is not None]
    return start, max([*ends, result.end_time or 0.0], default=start)


def _h(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / HOUR


def run_trace(name: str, args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    path = Path(args.shared) / "traces" / "philly-gavel" / f"{name}.trace"
    workload = read_trace(f"gavel:{path}", gpus_per_node=args.gpus_per_node)
    if args.jobs:
        kept = f"{workload.source}; first {args.jobs} jobs kept"
        workload = replace(workload, jobs=workload.jobs[: args.jobs], source=kept)
    workload = diurnal(workload.saving_on_preemption(), args.amplitude, args.period)
    nodes = fixed_nodes(args.nodes, args.gpus_per_node, args.model)
    began = time.perf_counter()
    result = simulate(nodes, workload, scheduler_config(args.config, None), "fixed")
    wall = time.perf_counter() - began
    fixed = fixed_row(name, result, args.gpus_per_node, wall)
    rows = [fixed]
    the_pools = pools(args)
    # two pools: never pay for more GPUs at once than the fixed cluster has
    cap = args.nodes * args.gpus_per_node * args.cost_per_gpu_hour if args.small_pool else None
    smallest = min(args.gpus_per_node, args.small_pool or args.gpus_per_node)  # for "packed"
    for idle in args.idle:
        setup = f"{'pools' if args.small_pool else 'pool'} idle {_duration_text(idle)}"
        config = scheduler_config(args.config, idle, cap)
        with autoscaler_timer() as spent:
            began = time.perf_counter()
            result = simulate([], workload, config, setup, pools=the_pools)
            wall = time.perf_counter() - began
        row = pool_row(
            name,
            setup,
            result,
            fixed,
            args.provisioning_time,
            idle,
            smallest,
            wall,
            spent[0],
        )
        rows.append(row)
        if args.verbose:
            _explain(row, result)
    info = {
        "trace": name,
        "jobs": len(workload.jobs),
        "source": workload.source,
        "arrivals_by_3h_of_day": [round(x, 3) for x in by_hour(workload, args.period)],
        "gpu_sizes": dict(sorted(Counter(_gpus(j.spec) for j in workload.jobs).items())),
    }
    return rows, info


def _gpus(spec) -> int:  # noqa: ANN001
    return spec.nodes * spec.tasks_per_node * spec.gpus.count


def _explain(row: Row, result: SimResult) -> None:
    """Where the pool's paid GPU-hours went, and the waits (``--verbose``)."""
    waste = row.paid_gpu_hours - row.used_gpu_hours
    print(
        f"{row.trace} {row.setup}: paid - used = {waste:,.0f} GPU-h: provisioning "
        f"{row.provisioning_gpu_hours:,.0f}, idle before scale-down "
        f"{row.idle_tail_gpu_hours:,.0f}, free GPUs of busy nodes and short idle gaps "
        f"{row.other_gpu_hours:,.0f}; peak {row.peak_units} units"
    )
    for r in result.pools:
        print(
            f"  pool {r.name}: {r.units_provisioned} units, peak {r.peak_units}, paid "
            f"{r.gpu_hours_paid:,.0f} GPU-h, used {r.gpu_hours_used:,.0f}"
        )
    waits = sorted(j.wait for j in result.jobs if j.wait is not None)
    if waits:
        p90 = waits[int(0.9 * (len(waits) - 1))]
        print(
            f"  waits: median {statistics.median(waits):.0f} s, p90 {p90:,.0f} s, max "
            f"{waits[-1]:,.0f} s; jobs that waited on provisioning: {row.provisioning_wait_jobs}"
        )


# -- options and output ----------------------------------------------------------------


def _duration(text: str) -> float:
    """``300``, ``300s``, ``5m``, ``2h`` -> seconds."""
    units = {"s": 1.0, "m": 60.0, "h": HOUR, "d": 24 * HOUR}
    text = text.strip().lower()
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def _duration_text(seconds: float) -> str:
    if seconds % HOUR == 0 and seconds >= HOUR:
        return f"{seconds / HOUR:g}h"
    if seconds % 60 == 0 and seconds >= 60:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _pct(paid: float | None, used: float) -> str:
    return "-" if paid is None or not used else f"{100 * (paid / used - 1):+.1f}%"


def _ok(value: bool | None) -> str:
    return "" if value is None else ("yes" if value else "NO")


COLUMNS = (
    "setup", "jobs", "wait s", "dwait s", "dwait/prov", "JCT h", "makespan h", "paid GPU-h",
    "used GPU-h", "overhead", "packed", "node-h", "cost", "units", "wall s", "autoscaler s",
    f"overhead<={OVERHEAD_TARGET:.0%}", f"dwait<={WAIT_TARGET:g}x prov",
)  # fmt: skip


def cells(r: Row) -> list[str]:
    """A row's cells, in ``COLUMNS`` order."""
    pool = r.setup != "fixed"
    return [
        r.setup + (f" ({r.unfinished} unfinished)" if r.unfinished else ""),
        f"{r.jobs:,}",
        _f(r.mean_wait_s, ",.0f"),
        _f(r.dwait_s, "+,.0f") if pool else "",
        _f(r.dwait_over_provisioning, "+.2f") if pool else "",
        _f(r.mean_jct_h, ",.2f"),
        _f(r.makespan_h, ",.0f"),
        f"{r.paid_gpu_hours:,.0f}",
        f"{r.used_gpu_hours:,.0f}",
        _pct(r.paid_gpu_hours, r.used_gpu_hours),
        _pct(r.packed_gpu_hours, r.used_gpu_hours),
        _f(r.node_hours, ",.0f"),
        _f(r.cost, ",.0f"),
        _f(r.units, ","),
        f"{r.wall_s:.1f}",
        _f(r.autoscaler_s, ".1f"),
        _ok(r.overhead_ok),
        _ok(r.wait_ok),
    ]


def print_tables(rows: Sequence[Row], infos: Sequence[dict[str, Any]], args) -> None:  # noqa: ANN001
    markdown = args.output == "markdown"
    console = Console(width=240)
    for info in infos:
        trace = info["trace"]
        title = f"{trace}: {info['jobs']:,} jobs, diurnal arrivals"
        mine = [cells(r) for r in rows if r.trace == trace]
        if markdown:
            print(f"{title}\n\n| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}")
            for row in mine:
                print(f"| {' | '.join(row)} |")
            print()
        else:
            table = Table(title=title)
            for column in COLUMNS:
                table.add_column(column, justify="left" if column == "setup" else "right")
            for row in mine:
                table.add_row(*row)
            console.print(table)
        shares = " ".join(f"{100 * x:.0f}%" for x in info["arrivals_by_3h_of_day"])
        print(f"arrivals by 3 h of day from 00:00: {shares}")
        sizes = ", ".join(f"{g} GPU: {n}" for g, n in info["gpu_sizes"].items())
        print(f"jobs by GPUs: {sizes}\n")
    small = ""
    if args.small_pool:
        most = args.nodes * args.gpus_per_node // args.small_pool
        small = f" and {args.small_pool}-GPU nodes (max {most}; cost cap: the fixed cluster's)"
    print(
        f"fixed: {args.nodes} x {args.gpus_per_node} {args.model}; pool: same node, min 0, "
        f"max {args.nodes}{small}, provisioning {_duration_text(args.provisioning_time)}, "
        f"{args.cost_per_gpu_hour:g}/GPU-h; diurnal A={args.amplitude:g}, "
        f"period {_duration_text(args.period)}"
    )
    print(f"{platform.python_implementation()} {platform.python_version()}, {platform.machine()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_shared = Path("../shared") if Path("../shared").is_dir() else REPO.parent / "shared"
    parser.add_argument("--shared", default=str(default_shared), help="the shared folder")
    parser.add_argument("--traces", nargs="*", default=list(TRACES), help="philly-gavel names")
    parser.add_argument("--jobs", type=int, default=0, help="only the first N jobs (0: all)")
    parser.add_argument("--nodes", type=int, default=32, help="fixed nodes; the pool's max")
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--model", default="V100")
    parser.add_argument("--provisioning-time", type=_duration, default=180.0)
    parser.add_argument("--idle", type=_duration, nargs="+", default=[300.0, 1800.0])
    parser.add_argument("--cost-per-gpu-hour", type=float, default=1.0)
    parser.add_argument(
        "--small-pool",
        type=int,
        default=0,
        metavar="G",
        help="also a pool of G-GPU nodes (same GPUs at most, same price per GPU; the pools "
        "together capped at the fixed cluster's price per hour)",
    )
    parser.add_argument("--amplitude", type=float, default=0.8, help="A, 0 <= A < 1")
    parser.add_argument("--period", type=_duration, default=24 * HOUR)
    parser.add_argument("--config", default="", help="scheduler.yaml text for every run")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("-o", "--output", choices=("table", "json", "markdown"), default="table")
    args = parser.parse_args()
    if not 0 <= args.amplitude < 1:
        parser.error("--amplitude must be within [0, 1)")
    rows: list[Row] = []
    infos = []
    for name in args.traces:
        got, info = run_trace(name, args)
        rows += got
        infos.append(info)
    if args.output == "json":
        settings = {k: v for k, v in vars(args).items() if k not in ("output", "verbose")}
        print(
            json.dumps(
                {"settings": settings, "traces": infos, "rows": [asdict(r) for r in rows]}, indent=2
            )
        )
        return
    print_tables(rows, infos, args)


if __name__ == "__main__":
    main()
