"""What a task of a ``kind: ray`` job runs: one Ray node, and the driver or a sidecar.

``python -m corral.kinds.ray_node head --nodes N [--wait S] [--start-arg=ARG]... -- DRIVER...``
starts the Ray head (GCS on ``$MASTER_PORT``), waits until N Ray nodes are alive, runs
DRIVER with ``RAY_ADDRESS`` set and exits with its status once Ray is stopped.

``python -m corral.kinds.ray_node worker [--wait S] [--start-arg=ARG]... [-- COMMAND...]``
waits for the head, starts a Ray worker node joined to it and keeps it until told to stop
(SIGTERM); COMMAND, if given, runs beside it once it has joined (its failure is the
task's).

Each Ray node runs as ``ray start --block`` in a session of its own with a temporary
directory of its own (several Ray nodes, of one job or of several, may share a machine):
stopping it is a SIGTERM to that process, then SIGKILL to whatever is left of its session
(and the agent's per-task cgroup catches anything that got away). SIGTERM or SIGINT to the
task stops the Ray node at once; the driver or sidecar, in this process's group, gets
Corral's signal itself and is waited for. Only the standard library is imported up front;
the head imports Ray's GCS client to count nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

POLL = 0.2  # seconds between looks at the children
STOP_TIMEOUT = 15.0  # seconds Ray may take to stop before its processes are killed
FAILED = 1  # exit status when Ray itself fails (not the driver)
PR_SET_PDEATHSIG = 1
OWNER = ".corral-ray-owner"  # in a Ray node's temporary directory: "pid starttime"
QUIET = {
    "RAY_USAGE_STATS_ENABLED": "0",  # never phone home
    # stop at once on SIGTERM: draining is for long-lived clusters, not one job's
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
}


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} corral-ray: {message}", file=sys.stderr, flush=True)


class RayNode:
    """One ``ray start --block`` process, its session, its temporary directory."""

    def __init__(self, args: Sequence[str], env: dict[str, str], cli: str | None = None) -> None:
        """Start ``ray start --block ARGS`` (``cli``: the ``ray`` program, default the one
        installed beside this interpreter, else on ``PATH``)."""
        base = tempfile.gettempdir()
        base = "/tmp" if len(base) > 40 else base  # Ray's Unix sockets live under it: short
        sweep(Path(base))
        job = os.environ.get("CORRAL_JOB_ID", "x")
        self.temp_dir = tempfile.mkdtemp(prefix=f"ray-{job}-", dir=base)
        (Path(self.temp_dir) / OWNER).write_text(_identity(os.getpid()))
        command = [cli or _ray_cli(), "start", "--block", f"--temp-dir={self.temp_dir}", *args]
        say("starting the Ray node: ray " + " ".join(command[1:]))
        self.proc = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def raylet_up(self) -> bool:
        """The node's raylet is serving (its socket exists): the node has joined."""
        return any(Path(self.temp_dir).glob("session_*/sockets/raylet*"))

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM (Ray stops its processes), then after ``timeout`` SIGKILL to whatever
        is left of the session; the temporary directory goes too. Idempotent."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                say(f"Ray did not stop within {timeout:g}s: killing it")
        deadline = time.monotonic() + 5.0
        while (left := session_members(self.proc.pid)) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(1)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


class Stop:
    """SIGTERM/SIGINT, remembered. They are not passed on: Corral signals every process of
    the task (its cgroup, else its process group, which the driver shares), and a second
    SIGTERM makes a Ray driver abort."""

    def __init__(self) -> None:
        self.signal: int | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, sig: int, _frame: object) -> None:
        self.signal = self.signal or sig

    def timeout(self) -> float:
        """Seconds Ray (or a child) may take to stop: within half the grace period once
        signalled, so that it is killed here before Corral kills the task."""
        if not self.signal:
            return STOP_TIMEOUT
        grace = float(os.environ.get("CORRAL_GRACE_PERIOD") or 2 * STOP_TIMEOUT)
        return max(1.0, min(STOP_TIMEOUT, grace / 2))


