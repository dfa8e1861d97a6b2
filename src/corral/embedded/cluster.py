"""``corral up`` / ``corral down``: a control plane plus local agents as real processes.

Each node is a separate ``corral agent`` process (simulated GPUs, or the host's real GPUs);
the server keeps its SQLite database under ``$CORRAL_HOME``. ``up.json`` in the home
records the processes so that ``corral down`` can stop a detached cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from corral.client.config import SERVER_FILE, TOKEN_FILE
from corral.core.node import Node
from corral.errors import ConflictError, CorralError, ValidationError
from corral.privatefiles import private_dir
from corral.providers.local import recorded_pids
from corral.schemas.cluster import NodeDecl, load_cluster

STATE_FILE = "up.json"


@dataclass(frozen=True)
class NodeLaunch:
    name: str
    simulate: str | None = None  # "8xH100"
    node_file: str | None = None  # declared node (cluster file)
    gpus: int = 0
    model: str = ""
    tpu_chips: int = 0  # a TPU host's chips (not counted in gpus)
    agent_args: tuple[str, ...] = ()  # more `corral agent` options (node hooks)


@dataclass
class UpState:
    server_url: str
    server_pid: int
    agent_pids: dict[str, int]
    home: str


def plan_nodes(
    nodes: int | None,
    gpus_per_node: int | None,
    gpu_model: str | None,
    cluster_file: Path | None,
    home: Path,
    real_gpus: int,
) -> list[NodeLaunch]:
    """Which agents to start: declared nodes, simulated ones, or one over real GPUs."""
    if cluster_file is not None:
        if nodes or gpus_per_node or gpu_model:
            raise ValidationError("--cluster cannot be combined with --nodes/--gpus-per-node")
        cluster = load_cluster(cluster_file.read_text(), str(cluster_file))
        (home / "nodes").mkdir(parents=True, exist_ok=True)
        launches = []
        hooked = cluster.hooked()
        for node in cluster.to_nodes():
            path = home / "nodes" / f"{node.name}.json"
            path.write_text(json.dumps(node_file_of(node)))
            gpus = [d for d in node.devices if d.kind != "tpu"]
            launches.append(
                NodeLaunch(
                    node.name,
                    node_file=str(path),
                    gpus=len(gpus),
                    model=gpus[0].model if gpus else "",
                    tpu_chips=node.tpu_chips,
                    agent_args=_hook_args(hooked.get(node.name), cluster_file.absolute().parent),
                )
            )
        return launches
    if nodes is None and gpus_per_node is None and gpu_model is None and real_gpus:
        return [NodeLaunch(socket.gethostname().split(".")[0], gpus=real_gpus, model="(detected)")]
    count = 1 if nodes is None else nodes
    per_node = 8 if gpus_per_node is None else gpus_per_node
    model = gpu_model or "H100"
    if count < 1 or per_node < 0:
        raise ValidationError("--nodes must be at least 1 and --gpus-per-node at least 0")
    return [
        NodeLaunch(
            f"node-{i:02d}",
            simulate=f"{per_node}x{model}" if per_node else None,
            gpus=per_node,
            model=model,
        )
        for i in range(count)
    ]


def _hook_args(decl: NodeDecl | None, base: Path) -> tuple[str, ...]:
    """The agent options of a declared node's hooks (paths taken from ``base``)."""
    if decl is None:
        return ()
    args: list[str] = []
    for flag, path in (("--prolog", decl.prolog), ("--epilog", decl.epilog)):
        if path:
            args += [flag, str(base / Path(path).expanduser())]
    if decl.hook_timeout is not None:
        args += ["--hook-timeout", f"{decl.hook_timeout:g}"]
    return tuple(args)


