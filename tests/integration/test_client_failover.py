"""The SDK and the agent fail over between replicas; after a replica died mid-request the
SDK retries only what is safe to repeat."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.agent import Agent, AgentSettings
from corral.agent.host import describe_host
from corral.client import Client
from corral.errors import ConnectionFailedError
from tests.e2e.cluster import free_port, wait_for
from tests.integration.conftest import Server


@pytest.fixture
def dying_replica() -> Iterator[str]:
    """A replica that reads each request and dies before answering (connection closed)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_an_unreachable_replica_is_skipped_for_every_request(server: Server) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: the request is never sent
    with Client([down, server.url], server.admin_token) as client:
        assert client.create_token("bob").user == "bob"  # even a plain POST moves on
        assert client.server == server.url


def test_a_replica_dying_mid_request(server: Server, dying_replica: str) -> None:
    with Client([dying_replica, server.url], server.admin_token) as client:
        assert client.health().status == "ok"  # a read is retried on the next replica
    with Client([dying_replica, server.url], server.admin_token) as client:
        job = client.submit({"command": "true"})  # carries an idempotency key: retried
        assert client.get(job.id).id == job.id
    with (
        Client([dying_replica, server.url], server.admin_token) as client,
        pytest.raises(ConnectionFailedError, match="may or may not have been applied"),
    ):
        client.create_token("carol")  # not idempotent: the outcome is unknown
    assert "carol" not in {t.user for t in server.client().tokens()}
    assert [j.id for j in server.client().list(all=True)] == [job.id]


@pytest.fixture
def broken_replica() -> Iterator[str]:
    """A replica that answers every request with 503 (say, its database is unreachable)."""

    class Broken(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.send_error(503, "database unavailable")

        do_GET = do_POST  # noqa: N815

        def log_message(self, *_args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_an_agent_fails_over_from_dead_and_broken_replicas(
    server: Server, dying_replica: str, broken_replica: str, tmp_path: Path
) -> None:
    """A real agent, listing a replica that dies mid-request and one that answers 503
    before the working one, registers, runs a job's process and reports it."""
    settings = AgentSettings(
        servers=[dying_replica, broken_replica, server.url],
        join_token=server.join_token,
        name="node-a",
        address="127.0.0.1",
        node=describe_host("2xH100", {}),
        home=tmp_path / "agent",
        checkpoint_root=tmp_path / "checkpoints",
        sync_interval=0.2,
    )
    agent = Agent(settings)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        client = server.client()
        wait_for(lambda: [n.state for n in client.nodes()] == ["ready"], 30, "registration")
        job = client.submit({"command": "echo ran", "resources": {"gpus": 1}})
        assert client.wait(job.id, timeout=30)[0].state == "succeeded"
        assert client.logs(job.id) == "ran\n"
    finally:
        agent.stop()
        thread.join(30)
        server.ctx.watch.close()  # answer the agent's long-poll, so the server stops at once