def run_head(opts: argparse.Namespace, stop: Stop) -> int:
    addr, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"])
    args = [
        "--head",
        f"--port={port}",
        f"--include-dashboard={str(opts.dashboard).lower()}",
        f"--dashboard-port={opts.dashboard_port or free_port()}",
        *_common_args(),
        *_client_port(),
        *opts.start_arg,
    ]
    if opts.dashboard:
        say(f"the Ray dashboard will be at http://{addr}:{opts.dashboard_port}")
    node = RayNode(args, ray_env())
    try:
        if not wait_for_nodes(node, f"{addr}:{port}", opts.nodes, opts.wait, stop):
            return 128 + stop.signal if stop.signal else FAILED
        say("running the driver: " + " ".join(opts.command))
        driver = subprocess.Popen(opts.command)
        while driver.poll() is None:
            if stop.signal and node.alive():
                node.stop(stop.timeout())  # the driver has the signal too: Ray goes at once
            elif not node.alive() and not stop.signal:
                say(f"the Ray head stopped (exit status {node.proc.returncode}) under the driver")
                end(driver, STOP_TIMEOUT)
                return FAILED
            time.sleep(POLL)
        return exit_status(driver.returncode)
    finally:
        node.stop(stop.timeout())


def run_worker(opts: argparse.Namespace, stop: Stop) -> int:
    addr, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"])
    deadline = time.monotonic() + (opts.wait or 3600.0)
    while not reachable(addr, port):
        if stop.signal:
            return 0
        if time.monotonic() > deadline:
            say(f"the Ray head at {addr}:{port} did not come up within {opts.wait:g}s")
            return FAILED
        time.sleep(0.5)
    node = RayNode([f"--address={addr}:{port}", *_common_args(), *opts.start_arg], ray_env())
    sidecar, pending = None, opts.command  # the command starts once the node has joined
    ready = joined(node, f"{addr}:{port}") if pending else node.raylet_up
    try:
        while not stop.signal:
            if pending and ready():
                say("running beside the Ray node: " + " ".join(pending))
                sidecar, pending = subprocess.Popen(pending), []
            if sidecar is not None and sidecar.poll() is not None:
                code = exit_status(sidecar.returncode)
                if code:
                    say(f"the worker's command exited with status {code}")
                    return code
                sidecar = None  # done: the Ray node stays
            if not node.alive():
                if not reachable(addr, port):
                    return 0  # the head is gone: the job is ending
                say(f"the Ray node stopped (exit status {node.proc.returncode}); head still up")
                return FAILED
            time.sleep(POLL)
        return 0  # stopped: a worker's part ends cleanly
    finally:
        node.stop(stop.timeout())
        if sidecar is not None:
            end(sidecar, stop.timeout(), signalled=bool(stop.signal))


def wait_for_nodes(node: RayNode, address: str, want: int, wait: float, stop: Stop) -> bool:
    """Until ``want`` Ray nodes are alive; False (said why) if Ray failed or time ran out.
    ``wait`` 0: only until the head's GCS answers."""
    start = time.monotonic()
    host, _, port = address.rpartition(":")
    count, shown = 0, 0.0
    nodes: Callable[[], list] | None = None
    while True:
        if stop.signal:
            return False
        if not node.alive():
            say(f"the Ray head failed to start (exit status {node.proc.returncode})")
            return False
        elapsed = time.monotonic() - start
        if nodes is not None or reachable(host, int(port)):
            try:
                nodes = nodes or alive_nodes(address)
                count = len(nodes())
            except (ImportError, AttributeError, TypeError) as exc:
                say(f"cannot count Ray nodes with this Ray ({exc!r}): set ray.wait_for_nodes: 0")
                return False
            if count >= want or (count and not wait):
                say(f"{count} Ray nodes up after {elapsed:.1f}s")
                return True
        if wait and elapsed > wait:
            job = os.environ.get("CORRAL_JOB_ID", "JOB")
            say(
                f"only {count} of {want} Ray nodes joined within {wait:g}s (ray.wait_for_nodes); "
                f"the workers' logs say why: corral logs {job} --task R, R in 1..{want - 1}"
            )
            return False
        if elapsed - shown >= 10:
            shown = elapsed
            say(f"waiting for Ray nodes: {count} of {want} up after {elapsed:.0f}s")
        time.sleep(0.5)


