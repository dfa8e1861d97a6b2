"""Job arrays: submitting a large array, and what arrays cost the scheduling cycle.

Submission: a real ``corral server`` process and one ``corral agent`` (8 simulated H100s)
on loopback, SQLite (and PostgreSQL with ``--backends``); one keep-alive client submits
an array of 1-GPU jobs (``POST /api/v1/jobs`` with ``array: 0-(N-1)``) and the time of
that one request is reported (best and median of ``--repeats``), with the server's CPU
time for it. Every element is a job row of its own with its submission event; the answer
lists every element's job id.

Cycle: the control plane's ``run_cycle`` on a real SQLite database (as
``bench/control_plane.py``), one node of 8 GPUs, and N pending 1-GPU jobs stored three
ways: N ordinary jobs, one N-element array, one N-element array with a throttle of 10
(``%10``). The first cycle places 8; reported are the first and the steady state (the
best of cycles 2-5: nothing can start, so every cycle reads the queue and runs the
scheduler over what it offers). A throttled array offers only the elements it may
start, so its cycle should not grow with N.

    python bench/arrays.py                        # 1,000 and 10,000, SQLite
    python bench/arrays.py --sizes 1000 10000 20000 --backends sqlite postgresql
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from corral.schemas.agent import DeviceIn, RegisterRequest
from corral.schemas.manifest import parse_manifest
from corral.server.app import build_context
from corral.server.context import ServerSettings
from corral.server.services.intake import Submission
from corral.server.services.nodes import NodeService
from corral.server.services.scheduler import run_cycle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.cluster import LocalCluster, free_port  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402

JOB = {"command": ["sleep", "600"], "resources": {"gpus": 1}}
BATCH = 1000  # ordinary jobs stored per transaction when the cycle bench fills its queue


# -- submission through the real server ------------------------------------------------


@contextmanager
def cluster(db: str | None) -> Iterator[LocalCluster]:
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalCluster(Path(tmp), node_timeout=600, sync_interval=2.0, db=db)
        try:
            local.start_server()
            local.start_agent("node-a")
            local.wait_nodes("node-a")
            yield local
        finally:
            local.stop()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def submit_times(db: str | None, size: int, repeats: int) -> dict[str, float]:
    """Seconds (wall and server CPU) of one request submitting a ``size``-element array,
    ``repeats`` times on one server (each array adds to the queue)."""
    walls, cpus = [], []
    with cluster(db) as local:
        token = (local.home / "token").read_text().strip()
        assert local.server is not None
        pid = local.server.pid
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=f"{local.url}/api/v1", headers=headers, timeout=300) as http:
            http.post("/jobs", json={**JOB, "array": "0-1"}).raise_for_status()  # warm
            for _ in range(repeats):
                cpu = cpu_seconds(pid)
                began = time.perf_counter()
                answer = http.post("/jobs", json={**JOB, "array": f"0-{size - 1}"})
                walls.append(time.perf_counter() - began)
                cpus.append(cpu_seconds(pid) - cpu)
                answer.raise_for_status()
                assert len(answer.json()["array"]["job_ids"]) == size
                time.sleep(1.0)  # the cycles the array woke run before the next one
    return {"best": min(walls), "median": statistics.median(walls), "cpu": min(cpus)}


# -- the scheduling cycle ----------------------------------------------------------------


def cycle_times(size: int, shape: str) -> dict[str, float]:
    """``run_cycle`` with ``size`` pending 1-GPU jobs stored as ``shape``: ``jobs``
    (ordinary), ``array`` or ``array%10``; ms of the first cycle and of the steady state."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        ctx = build_context(ServerSettings(db_url=f"sqlite:///{home / 'c.db'}", home=home))
        devices = [DeviceIn(index=i, model="H100", memory=80 * 10**9) for i in range(8)]
        NodeService(ctx).register(
            RegisterRequest(
                name="n0",
                agent_id="a0",
                address="127.0.0.1",
                devices=devices,
                cpus=96,
                memory=10**12,
            )
        )
        if shape == "jobs":
            manifest = parse_manifest(JOB)
            for start in range(0, size, BATCH):
                count = min(BATCH, size - start)
                ctx.intake.store([Submission(manifest, "bench", True, None) for _ in range(count)])
        else:
            throttle = "%10" if shape == "array%10" else ""
            manifest = parse_manifest({**JOB, "array": f"0-{size - 1}{throttle}"})
            ctx.intake.store([Submission(manifest, "bench", True, None)])
        first = run_cycle(ctx)
        steady = min(run_cycle(ctx).duration for _ in range(4))
        ctx.intake.close()
    return {"first": first.duration * 1000, "placed": first.placed, "steady": steady * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--backends", nargs="+", default=["sqlite"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-submit", action="store_true")
    args = parser.parse_args()
    console = Console()
    if not args.skip_submit:
        table = Table(title="Submitting one array through the REST API (one request)")
        for col in ("backend", "elements", "best ms", "median ms", "server CPU ms"):
            table.add_column(col, justify="right")
        for backend in args.backends:
            pg = PostgresServer(free_port()) if backend == "postgresql" else None
            try:
                if pg is not None:
                    pg.start()
                for size in args.sizes:
                    db = pg.new_database() if pg is not None else None
                    with console.status(f"{backend}: submitting {size} elements..."):
                        r = submit_times(db, size, args.repeats)
                    table.add_row(
                        backend,
                        f"{size:,}",
                        f"{r['best'] * 1000:.0f}",
                        f"{r['median'] * 1000:.0f}",
                        f"{r['cpu'] * 1000:.0f}",
                    )
            finally:
                if pg is not None:
                    pg.stop()
        console.print(table)
    table = Table(title="run_cycle on SQLite, 1 node x 8 GPUs, N pending 1-GPU jobs")
    for col in ("N", "stored as", "placed", "cycle 1 ms", "steady cycle ms"):
        table.add_column(col, justify="right")
    for size in args.sizes:
        for shape in ("jobs", "array", "array%10"):
            with console.status(f"cycle: {size} as {shape}..."):
                r = cycle_times(size, shape)
            label = {"jobs": "ordinary jobs", "array": "one array", "array%10": "one array %10"}
            table.add_row(
                f"{size:,}",
                label[shape],
                str(r["placed"]),
                f"{r['first']:.0f}",
                f"{r['steady']:.1f}",
            )
    console.print(table)


if __name__ == "__main__":
    main()
