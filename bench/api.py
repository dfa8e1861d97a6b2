"""API throughput and latency on SQLite and PostgreSQL, over REST and over gRPC.

Submissions: a real ``corral server`` process and one ``corral agent`` (8 simulated H100s)
on loopback. First 8 1-GPU jobs fill the GPUs and start (the agent's process launches
are not in the measurement); then C client threads (each its own keep-alive
``httpx.Client``, which submits one job before the clock starts: connected and warm)
submit N 1-GPU jobs in total through ``POST /api/v1/jobs`` as fast as they can. They all
pend, so every scheduling cycle meanwhile sees a growing queue. Reported: submissions per
second (wall clock, all clients), the p50/p99 latency of one submission, and the server
process's CPU time per submission (API, database client and the scheduling cycles the
burst caused; PostgreSQL's own CPU is not in it), which a shared machine disturbs least.
Over gRPC (``--transports``), the same server also serves ``corral.v1.Corral`` and each
client thread holds its own channel and calls ``SubmitJob`` with the same manifest.
The bench's own garbage collector is paused during a measurement (see
``client_gc_paused``), and runs are 3 s apart.

Offered rate (open loop): submissions are due at a fixed rate (``--rate``, 500/s) whatever
the answers, sent by a pool of client threads; latency counts from when a submission was
due, so a server falling behind shows as latency rather than as a lower rate (no
coordinated omission). This is the target's question: does the API take 500 submissions
per second with a p99 under 50 ms.

Submit-to-running: on the same kind of cluster, submit a 1-GPU job, poll it every 5 ms
until its task reports running (the agent started the process), cancel it, wait until the
devices are free; repeated.

PostgreSQL runs on a throwaway server started from the binaries on the machine
(``tests/postgres.py``).

    python bench/api.py                       # 2,000 jobs per run, 1/8/32 clients, both backends
    python bench/api.py --jobs 500 --clients 1 8 --backends sqlite --rate 0   # no open loop
    python bench/api.py --backends sqlite --transports rest grpc --runs 0     # REST beside gRPC
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import httpx
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.cluster import LocalCluster, free_port, wait_for  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402

from corral.api.v1 import corral_pb2 as pb  # noqa: E402
from corral.api.v1.corral_pb2_grpc import CorralStub  # noqa: E402

JOB = {"command": ["sleep", "600"], "resources": {"gpus": 1}}
TRANSPORTS = ("rest", "grpc")
SETTLE = 3.0  # seconds between runs: the last cluster's shutdown is not in the next run


@contextmanager
def cluster(
    db: str | None, full: bool = False, grpc_port: int | None = None
) -> Iterator[LocalCluster]:
    """A server (on ``db``, else SQLite; with ``grpc_port``, serving gRPC there too) and
    one agent with 8 simulated GPUs; ``full``: with 8 1-GPU jobs running on them already."""
    with tempfile.TemporaryDirectory() as tmp:
        extra = ("--grpc-port", str(grpc_port)) if grpc_port else ()
        local = LocalCluster(
            Path(tmp), node_timeout=600, sync_interval=2.0, db=db, server_args=extra
        )
        try:
            local.start_server()
            local.start_agent("node-a")
            local.wait_nodes("node-a")
            if full:
                fill(local)
            yield local
        finally:
            local.stop()


def api_client(local: LocalCluster, timeout: float = 60) -> httpx.Client:
    """A keep-alive client of ``local``'s API with its admin token."""
    token = (local.home / "token").read_text().strip()
    return httpx.Client(
        base_url=f"{local.url}/api/v1",
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout,
    )


Submit = Callable[[], str | None]  # one submission: None, or what went wrong


