"""Replay a workload CSV on a real Corral cluster and time the whole job lifecycle.

Starts its own cluster (``corral up --nodes N --gpus-per-node G --detach`` in a temporary
``CORRAL_HOME``: one server and N agent processes with simulated GPUs; ``corral down``
afterwards), or uses a running one (``--server URL``, with ``--token`` or the usual
lookup; the stamp directory must then be visible to its nodes: ``--stamps DIR``).

Each CSV row (``submit_offset_s,num_nodes,gpus_per_node,duration_s,priority``) becomes a
gang of ``num_nodes`` tasks with ``gpus_per_node`` GPUs each and that priority; each task
runs ``bash -c`` that writes ``start $EPOCHREALTIME`` to ``STAMPS/JOB.ATTEMPT.RANK``,
sleeps ``duration_s`` and appends ``end $EPOCHREALTIME`` (no fork for the stamps). The
duration comes in ``$REPLAY_SECONDS``: one command for every job, so the run times the
scheduler learns by command (docs/scheduling.md) are not each job's own. Jobs go through
the Python SDK (``corral.client.Client``) over one keep-alive connection.
When every offset is 0, they are all queued first, then let go at once: by default each
waits (``dependency: afterok:GATE``) on one held gate job (``true``, no GPUs), released by
one call; t0 is when the gate ended (its ``ended_at``): from then on every job may start,
and the next scheduling cycle sees them all. The API has no bulk release (an array's
release is one call, but an array has one shape); ``--release each`` submits every job
held and releases each by its own call, from 8 keep-alive connections
(``--release-threads``), t0 being the first release sent. With offsets, t0 is the start
and each job is submitted at ``t0 + offset``. The bench polls the job event log
(``GET /events?entity=job``, every 0.5 s) until every job has ended, then reads each job
(``GET /jobs?all=true``) and the stamps. The metrics are pure functions in
``bench/replay_metrics.py``, which says where each timestamp comes from:

- submission rate: jobs / wall time of the submission loop (with offsets, the arrival
  rate unless the API is slower); release: the gate's release call to its end, or the
  release calls of ``--release each``;
- first wave: the jobs whose whole gang started (last rank's real start) before the first
  job ended (last rank's real end); starts/s = their number / (their last start - t0);
- all started: t0 to the last gang's start; makespan: t0 to the last real process end;
- lower bound: max(total GPU-seconds / cluster GPUs, max(offset + duration));
- GPU utilization over GPUs x makespan (intervals cut to [t0, t0 + makespan]):
  allocated = placement to the job's end in the API (GPUs free), useful = each task's
  real start to real end;
- launch latency: placement to each task's real start (median, p95); rank start skew:
  last minus first real start of a gang (median over multi-node jobs); end latency: a
  job's last real end to its end in the API (median, p95);
- JCT: arrival (max(submitted, t0)) to the job's end in the API; wait: arrival to placement;
- lifecycle medians: placement -> agent launches -> process runs; process ends -> agent
  reaps it -> (last task) server frees the GPUs.

    python bench/replay.py gang_200 --nodes 8 --limit 30          # quick: < 1 min
    python bench/replay.py gang_200                               # 64 x 8 GPUs
    python bench/replay.py ../shared/workloads/mixed_1000.csv --runs 3 -o markdown
    python bench/replay.py single_gpu_2000 --server http://head:7733 --stamps /shared/st
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_metrics import (  # noqa: E402
    JobTimes,
    Row,
    RunTimes,
    TaskTimes,
    load_workload,
    metrics,
    parse_stamp,
)

from corral.client import Client  # noqa: E402
from corral.schemas.api import EventItem, JobOut  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TERMINAL = ("succeeded", "failed", "cancelled")
RELEASES = {
    "gate": "; all wait on one held job, released: t0 is when it ended",
    "each": "; all held, then released one by one: t0 is the first release",
    "offsets": "; each submitted at t0 + offset",
}
CYCLE_METRIC = "corral_scheduling_cycle_duration_seconds"
PLACED = ("pending", "running")  # the event of a placement
POLL = 0.5  # seconds between reads of the event log while waiting

# (key, label, format): the table's rows, in order
METRICS: list[tuple[str, str, str]] = [
    ("cluster_up_s", "cluster up (s)", ".1f"),
    ("jobs", "jobs (ended with stamps)", ".0f"),
    ("failed", "jobs failed / incomplete", ".0f"),
    ("requeued", "jobs requeued", ".0f"),
    ("submit_rate", "submission rate (jobs/s)", ".0f"),
    ("release_s", "release of all (s)", ".2f"),  # gate: release call to the gate's end
    ("first_wave_jobs", "first wave (jobs)", ".0f"),
    ("first_wave_rate", "first-wave starts/s", ".1f"),
    ("all_started_s", "all started after t0 (s)", ".2f"),
    ("makespan_s", "makespan (s)", ".2f"),
    ("lower_bound_s", "lower bound (s)", ".2f"),
    ("makespan_ratio", "makespan / lower bound", ".3f"),
    ("util_allocated", "GPU util. allocated", ".1%"),
    ("util_useful", "GPU util. useful", ".1%"),
    ("launch_p50_ms", "launch latency p50 (ms)", ".0f"),
    ("launch_p95_ms", "launch latency p95 (ms)", ".0f"),
    ("skew_p50_ms", "rank start skew p50 (ms)", ".0f"),
    ("end_latency_p50_ms", "end latency p50 (ms)", ".0f"),
    ("end_latency_p95_ms", "end latency p95 (ms)", ".0f"),
    ("mean_jct_s", "mean JCT (s)", ".2f"),
    ("mean_wait_s", "mean wait (s)", ".2f"),
    ("placed_to_launched_ms", "  placed -> agent launch p50 (ms)", ".0f"),
    ("launched_to_start_ms", "  agent launch -> process p50 (ms)", ".0f"),
    ("end_to_exited_ms", "  process end -> agent reaped p50 (ms)", ".0f"),
    ("exited_to_freed_ms", "  last reaped -> GPUs free p50 (ms)", ".0f"),
    ("cycles", "scheduling cycles (during the run)", ".0f"),
    ("cycle_mean_ms", "  mean cycle (ms)", ".0f"),
]


def workload_path(name: str) -> Path:
    """A CSV path, or a name in the shared workloads folder (``gang_200``)."""
    path = Path(name)
    if path.is_file():
        return path
    for shared in (Path("../shared/workloads"), REPO.parent / "shared" / "workloads"):
        for candidate in (shared / name, shared / f"{name}.csv"):
            if candidate.is_file():
                return candidate
    raise SystemExit(f"no workload {name!r} (a CSV path, or a name in ../shared/workloads)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def own_cluster(
    nodes: int, gpus: int, config: str | None, timeout: float
) -> Iterator[tuple[str, str, float]]:
    """``corral up --detach`` in a temporary home: (URL, admin token, seconds until every
    node was ready); ``corral down`` on the way out. A start past ``timeout`` gets SIGINT
    (Ctrl-C: ``corral up`` stops what it started)."""
    home = Path(tempfile.mkdtemp(prefix="corral-replay-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env["CORRAL_HOME"] = str(home)
    corral = [sys.executable, "-m", "corral"]
    up = [*corral, "up", "--nodes", str(nodes), "--gpus-per-node", str(gpus)]
    up += ["--port", str(free_port()), "--detach"]
    if config:
        up += ["--config", config]
    log = home / "up.log"
    try:
        began = time.perf_counter()
        with open(log, "wb") as out:
            proc = subprocess.Popen(up, env=env, stdout=out, stderr=subprocess.STDOUT)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
                code = proc.wait(120)
        if code:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise SystemExit(f"corral up failed (exit {code}): " + " / ".join(tail))
        url = (home / "server").read_text().strip()
        token = (home / "token").read_text().strip()
        with Client(url, token) as client:
            ready = sum(n.state == "ready" for n in client.nodes())
        took = time.perf_counter() - began
        if ready < nodes:
            raise SystemExit(f"corral up returned with {ready} of {nodes} nodes ready")
        yield url, token, took
    finally:
        subprocess.run([*corral, "down"], env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def manifest(row: Row, index: int, stamps: Path, gate: str | None) -> dict[str, Any]:
    """Row ``index`` as a job whose tasks stamp their real start and end; ``gate``: held
    (``"hold"``), or waiting on that job id, or neither (None)."""
    stamp = f'{shlex.quote(str(stamps))}/"$CORRAL_JOB_ID.$CORRAL_ATTEMPT.$RANK"'
    script = (
        f'f={stamp}; echo start $EPOCHREALTIME > "$f"; '
        'sleep "$REPLAY_SECONDS"; echo end $EPOCHREALTIME >> "$f"'
    )
    job: dict[str, Any] = {
        "name": f"replay-{index}",
        "nodes": row.nodes,
        "resources": {"gpus": row.gpus_per_node},
        "priority": row.priority,
        "command": ["bash", "-c", script],
        # one command for all (the duration in the environment); C: a dot in the time
        "env": {"REPLAY_SECONDS": f"{row.duration:g}", "LC_ALL": "C"},
    }
    if gate == "hold":
        job["hold"] = True
    elif gate is not None:
        job["dependency"] = f"afterok:{gate}"
    return job


class Progress:
    """The job event log read on from a cursor: placements and ends of our jobs."""

    def __init__(self, client: Client) -> None:
        self.client = client
        latest = client.events(limit=1)
        self.cursor = latest[-1].id if latest else 0
        self.events: dict[int, list[EventItem]] = {}

    def track(self, ids: list[int]) -> None:
        self.events.update({i: [] for i in ids})

    def read(self) -> None:
        while True:
            page = self.client.event_page(since_id=self.cursor, limit=10_000, entity="job")
            for event in page.events:
                self.cursor = event.id
                mine = self.events.get(int(event.entity_id))
                if mine is not None:
                    mine.append(event)
            if not page.has_more:
                return

    def count(self, to_states: tuple[str, ...]) -> int:
        return sum(any(e.to_state in to_states for e in ev) for ev in self.events.values())

    def earlier(self, job_id: int, attempt: int) -> tuple[tuple[float, float], ...]:
        """(placed, off its GPUs) of each attempt before ``attempt``: from its placement to
        the next event that leaves running or preempting (a requeue)."""
        events = sorted(self.events.get(job_id, []), key=lambda e: e.id)
        spans = []
        for i, event in enumerate(events):
            if event.attempt >= attempt or (event.from_state, event.to_state) != PLACED:
                continue
            off = next(
                (
                    e.at
                    for e in events[i + 1 :]
                    if e.from_state in ("running", "preempting")
                    and e.to_state not in ("running", "preempting")
                ),
                None,
            )
            if off is not None:
                spans.append((event.at, off))
        return tuple(spans)

    def placed(self, job_id: int, attempt: int) -> float | None:
        at = [
            e.at
            for e in self.events.get(job_id, [])
            if e.attempt == attempt and (e.from_state, e.to_state) == PLACED
        ]
        return max(at) if at else None


def cycle_totals(client: Client) -> tuple[float, float]:
    """(cycles, seconds in them) so far, from the server's ``/metrics``."""
    found = {"count": 0.0, "sum": 0.0}
    for line in client.metrics().splitlines():
        name, _, value = line.partition(" ")
        for key in found:
            if name == f"{CYCLE_METRIC}_{key}":
                found[key] = float(value)
    return found["count"], found["sum"]


