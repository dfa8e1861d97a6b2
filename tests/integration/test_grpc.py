"""The gRPC API (SPEC section 11) against the REST API on one real server: the same
answers, the same authorization, the same validation messages, streams that resume, server
reflection, and the CLI over ``grpc://``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.empty_pb2 import Empty
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from corral.api.v1 import corral_pb2 as pb
from corral.api.v1.corral_pb2_grpc import CorralStub
from corral.client import Client
from corral.errors import (
    AuthenticationError,
    ConnectionFailedError,
    NotFoundError,
    PermissionDeniedError,
)
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server, start_server
from tests.integration.protocol import FakeHardwareAgent, chunk, report
from tests.integration.test_bad_input import ABSURD_DURATIONS, NUL_FIELDS
from tests.integration.test_job_kinds_input import BAD as BAD_KINDS
from tests.integration.test_tls import self_signed

pytestmark = pytest.mark.server_options(grpc=True)
JOB: dict[str, Any] = {"command": ["true"]}


def _stub(server: Server) -> CorralStub:
    assert server.grpc_url is not None
    return CorralStub(grpc.insecure_channel(server.grpc_url.removeprefix("grpc://")))


def _auth(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


def _refusal(call: Any, request: Any, token: str | None) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, metadata=_auth(token) if token else (), timeout=10)
    return caught.value.code(), caught.value.details()


def _user(server: Server, name: str) -> str:
    return server.client().create_token(name).token or ""


def test_rest_and_grpc_answer_the_same(server: Server) -> None:
    FakeHardwareAgent(server, "node-a", gpus=8)
    rest, over_grpc = server.client(), Client(server.grpc_url, server.admin_token)
    first = over_grpc.submit({"command": ["python", "train.py"], "resources": {"gpus": 8}})
    second = rest.submit({**JOB, "name": "second", "resources": {"cpus": 2.0}})
    assert over_grpc.get(second.id).manifest == rest.get(second.id).manifest
    wait_for(lambda: rest.get(first.id).state == "running", 10, "the first job placed")
    preempted = over_grpc.preempt(first.id)
    assert preempted == rest.get(first.id) and preempted.state == "preempting"
    cancelled = over_grpc.cancel(second.id)
    assert cancelled.state == "cancelled" and cancelled == rest.get(second.id)
    over_grpc.cancel(first.id)
    wait_for(lambda: rest.get(first.id).state == "cancelled", 10, "the first job cancelled")
    for one in (first.id, second.id, str(second.id)):
        assert over_grpc.get(one) == rest.get(one)
    assert over_grpc.list(all=True) == rest.list(all=True)
    assert [j.id for j in over_grpc.list(all=True)] == [first.id, second.id]
    assert over_grpc.job_page(all=True, limit=1, count=True) == rest.job_page(
        all=True, limit=1, count=True
    )
    assert over_grpc.nodes() == rest.nodes() and over_grpc.nodes()[0].name == "node-a"
    assert over_grpc.queues() == rest.queues()
    assert over_grpc.pools() == rest.pools()
    assert over_grpc.whoami() == rest.whoami()
    assert over_grpc.events(since_id=0) == rest.events(since_id=0)
    assert over_grpc.advice(first.id) == rest.advice(first.id)
    assert over_grpc.health().status == "ok"
    audit = [(e.method, e.path, e.target, e.status) for e in rest.audit()]
    assert ("GRPC", "/corral.v1.Corral/SubmitJob", str(first.id), 201) in audit
    assert ("GRPC", "/corral.v1.Corral/CancelJob", str(second.id), 200) in audit
    same_key = over_grpc.submit(JOB, idempotency_key="k1"), over_grpc.submit(JOB, "k1")
    assert same_key[0].id == same_key[1].id  # a replayed key answers the first job


def test_the_same_tokens_and_authorization(server: Server) -> None:
    stub, rest = _stub(server), server.client()
    alice, bob = _user(server, "alice"), _user(server, "bob")
    job = Client(server.url, alice).submit(JOB)
    get = pb.JobRequest(job_id=str(job.id))
    assert _refusal(stub.GetJob, get, None) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "no API token: pass --token, set CORRAL_TOKEN, or run on the host of `corral up`",
    )
    assert _refusal(stub.GetJob, get, "nonsense") == (
        grpc.StatusCode.UNAUTHENTICATED,
        "invalid or revoked API token",
    )
    code, message = _refusal(stub.GetJob, get, bob)  # another user's job: not found
    assert code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(NotFoundError) as rest_refusal:
        Client(server.url, bob).get(job.id)
    assert message == rest_refusal.value.message
    assert _refusal(stub.CancelJob, get, bob)[0] == grpc.StatusCode.NOT_FOUND
    assert stub.GetJob(get, metadata=_auth(alice)).id == job.id
    assert _refusal(stub.ListNodes, Empty(), server.join_token)[0] == (
        grpc.StatusCode.PERMISSION_DENIED
    )
    # the Client raises the same classes over both transports
    for address in (server.url, server.grpc_url):
        with pytest.raises(AuthenticationError):
            Client(address, "nonsense").list()
        with pytest.raises(PermissionDeniedError):
            Client(address, server.join_token).nodes()
    assert [j.id for j in rest.list(all=True)] == [job.id]  # bob's cancel did nothing


def _rest_message(server: Server, body: str) -> str:
    with server.http(server.admin_token) as http:
        answer = http.post("/jobs", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    return answer.json()["message"]


BAD_MANIFESTS: list[dict[str, Any]] = [
    *({**JOB, **change} for change, _ in NUL_FIELDS),
    *({**JOB, **change} for change, _ in ABSURD_DURATIONS),
    *({"command": ["true"], **change} for change, _ in BAD_KINDS),
    {"command": 5},
    {"command": ["true"], "nodes": 0},
    {"command": ["true"], "unknown": 1},
    {"command": ["true"], "resources": {"gpus": "nine"}},
    {},
]
BAD_TEXTS = [
    "[1, 2]",
    '"just a string"',
    '{"command": "true", "grace_period": 1' + "0" * 400 + "}",
]


def test_bad_input_gets_the_same_messages_as_rest(server: Server) -> None:
    stub, token = _stub(server), server.admin_token
    texts = [json.dumps(m) for m in BAD_MANIFESTS] + BAD_TEXTS
    for text in texts:
        code, message = _refusal(stub.SubmitJob, pb.SubmitJobRequest(manifest=text), token)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (text, message)
        assert message == _rest_message(server, text), text
    code, message = _refusal(stub.SubmitJob, pb.SubmitJobRequest(manifest=""), token)
    assert (code, message) == (grpc.StatusCode.INVALID_ARGUMENT, "body: Field required")
    with server.http(token) as http:
        for path, call, request in (
            ("/jobs?limit=0", stub.ListJobs, pb.ListJobsRequest(limit=0)),
            ("/jobs?state=" + "x" * 17, stub.ListJobs, pb.ListJobsRequest(state="x" * 17)),
            ("/jobs?queue=a%00b", stub.ListJobs, pb.ListJobsRequest(queue="a\0b")),
            ("/jobs/abc", stub.GetJob, pb.JobRequest(job_id="abc")),
            ("/events?entity=x", stub.ListEvents, pb.ListEventsRequest(entity="x")),
            ("/events?limit=10001", stub.ListEvents, pb.ListEventsRequest(limit=10001)),
            ("/nodes/a%00b", stub.GetNode, pb.NodeRequest(name="a\0b")),
        ):
            answer = http.get(path)
            assert answer.status_code == 422, (path, answer.text)
            code, message = _refusal(call, request, token)
            assert (code, message) == (grpc.StatusCode.INVALID_ARGUMENT, answer.json()["message"])
    code, message = _refusal(stub.GetLogs, pb.LogsRequest(job_id=0), token)
    # (REST says it twice: the route and its job_caller dependency both read the path)
    assert message == "job_id: Input should be greater than or equal to 1"
    assert server.client().list(all=True) == []  # nothing was stored


def test_watch_events_resumes_after_an_id(server: Server) -> None:
    stub, client = _stub(server), server.client()
    jobs = [client.submit(JOB) for _ in range(3)]
    client.cancel(jobs[0].id)
    history = client.events(since_id=0)
    assert len(history) >= 4
    stream = stub.WatchEvents(pb.WatchEventsRequest(since_id=0), metadata=_auth(client.token))
    seen = [next(stream).id for _ in history]
    assert seen == [e.id for e in history]
    stream.cancel()
    middle = history[1].id  # resume as a broken stream does: after the last id seen
    resumed = Client(server.grpc_url, server.admin_token).stream_events(since_id=middle)
    assert [next(resumed) for _ in history[2:]] == history[2:]
    client.cancel(jobs[1].id)  # a new event reaches an open stream
    assert next(resumed).entity_id == str(jobs[1].id)
    resumed.close()


def test_stream_logs_of_a_finished_job(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    rest, over_grpc = server.client(), Client(server.grpc_url, server.admin_token)
    job = rest.submit({**JOB, "resources": {"gpus": 8}})
    wait_for(lambda: rest.get(job.id).state == "running", 10, "placed")
    node.sync([report(job.id, 0, "running", pid=7)], [chunk(job.id, 0, 0, b"hello\n")])
    node.sync([report(job.id, 0, "running", pid=7)], [chunk(job.id, 0, 6, b"world\n")])
    node.sync([report(job.id, 0, "exited", exit_code=0)])
    wait_for(lambda: rest.get(job.id).state == "succeeded", 10, "ended")
    assert over_grpc.logs(job.id) == rest.logs(job.id) == "hello\nworld\n"
    assert list(over_grpc.follow_logs(job.id)) == ["hello\nworld\n"]  # ends: complete
    stub = _stub(server)
    pieces = list(
        stub.StreamLogs(
            pb.LogsRequest(job_id=job.id, offset=6, follow=True), metadata=_auth(server.admin_token)
        )
    )
    assert [(p.data, p.offset, p.complete) for p in pieces] == [("world\n", 12, True)]
    assert over_grpc.log_chunk(job.id, offset=6) == rest.log_chunk(job.id, offset=6)


def test_server_reflection_lists_the_service(server: Server) -> None:
    assert server.grpc_url is not None
    channel = grpc.insecure_channel(server.grpc_url.removeprefix("grpc://"))
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    answer = next(stub.ServerReflectionInfo(iter([request])))
    names = {s.name for s in answer.list_services_response.service}
    assert "corral.v1.Corral" in names


def _corral(server: Server, address: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORRAL_TOKEN": server.admin_token, "CORRAL_SERVER": address}
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_cli_works_the_same_over_grpc(server: Server) -> None:
    assert server.grpc_url is not None
    submitted = _corral(
        server, server.grpc_url, "submit", "-o", "json", "--name", "n", "--", "true"
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = str(json.loads(submitted.stdout)["id"])
    server.client().cancel(job_id)  # stable answers from here
    for args in (("jobs", "--all", "-o", "json"), ("show", job_id, "-o", "json")):
        over_grpc, over_rest = (
            _corral(server, server.grpc_url, *args),
            _corral(server, server.url, *args),
        )
        assert over_grpc.returncode == 0, over_grpc.stderr
        assert over_grpc.stdout == over_rest.stdout
    unsupported = _corral(server, server.grpc_url, "token", "list")
    assert unsupported.returncode == 1 and "Traceback" not in unsupported.stderr
    assert "not available over gRPC" in unsupported.stderr


def test_grpcs_with_the_rest_servers_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    handle, srv, thread = start_server(tmp_path / "home", grpc=True, tls_cert=cert, tls_key=key)
    try:
        assert handle.grpc_url is not None and handle.grpc_url.startswith("grpcs://")
        trusted = Client(handle.grpc_url, handle.admin_token, ca_cert=cert)
        assert trusted.submit(JOB).id == 1 and trusted.whoami().role == "admin"
        with pytest.raises(ConnectionFailedError):  # the system CAs do not know it
            Client(handle.grpc_url, handle.admin_token, timeout=5).list()
    finally:
        handle.stop_grpc()
        srv.should_exit = True
        thread.join(timeout=10)
