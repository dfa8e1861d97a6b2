"""Control-plane scheduling cycle against a real SQLite database.

Registers N simulated nodes, stores M pending jobs (a mix of single-node jobs and gangs;
or, "uniform", 1-GPU jobs only: the queue a burst of REST submissions builds),
then times ``run_cycle`` -- load nodes, held tasks and pending jobs; run the pure
scheduler; apply placements and pending reasons in one transaction -- for a first cycle
(which places work and writes every reason), a second one (nothing changes; it reads
right after the first's many writes) and a third (the steady state).

    python bench/control_plane.py            # full table
    python bench/control_plane.py --quick    # small sizes only
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from corral.schemas.agent import DeviceIn, RegisterRequest
from corral.schemas.manifest import parse_manifest
from corral.server.app import build_context
from corral.server.context import ServerSettings
from corral.server.services.jobs import JobService
from corral.server.services.nodes import NodeService
from corral.server.services.scheduler import run_cycle

# (nodes, pending jobs, mix): "mixed" as below; "uniform": 1-GPU jobs only, the queue
# bench/api.py builds (a burst of submissions behind a full node)
FULL = [
    (100, 1_000, "mixed"),
    (1_000, 1_000, "mixed"),
    (1_000, 10_000, "mixed"),
    (4_000, 20_000, "mixed"),
    (1, 2_000, "uniform"),
]
QUICK = [(100, 1_000, "mixed"), (1_000, 2_000, "mixed"), (1, 2_000, "uniform")]


def manifest(rng: random.Random, mix: str = "mixed") -> dict:
    if mix == "uniform":
        return {"resources": {"gpus": 1}, "command": "train"}
    if rng.random() < 0.15:
        return {
            "nodes": rng.choice([2, 4, 8]),
            "tasks_per_node": 8,
            "resources": {"gpus": 8},
            "command": "train",
        }
    return {
        "resources": {"gpus": rng.choice([1, 1, 2, 4, 8])},
        "command": "train",
        "priority": rng.choice(["low", "normal", "high"]),
    }


def measure(nodes: int, pending: int, seed: int, mix: str = "mixed") -> dict[str, float]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        ctx = build_context(ServerSettings(db_url=f"sqlite:///{home / 'c.db'}", home=home))
        node_service, job_service = NodeService(ctx), JobService(ctx)
        devices = [
            DeviceIn(index=i, model="H100", memory=80 * 10**9, nvlink_domain=i // 4)
            for i in range(8)
        ]
        for i in range(nodes):
            node_service.register(
                RegisterRequest(
                    name=f"n{i:05d}",
                    agent_id=f"a{i}",
                    address="127.0.0.1",
                    devices=devices,
                    cpus=96,
                    memory=10**12,
                )
            )
        started = time.perf_counter()
        for _ in range(pending):
            job_service.submit(parse_manifest(manifest(rng, mix)), "bench", admin=True)
        submit_s = time.perf_counter() - started
        first = run_cycle(ctx)
        second = run_cycle(ctx)
        third = run_cycle(ctx)
    return {
        "submit_per_s": pending / submit_s,
        "first_ms": first.duration * 1000,
        "placed": first.placed,
        "second_ms": second.duration * 1000,
        "third_ms": third.duration * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    table = Table(title="run_cycle on SQLite (load + schedule + apply, one transaction)")
    columns = ("nodes", "pending", "jobs", "submits/s (service)", "placed", "cycle 1 ms")
    for col in (*columns, "cycle 2 ms", "cycle 3 ms"):
        table.add_column(col, justify="right")
    console = Console()
    for nodes, pending, mix in QUICK if args.quick else FULL:
        with console.status(f"{nodes} nodes, {pending} pending ({mix})..."):
            r = measure(nodes, pending, args.seed, mix)
        table.add_row(
            str(nodes),
            str(pending),
            mix,
            f"{r['submit_per_s']:.0f}",
            str(r["placed"]),
            f"{r['first_ms']:.0f}",
            f"{r['second_ms']:.0f}",
            f"{r['third_ms']:.0f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