def submit_all(
    client: Client, rows: list[Row], stamps: Path, gate: str | None
) -> tuple[list[int], float, float]:
    """Submit every row: all gated (``manifest``), or each at t0 + offset; (ids, t0,
    seconds submitting)."""
    ids = []
    t0 = time.time()
    began = time.perf_counter()
    for index, row in enumerate(rows):
        if gate is None:
            delay = t0 + row.offset - time.time()
            if delay > 0:
                time.sleep(delay)
        ids.append(client.submit(manifest(row, index, stamps, gate)).id)
    return ids, t0, time.perf_counter() - began


def release_all(client: Client, ids: list[int], threads: int) -> tuple[float, float]:
    """Release every job, one call each, from ``threads`` keep-alive connections (about
    1.6x the rate of one on 2 cores); (t0: when the first was sent, seconds for all)."""
    clients = [Client(client.servers, client.token) for _ in range(threads)]
    try:
        for other in clients:
            other.health()  # connected before the clock starts
        with ThreadPoolExecutor(threads) as pool:
            t0 = time.time()
            began = time.perf_counter()
            shares = [ids[i::threads] for i in range(threads)]
            list(pool.map(lambda c, share: [c.release(i) for i in share], clients, shares))
            return t0, time.perf_counter() - began
    finally:
        for other in clients:
            other.close()