def alive_nodes(address: str) -> Callable[[], list]:
    """A function listing the alive nodes (``GcsNodeInfo``) of the Ray cluster at
    ``address``, through Ray's GCS client, imported here: the rest of this module needs
    no Ray. Empty while the GCS is starting."""
    from ray._raylet import GcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    client = GcsClient(address=address)
    alive = GcsNodeInfo.GcsNodeState.ALIVE

    def listing() -> list:
        try:
            infos = client.get_all_node_info(timeout=5)
        except (AttributeError, TypeError):
            raise  # not this Ray's API
        except Exception:  # the GCS is still starting
            return []
        return [info for info in infos.values() if info.state == alive]

    return listing


def joined(node: RayNode, address: str) -> Callable[[], bool]:
    """A function saying whether ``node`` has joined the cluster at ``address`` (an alive
    node with its temporary directory); with a Ray that does not say, whether its raylet
    serves."""
    try:
        nodes = alive_nodes(address)
    except (ImportError, AttributeError):
        return node.raylet_up

    def check() -> bool:
        try:
            return any(info.temp_dir == node.temp_dir for info in nodes())
        except (AttributeError, TypeError):
            return node.raylet_up()

    return check


def ray_env() -> dict[str, str]:
    """The task's environment for Ray's own processes: no ``RAY_ADDRESS`` (for the
    driver), no usage reports, no drain on SIGTERM."""
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env.update(QUIET)
    return env


def _common_args() -> list[str]:
    """Ports Ray would otherwise take fixed (and collide on with another Ray node of the
    machine) left to the system; no usage reports."""
    return ["--disable-usage-stats", "--dashboard-agent-listen-port=0"]


def _client_port() -> list[str]:
    """Ray Client's server (installed with ``ray[client]``) on a free port, not 10001."""
    if importlib.util.find_spec("grpc") is None:
        return []  # without ray[client], Ray refuses the option
    return [f"--ray-client-server-port={free_port()}"]


def sweep(base: Path) -> None:
    """Remove the temporary directories of Ray nodes whose runtime is gone without
    removing its own (killed with its task): those whose owner process has ended."""
    for marker in base.glob(f"ray-*/{OWNER}"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(marker.read_text().split()[0])
            if _identity(pid) != marker.read_text():
                shutil.rmtree(marker.parent, ignore_errors=True)


def _identity(pid: int) -> str:
    """``pid`` and its start time (a reused pid differs), or "" if it is not running."""
    try:
        start = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
    return f"{pid} {start}"


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (Ray's workers lead process groups of their own
    but stay in the session of the ``ray start`` that started their raylet)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def exit_status(code: int) -> int:
    """A child's status as a shell reports it: 128 + N when killed by signal N."""
    return 128 - code if code < 0 else code


def end(child: subprocess.Popen, timeout: float, signalled: bool = False) -> None:
    """Stop ``child``: SIGTERM (unless Corral's already reached it), SIGKILL after
    ``timeout``."""
    if child.poll() is None and not signalled:
        child.terminate()
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _ray_cli() -> str:
    beside = Path(sys.executable).parent / "ray"
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        say(f"Ray is not installed for {sys.executable}: pip install 'ray>=2.9'")
        sys.exit(FAILED)
    return found


def _die_with_parent() -> None:
    """In the ``ray start`` child: be killed if this runtime dies (SIGKILL included)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m corral.kinds.ray_node")
    parser.add_argument("role", choices=("head", "worker"))
    parser.add_argument("--nodes", type=int, default=1, help="Ray nodes to wait for (head)")
    parser.add_argument("--wait", type=float, default=300.0, help="seconds; 0: no wait")
    parser.add_argument("--dashboard", action="store_true")
    parser.add_argument("--dashboard-port", type=int, default=None)
    parser.add_argument("--start-arg", action="append", default=[], help="for `ray start`")
    argv = list(argv)
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1 :]
    opts = parser.parse_args(argv)
    if opts.role == "head" and not command:
        parser.error("the head runs the driver: give its command after --")
    opts.command = command
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse(sys.argv[1:] if argv is None else argv)
    if "MASTER_PORT" not in os.environ:
        say("MASTER_PORT is not set: this runs inside a task of a kind: ray job")
        return FAILED
    stop = Stop()
    return run_head(opts, stop) if opts.role == "head" else run_worker(opts, stop)


if __name__ == "__main__":
    sys.exit(main())
