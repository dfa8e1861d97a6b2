"""Several ``corral server`` replicas sharing one database, agents, and a TCP proxy that
cuts an agent off its server and restores it."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
from pathlib import Path

import httpx

from corral.schemas.api import Health
from tests.e2e.cluster import LocalCluster, free_port, wait_for


class ReplicatedCluster(LocalCluster):
    """``replicas`` server processes on ``db``; ``url`` lists them all (comma-separated),
    so the CLI, the SDK and the agents fail over between them."""

    def __init__(
        self,
        home: Path,
        db: str,
        replicas: int = 2,
        lease_ttl: float = 3.0,
        host: str = "127.0.0.1",
        **options: float,
    ) -> None:
        """``host``: the address the replicas listen on (and are reached at)."""
        super().__init__(home, **options)
        self.db = db
        self.lease_ttl = lease_ttl
        self.host = host
        self.ports = [free_port() for _ in range(replicas)]
        self.urls = [f"http://{host}:{p}" for p in self.ports]
        self.url = ",".join(self.urls)
        self.replicas: list[subprocess.Popen | None] = [None] * replicas

    def start_server(self) -> None:
        """Start the first replica (it creates the tokens), then the others together."""
        self.start_replica(0)
        for i in range(1, len(self.replicas)):
            self.start_replica(i, wait=False)
        for i in range(1, len(self.replicas)):
            wait_for(lambda i=i: self.health(i), 30, f"replica {i} to answer /health")

    def start_replica(self, i: int, wait: bool = True) -> None:
        args = ["server", "--db", self.db, "--host", self.host, "--port", str(self.ports[i])]
        args += ["--node-timeout", str(self.node_timeout)]
        args += ["--sync-interval", str(self.sync_interval), "--lease-ttl", str(self.lease_ttl)]
        args.append("--allow-root-jobs")  # the tests' admin token is root's
        self.replicas[i] = self._spawn(args, f"server-{i}.log")
        if wait:
            wait_for(lambda: self.health(i) and (self.home / "token").exists(), 30, "replica 0")

    def health(self, i: int) -> Health | None:
        proc = self.replicas[i]
        if proc is None or proc.poll() is not None:
            return None
        try:
            answer = httpx.get(f"{self.urls[i]}/api/v1/health", timeout=1)
        except httpx.HTTPError:
            return None
        return Health.model_validate(answer.json()) if answer.is_success else None

    def leaders(self) -> list[int]:
        """The replicas that say they lead."""
        found = [(i, self.health(i)) for i in range(len(self.replicas))]
        return [i for i, h in found if h is not None and h.leader]

    def kill_replica(self, i: int) -> None:
        proc = self.replicas[i]
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def pause_replica(self, i: int) -> None:
        proc = self.replicas[i]
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)

    def resume_replica(self, i: int) -> None:
        proc = self.replicas[i]
        assert proc is not None
        proc.send_signal(signal.SIGCONT)

    def start_agent(self, name: str, simulate: str = "8xH100", server: str | None = None) -> None:
        args = ["agent", "--server", server or self.url, "--name", name, "--simulate", simulate]
        self.agents[name] = self._spawn(args + ["--labels", f"host={name}"], f"agent-{name}.log")

    def stop(self) -> None:
        self.server = None
        super().stop()
        for proc in self.replicas:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.replicas:
            if proc is not None:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()


class Proxy:
    """A TCP forwarder on loopback: ``cut()`` drops every connection and refuses new ones
    (the agent behind it is cut off), ``restore()`` listens again on the same port."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, []
        for sock in [listener, *sockets]:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