def wait_all(progress: Progress, total: int, timeout: float, t0: float) -> None:
    """Until every job has ended, with a progress line on stderr."""
    tty = sys.stderr.isatty()
    shown = 0.0
    while True:
        progress.read()
        ended = progress.count(TERMINAL)
        now = time.time()
        if tty or now - shown >= 10 or ended == total:
            started = progress.count(("running",))
            line = f"  {now - t0:7.1f} s  started {started}/{total}  ended {ended}/{total}"
            print(("\r" if tty else "") + line, end="" if tty else "\n", file=sys.stderr)
            shown = now
        if ended == total:
            if tty:
                print(file=sys.stderr)
            return
        if now - t0 > timeout:
            raise SystemExit(f"\n{total - ended} jobs not ended after {timeout:.0f} s")
        time.sleep(POLL)


def job_times(job: JobOut, progress: Progress, stamps: Path, t0: float) -> JobTimes | None:
    """The timestamps of a succeeded job, or None if any is missing."""
    placed = progress.placed(job.id, job.attempt)
    if job.state != "succeeded" or placed is None or job.ended_at is None or not job.tasks:
        return None
    tasks = []
    for task in job.tasks:
        path = stamps / f"{job.id}.{job.attempt}.{task.rank}"
        start, end = parse_stamp(path.read_text()) if path.exists() else (None, None)
        if None in (start, end, task.started_at, task.ended_at):
            return None
        gpus = len(task.gpus) * task.gpu_share
        tasks.append(TaskTimes(gpus, task.started_at, task.ended_at, start, end))  # type: ignore[arg-type]
    earlier = progress.earlier(job.id, job.attempt)
    return JobTimes(max(job.submitted_at, t0), placed, job.ended_at, tuple(tasks), earlier)