@contextmanager
def submitter(local: LocalCluster, grpc_port: int | None) -> Iterator[Submit]:
    """One client's connection (keep-alive HTTP, or a gRPC channel with ``grpc_port``)
    and the function that submits ``JOB`` through it."""
    if grpc_port is None:
        with api_client(local) as http:

            def post() -> str | None:
                answer = http.post("/jobs", json=JOB)
                return None if answer.status_code == 201 else f"{answer.status_code} {answer.text}"

            yield post
        return
    token = (local.home / "token").read_text().strip()
    metadata = (("authorization", f"Bearer {token}"),)
    request = pb.SubmitJobRequest(manifest=json.dumps(JOB))
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = CorralStub(channel)

        def call() -> str | None:
            try:
                stub.SubmitJob(request, metadata=metadata, timeout=60)
            except grpc.RpcError as exc:
                return f"{exc.code().name} {exc.details()}"
            return None

        yield call


def fill(local: LocalCluster) -> None:
    """Submit 8 1-GPU jobs and wait until all run: the agent's process launches happen
    before a measurement, and every submission measured then pends."""
    with api_client(local, timeout=30) as http:
        ids = [http.post("/jobs", json=JOB).json()["id"] for _ in range(8)]

        def running() -> bool:
            jobs = http.get("/jobs").json()["jobs"]
            return sum(j["state"] == "running" and j["id"] in ids for j in jobs) == 8

        wait_for(running, 60, "the 8 jobs that fill the GPUs to run")


@contextmanager
def client_gc_paused() -> Iterator[None]:
    """No garbage collection in this (the client's) process meanwhile: a full pass over
    the bench's own heap stalls every client thread at once, tens of milliseconds that
    would show as the server's latency. The server's collector runs as always."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def submit_load(
    local: LocalCluster, clients: int, jobs: int, grpc_port: int | None = None
) -> tuple[float, list[float]]:
    """``jobs`` submissions split over ``clients`` threads; (seconds, latencies)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    start = threading.Barrier(clients + 1)

    def work(index: int) -> None:
        count = jobs // clients + (index < jobs % clients)
        with submitter(local, grpc_port) as submit:
            submit()  # connect and warm up before the clock starts
            start.wait()
            for _ in range(count):
                began = time.perf_counter()
                failed = submit()
                latencies[index].append(time.perf_counter() - began)
                if failed:
                    errors.append(failed[:200])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise SystemExit(f"{len(errors)} submissions failed, e.g. {errors[0]}")
    return elapsed, [x for xs in latencies for x in xs]


