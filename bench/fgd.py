"""The FGD packing experiment (ATC'23) on the openb trace, with Corral's scheduler.

Pods arrive one at a time (sorted by name, shuffled per seed, inflated to 130% of the GPU
capacity) and never leave; each is placed by the production scheduler
(``corral.scheduling.cycle.schedule`` on a persistent snapshot, the profile built from
``policy.sharing: <policy>``) or dropped. Reports the allocated share of GPU capacity when
100% and 130% of it has arrived, per policy, mean over the seeds (see
``corral.sim.packing`` and ``traces/README.md``). ``fgd`` and ``corral`` are given the
mix of the un-inflated pod list (and ``corral`` the GPUs per model), as in the paper;
``learned`` is the default configuration (``corral``, nothing given), which learns the
mix from the pods as they arrive, as the control plane does.

    python bench/fgd.py --nodes openb_node_list_gpu_node.csv \\
        --pods openb_pod_list_gpushare40.csv --seeds 42-51 [--policy fgd,corral,learned]

Prints a table, then, last on stdout, one JSON line
``{"<policy>": {"alloc_100": 95.1, "alloc_130": 95.3}, ...}``. Progress goes to stderr.
Seeds and policies run in parallel worker processes (``--jobs``, default: all CPUs).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from corral.errors import ValidationError
from corral.sim import packing

POLICIES = ("binpack", "bestfit", "fgd", "corral", "learned")
SHARING = {
    "binpack": "packing",
    "bestfit": "bestfit",
    "fgd": "fgd",
    "corral": "corral",
    "learned": "corral",
}
GIVEN_MIX = ("fgd", "corral")  # given the pod list's mix; "learned" learns it

_counter: mp.Value | None = None  # pods done, shared with the workers (for the progress bar)


def parse_seeds(text: str) -> list[int]:
    """``42-51``, ``1,2,5`` or a mix of both."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            seeds += list(range(int(low), int(high) + 1)) if sep else [int(part)]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"seeds: expected 42-51 or 1,2,3, got {text!r}"
            ) from None
    if not seeds:
        raise argparse.ArgumentTypeError("seeds: none given")
    return seeds


def parse_policies(values: list[str] | None) -> list[str]:
    names: list[str] = []
    for value in values or [",".join(POLICIES)]:
        for name in value.split(","):
            name = name.strip()
            if name and name not in POLICIES:
                raise SystemExit(f"fgd.py: unknown policy {name!r} (known: {', '.join(POLICIES)})")
            if name and name not in names:
                names.append(name)
    return names


def _init(counter: mp.Value) -> None:
    global _counter
    _counter = counter


def _advance(count: int) -> None:
    if _counter is not None:
        with _counter.get_lock():
            _counter.value += count


def run_one(task: tuple[str, int, str, str]) -> tuple[str, int, float | None, float | None, float]:
    """One policy and seed: ``(policy, seed, alloc at 100%, at 130%, seconds)``."""
    policy, seed, nodes_path, pods_path = task
    began = time.perf_counter()
    nodes = packing.read_cluster(Path(nodes_path))
    pods = packing.read_pods(Path(pods_path))
    order = packing.arrival_order(pods, seed, packing.gpu_capacity(nodes))
    if policy in GIVEN_MIX:
        mix, supply = packing.expected_mix(pods), packing.gpu_supply(nodes)
        config = packing.policy_config(SHARING[policy], mix, supply)
    else:
        config = packing.policy_config(SHARING[policy])
    curve = packing.run(packing.ranked_nodes(nodes, seed), order, config, progress=_advance)
    return (
        policy,
        seed,
        packing.column(curve, 100),
        packing.column(curve, 130),
        time.perf_counter() - began,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=Path, required=True, help="openb node list (CSV)")
    parser.add_argument("--pods", type=Path, required=True, help="openb pod list (CSV)")
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("42-51"))
    parser.add_argument(
        "--policy",
        action="append",
        help=f"policy to run (repeatable or a comma list; default: {','.join(POLICIES)})",
    )
    parser.add_argument("--jobs", type=int, default=mp.cpu_count(), help="worker processes")
    args = parser.parse_args()
    policies = parse_policies(args.policy)
    err = Console(stderr=True)
    try:
        nodes = packing.read_cluster(args.nodes)
        pods = packing.read_pods(args.pods)
    except ValidationError as exc:
        raise SystemExit(f"fgd.py: {exc}") from None
    capacity = packing.gpu_capacity(nodes)
    lengths = {s: len(packing.arrival_order(pods, s, capacity)) for s in args.seeds}
    tasks = [(p, s, str(args.nodes), str(args.pods)) for s in args.seeds for p in policies]
    total = sum(lengths[s] for _, s, _, _ in tasks)
    err.print(
        f"{args.pods.name}: {len(pods):,} pods; {args.nodes.name}: {len(nodes):,} nodes, "
        f"{capacity // 1000:,} GPUs; {len(policies)} policies x {len(args.seeds)} seeds "
        f"on {args.jobs} processes"
    )

    began = time.perf_counter()
    results: list[tuple[str, int, float | None, float | None, float]] = []
    counter = mp.Value("q", 0)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with (
        mp.get_context("fork").Pool(args.jobs, initializer=_init, initargs=(counter,)) as pool,
        Progress(*columns, console=err, transient=False) as progress,
    ):
        bar = progress.add_task("pods placed", total=total)
        runs = progress.add_task("runs done", total=len(tasks))
        pending = pool.imap_unordered(run_one, tasks)
        remaining = len(tasks)
        while remaining:
            try:
                result = pending.next(timeout=0.5)
            except mp.TimeoutError:
                progress.update(bar, completed=counter.value)
                continue
            results.append(result)
            remaining -= 1
            progress.update(bar, completed=counter.value)
            progress.advance(runs)
    wall = time.perf_counter() - began

    summary: dict[str, dict[str, float]] = {}
    table = Table(title=f"FGD packing experiment: {args.pods.name}, seeds {_seed_text(args.seeds)}")
    for name in ("policy", "alloc @100%", "alloc @130%", "min..max @100%", "min..max @130%"):
        table.add_column(name, justify="right" if name != "policy" else "left")
    table.add_column("s/run", justify="right")
    for policy in policies:
        mine = [r for r in results if r[0] == policy]
        at100 = [r[2] for r in mine if r[2] is not None]
        at130 = [r[3] for r in mine if r[3] is not None]
        mean100 = round(statistics.fmean(at100), 2) if at100 else float("nan")
        mean130 = round(statistics.fmean(at130), 2) if at130 else float("nan")
        summary[policy] = {"alloc_100": mean100, "alloc_130": mean130}
        table.add_row(
            policy,
            f"{mean100:.2f}",
            f"{mean130:.2f}",
            _spread(at100),
            _spread(at130),
            f"{statistics.fmean(r[4] for r in mine):.1f}",
        )
    out = Console(file=sys.stdout, width=100)
    out.print(table)
    out.print(f"wall time {wall:.0f} s ({len(tasks)} runs on {args.jobs} processes)")
    print(json.dumps(summary), flush=True)


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f}..{max(values):.2f}" if values else "-"


def _seed_text(seeds: list[int]) -> str:
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


if __name__ == "__main__":
    main()