def replay(client: Client, rows: list[Row], args: argparse.Namespace) -> dict[str, Any]:
    """One replay on the cluster ``client`` talks to: the metrics and run facts."""
    nodes = [n for n in client.nodes() if n.state == "ready"]
    gpus = sum(n.gpus for n in nodes)
    stamps = Path(args.stamps or tempfile.mkdtemp(prefix="corral-replay-stamps-"))
    stamps.mkdir(parents=True, exist_ok=True)
    stamps.chmod(0o1777)  # tasks may run as another account
    release = args.release if all(r.offset == 0 for r in rows) else "offsets"
    progress = Progress(client)
    cycles_before = cycle_totals(client)
    gate = None
    if release == "gate":  # one held job every job waits on (afterok)
        gate = client.submit({"name": "replay-gate", "command": ["true"], "hold": True}).id
    ids, t0, submit_s = submit_all(
        client, rows, stamps, {"gate": str(gate), "each": "hold"}.get(release)
    )
    progress.track(ids)
    release_s = None
    if release == "each":
        t0, release_s = release_all(client, ids, args.release_threads)
    elif gate is not None:
        t0 = time.time()
        client.release(gate)
    wait_all(progress, len(ids), args.timeout, t0)
    cycles, cycle_s = (b - a for a, b in zip(cycles_before, cycle_totals(client), strict=True))
    if gate is not None:  # every job could start once the gate ended: t0
        ended = client.get(gate).ended_at
        if ended is None:
            raise SystemExit(f"the gate job {gate} did not end")
        t0, release_s = ended, ended - t0
    mine = set(ids)
    jobs = {j.id: j for j in client.list(all=True) if j.id in mine}
    for missing in mine - set(jobs):
        jobs[missing] = client.get(missing)
    times = [job_times(jobs[i], progress, stamps, t0) for i in ids]
    complete = tuple(t for t in times if t is not None)
    run = RunTimes(t0, gpus, submit_s, tuple(rows), complete)
    if not args.stamps:
        shutil.rmtree(stamps, ignore_errors=True)
    if args.dump:
        with open(args.dump, "a") as out:  # one line per run: every timestamp
            out.write(json.dumps(asdict(run)) + "\n")
    return {
        "nodes": len(nodes),
        "gpus": gpus,
        "release": release,
        "cycles": cycles,
        "cycle_mean_ms": 1000 * cycle_s / cycles if cycles else None,
        "release_s": release_s,
        "failed": float(len(ids) - len(complete)),
        "requeued": float(sum(j.attempt > 0 for j in jobs.values())),
        **metrics(run),
    }


