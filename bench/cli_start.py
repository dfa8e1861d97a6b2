"""Cold start of the ``corral`` command: wall time of a fresh process per command.

Each row runs the command in a new process (the installed ``corral`` script, as a user's
shell does) ``--runs`` times after one unmeasured run, and reports the median, the fastest
and the slowest wall time, and the median CPU time (user + system) of the process: on a
busy machine the wall time varies with the load, the CPU time much less. The unmeasured
run writes the bytecode (even under ``PYTHONDONTWRITEBYTECODE``), as a user's first run
does. ``corral submit -f job.yaml``, ``corral jobs`` and ``corral show`` talk to a server:
one this script starts on loopback in a temporary ``CORRAL_HOME`` (SQLite, no agents: the
job stays pending), or the one given by ``--server``. Two reference rows: the bare
interpreter, and ``from corral.cli.main import app`` (the Typer app with every command
module).

    python bench/cli_start.py [--runs 20] [--server URL --token TOKEN] [-o markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

IMPORT_APP = "from corral.cli.main import app"
MANIFEST = """\
name: bench-cli
command: ["sleep", "1"]
resources:
  gpus: 1
time_limit: 5m
"""


def corral_command() -> list[str]:
    """The console script pip installed next to this interpreter, else ``python -m corral``."""
    script = Path(sys.executable).with_name("corral")
    return [str(script)] if script.exists() else [sys.executable, "-m", "corral"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/health", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


@contextmanager
def local_server(home: Path) -> Iterator[tuple[str, str]]:
    """``corral server`` on loopback with its database in ``home``: its URL and admin token."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "CORRAL_HOME": str(home)}
    env.pop("CORRAL_SERVER", None)
    env.pop("CORRAL_TOKEN", None)
    args = ["server", "--db", f"sqlite:///{home / 'corral.db'}", "--port", str(port)]
    with open(home / "server.log", "ab") as log:
        server = subprocess.Popen(
            [*corral_command(), *args, "--allow-root-jobs"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not (healthy(url) and (home / "token").exists()):
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start; see {home / 'server.log'}")
            time.sleep(0.1)
        yield url, (home / "token").read_text().strip()
    finally:
        server.terminate()
        server.wait(timeout=30)


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall_times(argv: list[str], env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each of ``runs`` fresh processes of ``argv`` (after one
    unmeasured run)."""
    walls, cpus = [], []
    for i in range(runs + 1):
        cpu = child_cpu()
        began = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        took = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
        if i:
            walls.append(took)
            cpus.append(child_cpu() - cpu)
    return walls, cpus


def measure(
    url: str, token: str, runs: int, work: Path
) -> list[tuple[str, tuple[list[float], list[float]]]]:
    env = {**os.environ, "CORRAL_SERVER": url, "CORRAL_TOKEN": token}
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the unmeasured run writes the bytecode
    manifest = work / "job.yaml"
    manifest.write_text(MANIFEST)
    corral = corral_command()
    seeded = subprocess.run(
        [*corral, "submit", "-f", str(manifest)], env=env, capture_output=True, text=True
    )
    if seeded.returncode != 0:
        raise SystemExit(f"corral submit failed: {seeded.stderr}")
    job = seeded.stdout.strip()
    rows = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("python -c 'from corral.cli.main import app'", [sys.executable, "-c", IMPORT_APP]),
        ("corral --version", [*corral, "--version"]),
        ("corral show JOB", [*corral, "show", job]),
        ("corral jobs", [*corral, "jobs"]),
        ("corral submit -f job.yaml", [*corral, "submit", "-f", str(manifest)]),
    ]
    return [(label, wall_times(argv, env, runs)) for label, argv in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="measured runs per command")
    parser.add_argument(
        "--server",
        help="a running server, where RUNS + 2 one-GPU jobs are submitted (default: start one "
        "on loopback)",
    )
    parser.add_argument("--token", help="its token (default: $CORRAL_TOKEN)")
    parser.add_argument("-o", "--output", choices=("table", "json", "markdown"), default="table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.server:
            token = args.token or os.environ.get("CORRAL_TOKEN", "")
            results = measure(args.server, token, args.runs, work)
        else:
            home = work / "home"
            home.mkdir()
            with local_server(home) as (url, token):
                results = measure(url, token, args.runs, work)
    ms = [
        (
            c,
            *(1000 * f(walls) for f in (statistics.median, min, max)),
            1000 * statistics.median(cpus),
        )
        for c, (walls, cpus) in results
    ]
    machine = (
        f"{platform.python_implementation()} {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; {args.runs} runs each, after one unmeasured run"
    )
    if args.output == "json":
        keys = ("command", "median_ms", "min_ms", "max_ms", "cpu_median_ms")
        rows = [dict(zip(keys, row, strict=True)) for row in ms]
        print(json.dumps({"machine": machine, "rows": rows}, indent=2))
        return
    columns = ("command", "median ms", "min ms", "max ms", "CPU median ms")
    cells = [(row[0], *(f"{v:.0f}" for v in row[1:])) for row in ms]
    if args.output == "markdown":
        print(f"| {' | '.join(columns)} |\n|---|---:|---:|---:|---:|")
        for row in cells:
            print(f"| {' | '.join(row)} |")
    else:
        table = Table(title="cold start of the corral command (wall time, fresh process)")
        for column in columns:
            table.add_column(column, justify="left" if column == "command" else "right")
        for row in cells:
            table.add_row(*row)
        Console(width=120).print(table)
    print(machine)


if __name__ == "__main__":
    main()