def offered_load(
    local: LocalCluster, rate: float, jobs: int, senders: int, grpc_port: int | None = None
) -> tuple[float, list[float]]:
    """``jobs`` submissions due every ``1 / rate`` seconds, sent by ``senders`` threads;
    (seconds from the first due time to the last answer, latencies from due to answer)."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    next_index = iter(range(jobs))
    ready = threading.Barrier(senders + 1)
    go = threading.Event()
    began = 0.0

    def work() -> None:
        with submitter(local, grpc_port) as submit:
            submit()  # connect and warm up before the clock starts
            ready.wait()
            go.wait()  # ``began`` is set
            while True:
                with lock:
                    index = next(next_index, None)
                if index is None:
                    return
                due = began + index / rate
                time.sleep(max(0.0, due - time.perf_counter()))
                failed = submit()
                done = time.perf_counter()
                with lock:
                    latencies.append(done - due)
                if failed:
                    errors.append(failed[:200])

    threads = [threading.Thread(target=work) for _ in range(senders)]
    for thread in threads:
        thread.start()
    ready.wait()  # every sender connected and warm
    began = time.perf_counter() + 0.01
    go.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise SystemExit(f"{len(errors)} submissions failed, e.g. {errors[0]}")
    return elapsed, latencies


def submit_to_running(local: LocalCluster, runs: int) -> list[float]:
    """Seconds from ``POST /jobs`` to the task reporting running, ``runs`` times."""
    samples = []
    with api_client(local, timeout=30) as http:
        for _ in range(runs):
            began = time.perf_counter()
            job = http.post("/jobs", json=JOB).json()
            while True:
                tasks = http.get(f"/jobs/{job['id']}").json()["tasks"]
                if tasks and tasks[0]["state"] == "running":
                    break
                time.sleep(0.005)
            samples.append(time.perf_counter() - began)
            http.post(f"/jobs/{job['id']}/cancel")

            def free() -> bool:
                return all(n["gpus_used"] == 0 for n in http.get("/nodes").json()["nodes"])

            wait_for(free, 30, "the devices to be free")
    return samples


def quantile(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="submissions per run")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--runs", type=int, default=20, help="submit-to-running samples")
    parser.add_argument(
        "--rate", type=float, default=500, help="offered submissions/s of the open loop (0: none)"
    )
    parser.add_argument("--senders", type=int, default=8, help="client threads of the open loop")
    parser.add_argument("--transports", nargs="+", default=["rest", "grpc"], choices=TRANSPORTS)
    args = parser.parse_args()
    console = Console(width=120)  # whole tables, also when piped to a file
    postgres = PostgresServer(free_port()) if "postgresql" in args.backends else None
    submit = Table(
        title=f"Submissions ({args.jobs} 1-GPU jobs per run, all pending behind 8 running)"
    )
    columns = ("backend", "API", "clients", "submits/s", "p50 ms", "p99 ms", "max ms")
    for col in (*columns, "server CPU ms/submit", "load avg"):
        submit.add_column(col, justify="right")
    start = Table(title=f"submit -> running on a local cluster ({args.runs} runs, 5 ms polling)")
    for col in ("backend", "p50 ms", "p95 ms", "max ms"):
        start.add_column(col, justify="right")
    try:
        if postgres is not None:
            postgres.start()
        for backend in args.backends:
            Load = Callable[[LocalCluster, int | None], tuple[float, list[float]]]
            loads: list[tuple[str, Load]] = [
                (str(c), lambda local, port, c=c: submit_load(local, c, args.jobs, port))
                for c in args.clients
            ]
            if args.rate:
                loads.append(
                    (
                        f"{args.senders} @ {args.rate:g}/s",
                        lambda local, port: offered_load(
                            local, args.rate, args.jobs, args.senders, port
                        ),
                    )
                )
            runs = [(t, label, load) for label, load in loads for t in args.transports]
            for transport, label, load in runs:
                port = free_port() if transport == "grpc" else None
                db = postgres.new_database() if backend == "postgresql" and postgres else None
                with cluster(db, full=True, grpc_port=port) as local, client_gc_paused():
                    assert local.server is not None
                    cpu = cpu_seconds(local.server.pid)
                    elapsed, lat = load(local, port)
                    cpu = cpu_seconds(local.server.pid) - cpu
                    load_avg = os.getloadavg()[0]
                if db and postgres:  # no autovacuum of old runs behind the next one
                    postgres.drop_database(db)
                time.sleep(SETTLE)
                submit.add_row(
                    backend,
                    transport,
                    label,
                    f"{len(lat) / elapsed:.0f}",
                    f"{quantile(lat, 50):.1f}",
                    f"{quantile(lat, 99):.1f}",
                    f"{max(lat) * 1000:.1f}",
                    f"{cpu / len(lat) * 1000:.2f}",
                    f"{load_avg:.2f}",
                )
                console.print(f"{backend}, {transport}, {label} client(s): done")
            if not args.runs:
                continue
            db = postgres.new_database() if backend == "postgresql" and postgres else None
            with cluster(db) as local:
                samples = submit_to_running(local, args.runs)
            start.add_row(
                backend,
                f"{quantile(samples, 50):.0f}",
                f"{quantile(samples, 95):.0f}",
                f"{max(samples) * 1000:.0f}",
            )
    finally:
        if postgres is not None:
            postgres.destroy()
    console.print(submit)
    if args.runs:
        console.print(start)


if __name__ == "__main__":
    main()
