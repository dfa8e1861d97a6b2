"""The SDK fails over between replicas, and retries after a replica died mid-request
only what is safe to repeat."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from corral.client import Client
from corral.errors import ConnectionFailedError
from tests.e2e.cluster import free_port
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
