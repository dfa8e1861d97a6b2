"""The gRPC client's retry rounds, against a real gRPC server on loopback: a call safe to
repeat goes round again while the server answers UNAVAILABLE (or cannot be reached yet),
pausing as the REST client does (``corral.retry.backoff`` with its base and cap); a call
not safe to repeat is never sent twice."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from corral.api.convert import CODE_KEY
from corral.api.v1 import corral_pb2 as pb
from corral.api.v1 import corral_pb2_grpc as pb_grpc
from corral.client import Client, grpc_transport
from corral.client.client import RETRY_BASE, RETRY_CAP, RETRY_ROUNDS
from corral.errors import ConnectionFailedError, UnavailableError
from corral.retry import backoff


class Flaky(pb_grpc.CorralServicer):
    """Answers UNAVAILABLE to the first ``failures`` calls of each RPC; with ``says_so``,
    as Corral does when its database is down (``corral-code: unavailable``), else as a
    proxy or a server going away does (no code)."""

    def __init__(self, failures: int, says_so: bool = False) -> None:
        self.failures = failures
        self.says_so = says_so
        self.calls: Counter[str] = Counter()

    def _maybe_fail(self, context: grpc.ServicerContext, rpc: str) -> None:
        self.calls[rpc] += 1
        if self.calls[rpc] <= self.failures:
            if self.says_so:
                context.set_trailing_metadata(((CODE_KEY, "unavailable"),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "down for a moment")

    def WhoAmI(self, request: Any, context: grpc.ServicerContext) -> pb.WhoAmIResponse:  # noqa: N802
        self._maybe_fail(context, "WhoAmI")
        return pb.WhoAmIResponse(user="u", role="admin", token_id=1)

    def HoldJob(self, request: Any, context: grpc.ServicerContext) -> pb.Job:  # noqa: N802
        self._maybe_fail(context, "HoldJob")
        raise AssertionError("never answered in these tests")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(servicer: pb_grpc.CorralServicer, port: int) -> grpc.Server:
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_CorralServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float, float]]:
    """The pauses the transport asks ``backoff`` for (none taken: drawn as 0)."""
    asked: list[tuple[int, float, float]] = []

    def recorded(attempt: int, base: float, cap: float) -> float:
        asked.append((attempt, base, cap))
        return backoff(attempt, base, cap, draw=lambda: 0.0)

    monkeypatch.setattr(grpc_transport, "backoff", recorded)
    return asked


@pytest.fixture
def serve() -> Iterator[Callable[[pb_grpc.CorralServicer], str]]:
    servers: list[grpc.Server] = []

    def start(servicer: pb_grpc.CorralServicer) -> str:
        port = _free_port()
        servers.append(_serve(servicer, port))
        return f"grpc://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(grace=None)


@pytest.mark.parametrize("says_so", [False, True], ids=["unreachable", "database-down"])
def test_a_read_goes_round_again_while_the_server_is_unavailable(
    serve: Callable[[pb_grpc.CorralServicer], str],
    pauses: list[tuple[int, float, float]],
    says_so: bool,
) -> None:
    flaky = Flaky(failures=RETRY_ROUNDS - 1, says_so=says_so)
    with Client(serve(flaky), "t") as client:
        assert client.whoami().user == "u"
    assert flaky.calls["WhoAmI"] == RETRY_ROUNDS
    assert pauses == [(n, RETRY_BASE, RETRY_CAP) for n in range(1, RETRY_ROUNDS)]


@pytest.mark.parametrize(
    ("says_so", "error"),
    [(False, ConnectionFailedError), (True, UnavailableError)],
    ids=["unreachable", "database-down"],
)
def test_a_read_gives_up_after_the_rounds(
    serve: Callable[[pb_grpc.CorralServicer], str],
    pauses: list[tuple[int, float, float]],
    says_so: bool,
    error: type[Exception],
) -> None:
    flaky = Flaky(failures=99, says_so=says_so)
    with Client(serve(flaky), "t") as client, pytest.raises(error):
        client.whoami()
    assert flaky.calls["WhoAmI"] == RETRY_ROUNDS and len(pauses) == RETRY_ROUNDS - 1


@pytest.mark.parametrize(
    ("says_so", "error"),
    [(False, ConnectionFailedError), (True, UnavailableError)],
    ids=["unreachable", "database-down"],
)
def test_a_call_not_safe_to_repeat_is_sent_once(
    serve: Callable[[pb_grpc.CorralServicer], str],
    pauses: list[tuple[int, float, float]],
    says_so: bool,
    error: type[Exception],
) -> None:
    flaky = Flaky(failures=99, says_so=says_so)
    with Client(serve(flaky), "t") as client, pytest.raises(error):
        client.hold(7)  # a POST the client does not mark idempotent
    assert flaky.calls["HoldJob"] == 1 and pauses == []


def test_a_server_that_starts_late_is_reached_on_a_later_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing listens at first; the server starts during the first pause. The channel
    connects again on the rounds' schedule (``CHANNEL_OPTIONS``), so a later round gets
    through. Pauses: the longest the helper may draw (0.25 s, then 0.5 s)."""
    port, servers = _free_port(), []
    flaky = Flaky(failures=0)

    def start_then_pause(attempt: int, base: float, cap: float) -> float:
        if not servers:
            servers.append(_serve(flaky, port))
        return backoff(attempt, base, cap, draw=lambda: 1.0)

    monkeypatch.setattr(grpc_transport, "backoff", start_then_pause)
    try:
        with Client(f"grpc://127.0.0.1:{port}", "t") as client:
            assert client.whoami().role == "admin"
        assert servers and flaky.calls["WhoAmI"] == 1
    finally:
        for server in servers:
            server.stop(grace=None)