def one_run(rows: list[Row], args: argparse.Namespace) -> dict[str, Any]:
    if args.server:
        with Client(args.server, args.token) as client:
            return {"cluster_up_s": None, **replay(client, rows, args)}
    with own_cluster(args.nodes, args.gpus_per_node, args.config, args.up_timeout) as (
        url,
        token,
        up_s,
    ):
        client = Client(url, token)
        try:
            return {"cluster_up_s": up_s, **replay(client, rows, args)}
        finally:
            client.close()


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def print_table(results: list[dict[str, Any]], title: str, markdown: bool) -> None:
    heads = ["metric", *(f"run {i + 1}" for i in range(len(results)))]
    rows = [[label, *(_cell(r.get(key), fmt) for r in results)] for key, label, fmt in METRICS]
    if markdown:
        print(f"{title}\n\n| {' | '.join(heads)} |\n|{'---|' * len(heads)}")
        for row in rows:
            print(f"| {' | '.join(c.strip() for c in row)} |")
        print()
    else:
        print(title)
        table = Table()
        for i, head in enumerate(heads):
            table.add_column(head, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        Console(width=160).print(table)
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload", help="a CSV, or a name in ../shared/workloads (gang_200)")
    parser.add_argument("--server", help="use this running cluster instead of corral up")
    parser.add_argument("--token", help="with --server: its token (else the usual lookup)")
    parser.add_argument("--nodes", type=int, default=64, help="simulated nodes (corral up)")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--config", help="scheduler.yaml for corral up")
    parser.add_argument("--up-timeout", type=float, default=600, help="seconds for corral up")
    parser.add_argument("--runs", type=int, default=1, help="replays, each on a fresh cluster")
    parser.add_argument("--limit", type=int, default=0, help="only the first N rows (0: all)")
    parser.add_argument("--time-scale", type=float, default=1.0, help="offsets and durations x")
    parser.add_argument(
        "--release",
        choices=("gate", "each"),
        default="gate",
        help="all offsets 0: every job waits on one held gate job (one release call), or "
        "each job is held and released by its own call",
    )
    parser.add_argument("--dump", help="append each run's timestamps (JSON) to this file")
    parser.add_argument("--release-threads", type=int, default=8, help="connections releasing")
    parser.add_argument("--stamps", help="stamp directory (default: a temporary one)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for all")
    parser.add_argument("-o", "--output", choices=("table", "json", "markdown"), default="table")
    args = parser.parse_args()
    path = workload_path(args.workload)
    rows = load_workload(path, args.limit or None, args.time_scale)
    results = []
    for run in range(args.runs):
        print(f"run {run + 1}/{args.runs}: {len(rows)} jobs of {path.name}", file=sys.stderr)
        results.append(one_run(rows, args))
    if args.output == "json":
        settings = {k: v for k, v in vars(args).items() if k not in ("output", "token")}
        print(json.dumps({"settings": settings, "workload": str(path), "runs": results}, indent=2))
        return
    first = results[0]
    where = args.server or "corral up"
    title = (
        f"{path.name}: {len(rows)} jobs on {first['nodes']} nodes, {first['gpus']} GPUs ({where})"
        + (f", time x{args.time_scale:g}" if args.time_scale != 1 else "")
        + RELEASES[first["release"]]
    )
    print_table(results, title, args.output == "markdown")


if __name__ == "__main__":
    main()