def node_file_of(node: Node) -> dict:
    """A `corral agent --node-file` description of ``node``."""
    return {
        "devices": [
            {
                "index": d.index,
                "model": d.model,
                "memory": d.memory,
                "nvlink_domain": d.nvlink_domain,
                "mig": list(d.mig),
                "kind": d.kind,
            }
            for d in node.devices
        ],
        "cpus": node.cpus,
        "memory": int(node.memory),
        "network": list(node.network),
        "labels": dict(node.labels),
        "attributes": dict(node.attributes),
    }


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(preferred: int, host: str = "127.0.0.1") -> int:
    if port_free(preferred, host):
        return preferred
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def running_state(home: Path) -> UpState | None:
    """The recorded cluster if its server process is still alive."""
    try:
        state = UpState(**json.loads((home / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return state if process_alive(state.server_pid) else None


class EmbeddedCluster:
    def __init__(
        self,
        home: Path,
        launches: list[NodeLaunch],
        port: int,
        db_url: str | None = None,
        config: Path | None = None,
        host: str = "127.0.0.1",
        pools_file: Path | None = None,
        grpc_port: int | None = None,
    ) -> None:
        self.home = home
        self.grpc_port = grpc_port  # the server also serves gRPC there (corral.v1.Corral)
        self.pools_file = pools_file  # a cluster file with pools: the server autoscales them
        self.launches = launches
        self.port = port
        self.host = host
        self.db_url = db_url or f"sqlite:///{home / 'corral.db'}"
        self.config = config
        self.url = f"http://{host}:{port}"
        self.server: subprocess.Popen | None = None
        self.agents: dict[str, int] = {}  # node name -> its agent's pid
        self.farm: subprocess.Popen | None = None  # the agents' parent (``embedded.farm``)

    def start(self, timeout: float = 60.0) -> UpState:
        """Start the server and the agents; return once every node is ready."""
        existing = running_state(self.home)
        if existing:
            raise ConflictError(
                f"a Corral cluster is already running from {self.home} "
                f"(server {existing.server_url}); stop it with `corral down`"
            )
        down(self.home)  # leftovers of a cluster whose server died: stop its agents
        private_dir(self.home)
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        # the flags below are the whole configuration: none of the daemons' settings
        # from the caller's environment (CORRAL_DB, CORRAL_TLS_CERT, CORRAL_JOIN_TOKEN, ...)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env["CORRAL_HOME"] = str(self.home)
        server_cmd = [
            sys.executable,
            "-m",
            "corral",
            "server",
            "--db",
            self.db_url,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--node-timeout",
            "15",
            "--sync-interval",
            "1",
        ]
        if self.config:
            server_cmd += ["--config", str(self.config)]
        if self.pools_file:
            server_cmd += ["--pools", str(self.pools_file)]
        if self.grpc_port:
            server_cmd += ["--grpc-port", str(self.grpc_port)]
        if os.geteuid() == 0:  # the admin token is the starting account's: here, root
            server_cmd.append("--allow-root-jobs")
        self.server = self._spawn(server_cmd, "server.log", env)
        try:
            if self.launches:  # it imports the agent while the server starts
                self.farm = self._spawn_farm(env)
            self._wait_healthy(timeout)
            self._start_agents()
            self._wait_nodes(timeout)
        except BaseException:
            self.stop()
            raise
        (self.home / SERVER_FILE).write_text(self.url + "\n")
        state = UpState(self.url, self.server.pid, dict(self.agents), str(self.home))
        (self.home / STATE_FILE).write_text(json.dumps(asdict(state), indent=2))
        return state

    def _spawn_farm(self, env: dict[str, str]) -> subprocess.Popen:
        """The process that forks the agents (``embedded.farm``: one interpreter start
        instead of one per node); it waits for their list on its stdin."""
        with open(self.home / "logs" / "farm.log", "ab") as log_file:
            return subprocess.Popen(
                [sys.executable, "-m", "corral.embedded.farm"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                env=env,
                start_new_session=True,
            )

    def _start_agents(self) -> None:
        """One ``corral agent`` process per node, forked by the farm."""
        specs = []
        for launch in self.launches:
            # jobs run as the starting account: it reaches the checkpoint root
            cmd = agent_command(self.url, launch.name, self.home / "checkpoints")
            if launch.simulate:
                cmd += ["--simulate", launch.simulate]
            if launch.node_file:
                cmd += ["--node-file", launch.node_file]
            cmd += launch.agent_args
            log = self.home / "logs" / f"agent-{launch.name}.log"
            specs.append({"argv": cmd[len(CORRAL_COMMAND) :], "log": str(log)})
        if self.farm is None:
            return
        assert self.farm.stdin is not None and self.farm.stdout is not None
        with self.farm.stdin:
            self.farm.stdin.write(json.dumps(specs).encode())
        with self.farm.stdout:  # (the farm stays, to reap the agents)
            out = self.farm.stdout.readline()
        try:
            pids = [int(pid) for pid in json.loads(out)]
        except (ValueError, TypeError):
            raise CorralError(
                f"could not start the agents; see {self.home / 'logs' / 'farm.log'}"
            ) from None
        self.agents = {launch.name: pid for launch, pid in zip(self.launches, pids, strict=True)}

    def _spawn(self, cmd: list[str], log_name: str, env: dict[str, str]) -> subprocess.Popen:
        return spawn(cmd, self.home / "logs" / log_name, env)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server and self.server.poll() is not None:
                raise CorralError(
                    f"the server exited with code {self.server.returncode}; "
                    f"see {self.home / 'logs' / 'server.log'}"
                )
            try:
                if (
                    httpx.get(f"{self.url}/api/v1/health", timeout=2).is_success
                    and (self.home / TOKEN_FILE).exists()
                ):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise CorralError(f"the server did not become healthy within {timeout:.0f}s")

    def _wait_nodes(self, timeout: float) -> None:
        token = (self.home / TOKEN_FILE).read_text().strip()
        want = {launch.name for launch in self.launches}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, pid in self.agents.items():
                if not process_alive(pid):
                    raise CorralError(
                        f"agent {name} exited; see {self.home / 'logs' / f'agent-{name}.log'}"
                    )
            try:
                nodes = httpx.get(
                    f"{self.url}/api/v1/nodes",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=5,
                ).json()["nodes"]
                if want <= {n["name"] for n in nodes if n["state"] == "ready"}:
                    return
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            time.sleep(0.1)
        raise CorralError(f"the agents did not register within {timeout:.0f}s")

    def stop(self) -> None:
        if self.farm is not None and not self.agents:  # still waiting for its agents' list
            self.farm.kill()
        pids = [*self.agents.values(), *recorded_pids(self.home / "pools")]
        stop_processes(pids, [self.server.pid] if self.server else [])
        for proc in [p for p in (self.farm, self.server) if p is not None]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        (self.home / STATE_FILE).unlink(missing_ok=True)


CORRAL_COMMAND = (sys.executable, "-m", "corral")


def agent_command(server: str, name: str, checkpoint_root: Path | None) -> list[str]:
    """``corral agent`` for node ``name`` of the server at ``server``."""
    cmd = [*CORRAL_COMMAND, "agent", "--server", server, "--name", name]
    if checkpoint_root is not None:
        cmd += ["--checkpoint-root", str(checkpoint_root)]
    return cmd


def spawn(cmd: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start a daemon of ``corral up`` (or of the local provider) in a session of its own,
    its output appended to ``log_path``."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            cmd,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def stop_processes(agents: list[int], servers: list[int], timeout: float = 30.0) -> None:
    """SIGTERM the agents (they stop their tasks, with their grace periods), then the
    servers. An agent still stopping after ``timeout`` gets a second SIGTERM (it kills its
    tasks at once) and 10 more seconds; stragglers then get SIGKILL."""
    _stop_group(agents, timeout, second=10.0)
    _stop_group(servers, timeout, second=0.0)


def _stop_group(pids: list[int], timeout: float, second: float) -> None:
    for wait, sig in ((timeout, signal.SIGTERM), (second, signal.SIGTERM)):
        if wait <= 0:
            continue
        for pid in pids:
            if process_alive(pid):
                _signal(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(process_alive(p) for p in pids):
            time.sleep(0.1)
    for pid in pids:
        if process_alive(pid):
            _signal(pid, signal.SIGKILL)


def down(home: Path) -> UpState | None:
    """Stop the cluster that ``corral up --detach`` started from ``home``."""
    try:
        state = UpState(**json.loads((home / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    pool_agents = recorded_pids(home / "pools")  # started by the server's local provider
    stop_processes([*state.agent_pids.values(), *pool_agents], [state.server_pid])
    (home / STATE_FILE).unlink(missing_ok=True)
    return state


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not; a child of ours is reaped)."""
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
