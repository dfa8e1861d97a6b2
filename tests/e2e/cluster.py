"""Real server and agent processes on loopback for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

from corral.client import Client

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def run_corral(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess:
    """``corral ARGS`` in a child process with ``env``; its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


class LocalCluster:
    """A ``corral server`` and ``corral agent`` processes sharing one ``CORRAL_HOME``."""

    def __init__(
        self,
        home: Path,
        node_timeout: float = 30.0,
        sync_interval: float = 0.5,
        config: str | None = None,
        db: str | None = None,
        server_args: tuple[str, ...] = (),
        checkpoint_root: Path | None = None,
    ) -> None:
        """``config``: the text of a scheduler.yaml for the server (none: the defaults);
        ``db``: the server's database URL (default: SQLite in ``home``); ``server_args``:
        more ``corral server`` options; ``checkpoint_root``: the agents' (default: in
        ``home``)."""
        self.server_args = server_args
        self.checkpoint_root = checkpoint_root or home / "checkpoints"
        self.home = home
        self.config = config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = db or f"sqlite:///{home / 'corral.db'}"
        self.node_timeout = node_timeout
        self.sync_interval = sync_interval
        self.env = {**os.environ, "CORRAL_HOME": str(home), "PYTHONUNBUFFERED": "1"}
        self.env.pop("CORRAL_SERVER", None)
        self.env.pop("CORRAL_TOKEN", None)
        self.server: subprocess.Popen | None = None
        self.agents: dict[str, subprocess.Popen] = {}
        (home / "logs").mkdir(parents=True, exist_ok=True)

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        with open(self.home / "logs" / log, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "corral", *args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_server(self) -> None:
        self.server = self._spawn(
            [
                "server",
                "--db",
                self.db,
                "--port",
                str(self.port),
                "--node-timeout",
                str(self.node_timeout),
                "--sync-interval",
                str(self.sync_interval),
                "--allow-root-jobs",  # the tests' admin token is root's
                *self._config_args(),
                *self.server_args,
            ],
            "server.log",
        )
        wait_for(self._healthy, 30, "the server to answer /health")

    def _config_args(self) -> list[str]:
        if self.config is None:
            return []
        path = self.home / "scheduler.yaml"
        path.write_text(self.config)
        return ["--config", str(path)]

    def _healthy(self) -> bool:
        assert self.server is not None
        if self.server.poll() is not None:
            raise AssertionError(f"server exited: {self.read_log('server.log')}")
        try:
            ok = httpx.get(f"{self.url}/api/v1/health", timeout=1).is_success
        except httpx.HTTPError:
            return False
        return ok and (self.home / "token").exists()

    def kill_server(self) -> None:
        assert self.server is not None
        self.server.send_signal(signal.SIGKILL)
        self.server.wait()

    def start_agent(self, name: str, simulate: str = "8xH100", *extra: str) -> None:
        """Start ``corral agent`` for ``name``; ``extra`` are more agent options."""
        self.agents[name] = self._spawn(
            [
                "agent",
                "--server",
                self.url,
                "--name",
                name,
                "--simulate",
                simulate,
                "--checkpoint-root",
                str(self.checkpoint_root),
                *extra,
            ],
            f"agent-{name}.log",
        )

    def wait_nodes(self, *names: str) -> None:
        def ready() -> bool:
            nodes = {n.name: n.state for n in self.client().nodes()}
            return all(nodes.get(name) == "ready" for name in names)

        wait_for(ready, 30, f"nodes {names} to be ready")

    def kill_agent(self, name: str) -> None:
        proc = self.agents[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def client(self) -> Client:
        return Client(self.url, (self.home / "token").read_text().strip())

    def read_log(self, name: str) -> str:
        try:
            return (self.home / "logs" / name).read_text()[-4000:]
        except OSError:
            return ""

    def cli(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        """Run the ``corral`` CLI against this cluster (address and token from the home)."""
        result = subprocess.run(
            [sys.executable, "-m", "corral", *args],
            env={**self.env, "CORRAL_SERVER": self.url},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"corral {' '.join(args)} failed: {result.stderr}{result.stdout}")
        return result

    def stop(self) -> None:
        for proc in self.agents.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.agents.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()


def kill_groups(pid_files: list[Path]) -> None:
    """Clean up task process groups left behind (e.g. by an agent killed on purpose)."""
    for path in pid_files:
        with contextlib.suppress(ValueError, OSError):
            os.killpg(int(path.read_text().split()[0]), signal.SIGKILL)
