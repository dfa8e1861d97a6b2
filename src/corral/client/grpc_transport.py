"""The SDK over gRPC: a server address ``grpc://HOST:PORT`` (``grpcs://`` with TLS) makes
``Client.request`` call ``corral.v1.Corral`` instead of the REST API.

``GrpcTransport.request`` takes the REST call the client would make (method, path,
params, JSON body) and answers the same JSON-shaped value from the matching RPC
(``corral.api.convert``), raising the same ``corral.errors``; so every ``Client`` method
built on those calls, and the CLI commands built on them, work alike over both. The
calls with an RPC are ``ROUTES``; any other fails with ``NotOverGrpcError`` (``/metrics``
among them: Prometheus scrapes it over HTTP).

A call safe to repeat (a read, or one the client marks idempotent) goes round the
addresses again after a jittered pause while every one answers UNAVAILABLE, with the
REST client's backoff and limits (``RETRY_ROUNDS``, ``corral.retry.backoff``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.empty_pb2 import Empty
from google.protobuf.message import Message

from corral.api.convert import CODE_KEY, error_of, to_dict
from corral.api.v1 import corral_pb2 as pb
from corral.api.v1.corral_pb2_grpc import CorralStub
from corral.client.client import IDEMPOTENT_METHODS, RETRY_BASE, RETRY_CAP, RETRY_ROUNDS
from corral.errors import ConnectionFailedError, CorralError, ValidationError
from corral.retry import backoff
from corral.schemas.api import EventItem, Health, LogOut, ReplicaHealth

SCHEMES = ("grpc://", "grpcs://")
RECONNECT = 1.0  # seconds before a broken stream is opened again
# A channel that lost its server connects again on its own schedule, failing calls at once
# meanwhile: it follows the retry rounds' limits (gRPC's default waits 1 s, then longer).
CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", int(RETRY_BASE * 1000)),
    ("grpc.max_reconnect_backoff_ms", int(RETRY_CAP * 1000)),
)
Build = Callable[[dict[str, str], dict[str, Any], Any, dict[str, str]], Message]


class NotOverGrpcError(CorralError):
    """A call the gRPC API does not offer (use the server's REST address for it)."""

    status_code = 501
    code = "unsupported"


def is_grpc(address: str) -> bool:
    return address.startswith(SCHEMES)


def _ref(path: dict[str, str], *_: Any) -> pb.JobRequest:
    return pb.JobRequest(job_id=path["job"])


def _submit(_: dict, params: dict, body: Any, headers: dict[str, str]) -> pb.SubmitJobRequest:
    text = body if isinstance(body, str) else json.dumps(body)
    return pb.SubmitJobRequest(manifest=text, idempotency_key=headers.get("Idempotency-Key"))


def _number(path: dict[str, str], key: str, name: str) -> int:
    """A path's number (``job_id``, ``step``), refused with REST's message."""
    try:
        return int(path[key])
    except ValueError:
        raise ValidationError(
            f"{name}: Input should be a valid integer, unable to parse string as an integer"
        ) from None


def _logs(path: dict[str, str], params: dict, *_: Any) -> pb.LogsRequest:
    return pb.LogsRequest(job_id=_number(path, "job", "job_id"), **params)


def _node_telemetry(path: dict[str, str], params: dict, *_: Any) -> pb.NodeTelemetryRequest:
    return pb.NodeTelemetryRequest(name=path["name"], **params)


def _job_telemetry(path: dict[str, str], params: dict, *_: Any) -> pb.JobTelemetryRequest:
    return pb.JobTelemetryRequest(job_id=_number(path, "job", "job_id"), **params)


def _checkpoint(path: dict[str, str], _: dict, body: Any, *__: Any) -> pb.CheckpointRequest:
    return pb.CheckpointRequest(job_id=_number(path, "job", "job_id"), **(body or {}))


def _start_step(path: dict[str, str], _: dict, body: Any, *__: Any) -> pb.StartStepRequest:
    fields = dict(body or {})
    command = fields.pop("command", None)
    message = pb.StartStepRequest(job_id=_number(path, "job", "job_id"), **fields)
    if command is not None:  # a list of arguments, or a string: google.protobuf.Value
        json_format.ParseDict(command, message.command)
    return message


def _steps(path: dict[str, str], params: dict, *_: Any) -> pb.ListStepsRequest:
    return pb.ListStepsRequest(job_id=_number(path, "job", "job_id"), **params)


def _step(path: dict[str, str], params: dict, *_: Any) -> pb.StepRequest:
    job_id, step = _number(path, "job", "job_id"), _number(path, "step", "step")
    return pb.StepRequest(job_id=job_id, step=step, **params)


def _with(message: type[Message]) -> Build:
    """A request message from the query parameters (an unknown one: ``ValueError``)."""
    return lambda _path, params, *_: message(**params)


def _node(path: dict[str, str], *_: Any) -> pb.NodeRequest:
    return pb.NodeRequest(name=path["name"])


def _notice(path: dict[str, str], _: dict, body: Any, *__: Any) -> pb.NoticeRequest:
    return pb.NoticeRequest(name=path["name"], **(body or {}))


def _create_token(_: dict, __: dict, body: Any, *___: Any) -> pb.CreateTokenRequest:
    return pb.CreateTokenRequest(**(body or {}))


def _token(path: dict[str, str], *_: Any) -> pb.TokenRequest:
    try:
        token_id = int(path["token"])
    except ValueError:
        raise ValidationError(
            "token_id: Input should be a valid integer, unable to parse string as an integer"
        ) from None
    return pb.TokenRequest(token_id=token_id)


def _empty(*_: Any) -> Empty:
    return Empty()


JOB = r"(?P<job>[^/]+)"
NODE = r"(?P<name>[^/]+)"
STEP = r"(?P<step>[^/]+)"
# (method, path pattern, RPC, request builder): the REST calls the gRPC API answers.
ROUTES: list[tuple[str, str, str, Build]] = [
    ("POST", "/jobs", "SubmitJob", _submit),
    ("GET", "/jobs", "ListJobs", _with(pb.ListJobsRequest)),
    ("GET", f"/jobs/{JOB}", "GetJob", _ref),
    ("GET", f"/jobs/{JOB}/advice", "GetJobAdvice", _ref),
    ("POST", f"/jobs/{JOB}/cancel", "CancelJob", _ref),
    ("POST", f"/jobs/{JOB}/preempt", "PreemptJob", _ref),
    ("POST", f"/jobs/{JOB}/hold", "HoldJob", _ref),
    ("POST", f"/jobs/{JOB}/release", "ReleaseJob", _ref),
    ("GET", f"/jobs/{JOB}/logs", "GetLogs", _logs),
    ("GET", f"/jobs/{JOB}/telemetry", "GetJobTelemetry", _job_telemetry),
    ("POST", f"/jobs/{JOB}/checkpoint", "ReportCheckpoint", _checkpoint),
    ("POST", f"/jobs/{JOB}/steps", "StartStep", _start_step),
    ("GET", f"/jobs/{JOB}/steps", "ListSteps", _steps),
    ("GET", f"/jobs/{JOB}/steps/{STEP}", "GetStep", _step),
    ("POST", f"/jobs/{JOB}/steps/{STEP}/cancel", "CancelStep", _step),
    ("GET", "/nodes", "ListNodes", _empty),
    ("GET", f"/nodes/{NODE}", "GetNode", _node),
    ("POST", f"/nodes/{NODE}/drain", "DrainNode", _node),
    ("POST", f"/nodes/{NODE}/undrain", "UndrainNode", _node),
    ("POST", f"/nodes/{NODE}/notice", "NoticeNode", _notice),
    ("POST", f"/nodes/{NODE}/reset", "ResetNode", _node),
    ("GET", f"/nodes/{NODE}/telemetry", "GetNodeTelemetry", _node_telemetry),
    ("GET", "/queues", "ListQueues", _empty),
    ("GET", "/pools", "ListPools", _empty),
    ("GET", "/events", "ListEvents", _with(pb.ListEventsRequest)),
    ("POST", "/tokens", "CreateToken", _create_token),
    ("GET", "/tokens", "ListTokens", _empty),
    ("DELETE", "/tokens/(?P<token>[^/]+)", "RevokeToken", _token),
    ("GET", "/whoami", "WhoAmI", _empty),
    ("GET", "/health", "Health", _empty),
    ("GET", "/usage", "GetUsage", _with(pb.UsageRequest)),
    ("GET", "/audit", "ListAudit", _with(pb.ListAuditRequest)),
]
_COMPILED = [(m, re.compile(f"^{p}$"), rpc, build) for m, p, rpc, build in ROUTES]


class GrpcTransport:
    """Channels to one or more gRPC addresses (replicas, tried in turn while one cannot
    be reached), the token as ``authorization`` metadata."""

    def __init__(
        self,
        servers: Sequence[str],
        token: str | None,
        timeout: float = 30.0,
        ca_cert: Path | None = None,
    ) -> None:
        if not all(is_grpc(s) for s in servers):
            raise ValidationError(
                f"server addresses {', '.join(servers)}: all grpc:// (or grpcs://), or none"
            )
        self.servers = list(servers)
        self.timeout = timeout
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._channels = [_channel(s, ca_cert) for s in self.servers]
        self._stubs = [CorralStub(channel) for channel in self._channels]
        self._current = 0

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    # -- unary calls -------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
        idempotent: bool | None = None,
        rounds: int | None = None,
        **_: Any,
    ) -> Any:
        """The JSON-shaped answer REST gives to ``method path``, from its RPC. A call
        safe to repeat (``idempotent``; by default a GET, PUT, DELETE...) goes round the
        addresses up to ``rounds`` times (default ``RETRY_ROUNDS``; 1 for other calls)."""
        method = method.upper()
        rpc, message = self._route(method, path, params or {}, json, headers or {})
        if idempotent is None:
            idempotent = method in IDEMPOTENT_METHODS
        if rounds is None:
            rounds = RETRY_ROUNDS if idempotent else 1
        return to_dict(self.call(rpc, message, rounds))

    def call(self, rpc: str, message: Message, rounds: int = 1) -> Message:
        """One unary RPC, trying the next address while one cannot be reached; with
        ``rounds`` > 1 (a call safe to repeat), going round them again after a jittered
        pause while every one answers UNAVAILABLE (unreachable, or a server that says
        so: its database is down)."""
        failures: list[str] = []
        for round_ in range(rounds):
            if round_:
                time.sleep(backoff(round_, RETRY_BASE, RETRY_CAP))  # jittered: spread out
            failures = []
            for i in range(len(self._stubs)):
                index = (self._current + i) % len(self._stubs)
                try:
                    answer = getattr(self._stubs[index], rpc)(
                        message, metadata=self.metadata, timeout=self.timeout
                    )
                except grpc.RpcError as exc:
                    if _unreachable(exc):
                        failures.append(f"{self.servers[index]} ({exc.details()})")
                        continue
                    if exc.code() == grpc.StatusCode.UNAVAILABLE and round_ + 1 < rounds:  # type: ignore[attr-defined]
                        failures.append(f"{self.servers[index]} (UNAVAILABLE)")
                        continue
                    raise _error(exc) from None
                self._current = index
                return answer
        raise ConnectionFailedError(
            f"cannot reach the Corral server at {', '.join(failures)}; is it running with "
            "--grpc-port? (or pass --server / set CORRAL_SERVER)"
        )

    def _route(
        self, method: str, path: str, params: dict, body: Any, headers: dict
    ) -> tuple[str, Message]:
        for verb, pattern, rpc, build in _COMPILED:
            found = pattern.match(path)
            if verb == method and found:
                try:
                    return rpc, build(found.groupdict(), dict(params), body, headers)
                except (ValueError, TypeError) as exc:
                    raise NotOverGrpcError(
                        f"{method} {path} with {sorted(params)}: not available over gRPC "
                        f"({exc}); use the server's REST (http://) address for it"
                    ) from None
        raise NotOverGrpcError(
            f"{method} {path} is not available over gRPC; use the server's REST (http://) "
            "address for it (docs/grpc.md lists what gRPC serves)"
        )

    def replicas(self) -> list[ReplicaHealth]:
        """The health of every address, asked one by one (``corral status``)."""
        found = []
        for address, stub in zip(self.servers, self._stubs, strict=True):
            try:
                answer = stub.Health(Empty(), metadata=self.metadata, timeout=self.timeout)
            except grpc.RpcError as exc:
                error = f"{exc.code().name}: {exc.details()}"  # type: ignore[attr-defined]
                found.append(ReplicaHealth(address=address, reachable=False, error=error))
                continue
            health = Health.model_validate(to_dict(answer))
            found.append(ReplicaHealth(address=address, reachable=True, health=health))
        return found

    # -- streams -----------------------------------------------------------------

    def follow_logs(
        self,
        job_id: int,
        task: int = 0,
        attempt: int | None = None,
        follow: bool = True,
        step: int = 0,
    ) -> Iterator[str]:
        """A task's log as ``StreamLogs`` sends it; a broken stream is resumed from the
        last offset it gave."""
        offset = 0
        while True:
            request = pb.LogsRequest(
                job_id=job_id, task=task, attempt=attempt, offset=offset, step=step, follow=follow
            )
            stub = self._stubs[self._current]
            try:
                for message in stub.StreamLogs(request, metadata=self.metadata):
                    chunk = LogOut.model_validate(to_dict(message))
                    offset, attempt = chunk.offset, chunk.attempt
                    if chunk.data:
                        yield chunk.data
                return
            except grpc.RpcError as exc:
                if not _unreachable(exc) or not follow:
                    raise _error(exc) from None
                self._current = (self._current + 1) % len(self._stubs)
            time.sleep(RECONNECT)

    def watch_events(self, since_id: int) -> Iterator[EventItem]:
        """Events as ``WatchEvents`` sends them, after ``since_id``; a broken stream is
        opened again after the last event seen, so none is lost or repeated."""
        last = since_id
        while True:
            request = pb.WatchEventsRequest(since_id=last)
            stub = self._stubs[self._current]
            try:
                for message in stub.WatchEvents(request, metadata=self.metadata):
                    event = EventItem.model_validate(to_dict(message))
                    last = event.id
                    yield event
            except grpc.RpcError as exc:
                if not _unreachable(exc):
                    raise _error(exc) from None
                self._current = (self._current + 1) % len(self._stubs)
            time.sleep(RECONNECT)


def _channel(address: str, ca_cert: Path | None) -> grpc.Channel:
    scheme, _, target = address.partition("://")
    target = target.rstrip("/")
    if scheme == "grpcs":
        roots = ca_cert.read_bytes() if ca_cert is not None else None
        credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        return grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
    return grpc.insecure_channel(target, options=CHANNEL_OPTIONS)


def _unreachable(exc: grpc.RpcError) -> bool:
    """The server was not reached (or went away): UNAVAILABLE not answered by Corral."""
    if exc.code() != grpc.StatusCode.UNAVAILABLE:  # type: ignore[attr-defined]
        return False
    return not any(k == CODE_KEY for k, _ in exc.trailing_metadata() or ())  # type: ignore[attr-defined]


def _error(exc: grpc.RpcError) -> CorralError:
    metadata = {k: v for k, v in exc.trailing_metadata() or () if isinstance(v, str)}  # type: ignore[attr-defined]
    return error_of(exc.code(), exc.details() or "", metadata)  # type: ignore[attr-defined]
