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
from corral.client.grpc_transport import NotOverGrpcError
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
    audit = [_corral(server, a, "audit", "-o", "json") for a in (server.grpc_url, server.url)]
    assert audit[0].returncode == 0, audit[0].stderr
    assert audit[0].stdout == audit[1].stdout and "SubmitJob" in audit[0].stdout
    with pytest.raises(NotOverGrpcError, match="GET /metrics is not available over gRPC"):
        Client(server.grpc_url, server.admin_token).metrics()  # Prometheus scrapes HTTP


def test_node_administration_over_grpc(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    FakeHardwareAgent(server, "node-b")
    stub, rest = _stub(server), server.client()
    over_grpc = Client(server.grpc_url, server.admin_token)
    drained = over_grpc.drain("node-a")
    assert drained.state == "draining" and drained == rest.nodes()[0]
    assert over_grpc.drain("node-a") == rest.drain("node-a")  # a second drain: the same
    undrained = over_grpc.undrain("node-a")
    assert undrained.state == "ready" and undrained == rest.nodes()[0]
    assert rest.undrain("node-a") == over_grpc.undrain("node-a")
    before = server.ctx.clock()
    notice = over_grpc.notice("node-b", 30)
    assert notice.nodes == ["node-b"] and before + 30 <= notice.leave_at <= before + 40
    again = rest.notice("node-b", 30)
    assert again.nodes == notice.nodes and abs(again.leave_at - notice.leave_at) < 10
    assert over_grpc.nodes() == rest.nodes() and rest.nodes()[1].state == "draining"
    alice = _user(server, "alice")
    for call in (stub.DrainNode, stub.UndrainNode):
        assert _refusal(call, pb.NodeRequest(name="node-a"), alice) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "this needs an admin token",
        )
    refused = _refusal(stub.NoticeNode, pb.NoticeRequest(name="node-a", deadline=5), alice)
    assert refused[0] == grpc.StatusCode.PERMISSION_DENIED
    for address in (server.url, server.grpc_url):
        with pytest.raises(PermissionDeniedError):
            Client(address, alice).drain("node-a")
    assert rest.nodes()[0].state == "ready"  # alice's drain did nothing
    admin = server.admin_token
    code, message = _refusal(stub.DrainNode, pb.NodeRequest(name="nope"), admin)
    with pytest.raises(NotFoundError) as missing:
        rest.drain("nope")
    assert (code, message) == (grpc.StatusCode.NOT_FOUND, missing.value.message)
    with server.http(admin) as http:
        for name, deadline in (("node-a", -1.0), ("node-a", 86401.0), ("a\0b", 5.0)):
            answer = http.post(
                f"/nodes/{name.replace(chr(0), '%00')}/notice", json={"deadline": deadline}
            )
            assert answer.status_code == 422, answer.text
            request = pb.NoticeRequest(name=name, deadline=deadline)
            assert _refusal(stub.NoticeNode, request, admin) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                answer.json()["message"],
            )
        answer = http.post("/nodes/node-a/notice", json={})
        assert _refusal(stub.NoticeNode, pb.NoticeRequest(name="node-a"), admin) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            answer.json()["message"],
        )
    assert rest.nodes()[0].state == "ready"
    audit = [(e.method, e.path, e.target, e.status) for e in rest.audit()]
    assert ("GRPC", "/corral.v1.Corral/DrainNode", "node-a", 200) in audit
    assert ("POST", "/api/v1/nodes/node-a/drain", "node-a", 200) in audit
    assert ("GRPC", "/corral.v1.Corral/UndrainNode", "node-a", 200) in audit
    assert ("GRPC", "/corral.v1.Corral/NoticeNode", "node-b", 200) in audit
    assert ("GRPC", "/corral.v1.Corral/DrainNode", "node-a", 403) in audit
    assert ("POST", "/api/v1/nodes/node-a/drain", "node-a", 403) in audit
    assert ("GRPC", "/corral.v1.Corral/DrainNode", "nope", 404) in audit


def test_tokens_over_grpc(server: Server) -> None:
    stub, rest = _stub(server), server.client()
    over_grpc = Client(server.grpc_url, server.admin_token)
    alice = over_grpc.create_token("alice", unix_user="al")
    assert alice.token and (alice.user, alice.role, alice.unix_user) == ("alice", "user", "al")
    bob = rest.create_token("bob", role="admin")
    assert over_grpc.tokens() == rest.tokens()
    assert [t.user for t in rest.tokens()][-2:] == ["alice", "bob"]
    assert all(t.token is None for t in over_grpc.tokens())  # the secret: only once
    as_alice = Client(server.grpc_url, alice.token), Client(server.url, alice.token)
    assert as_alice[0].tokens() == as_alice[1].tokens()
    assert [t.id for t in as_alice[0].tokens()] == [alice.id]  # a user: their own
    for client in as_alice:  # another user's token: not found, as over REST
        with pytest.raises(NotFoundError):
            client.revoke_token(bob.id)
        with pytest.raises(PermissionDeniedError):  # creating one needs an admin
            client.create_token("eve")
    code, message = _refusal(stub.RevokeToken, pb.TokenRequest(token_id=bob.id), alice.token)
    with pytest.raises(NotFoundError) as rest_refusal:
        as_alice[1].revoke_token(bob.id)
    assert (code, message) == (grpc.StatusCode.NOT_FOUND, rest_refusal.value.message)
    revoked = over_grpc.revoke_token(bob.id)
    assert revoked.revoked_at is not None and revoked == rest.tokens()[-1]
    assert rest.revoke_token(bob.id) == over_grpc.revoke_token(bob.id)
    with server.http(server.admin_token) as http:
        for body, request in (
            ({"user": ""}, pb.CreateTokenRequest(user="")),
            ({"user": "x", "role": "root"}, pb.CreateTokenRequest(user="x", role="root")),
            ({"user": "x", "unix_user": "a b"}, pb.CreateTokenRequest(user="x", unix_user="a b")),
            ({"user": "x\0"}, pb.CreateTokenRequest(user="x\0")),
        ):
            answer = http.post("/tokens", json=body)
            assert answer.status_code == 422, answer.text
            assert _refusal(stub.CreateToken, request, server.admin_token) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                answer.json()["message"],
            )
        answer = http.delete("/tokens/0")
        assert answer.status_code == 422, answer.text
        assert _refusal(stub.RevokeToken, pb.TokenRequest(token_id=0), server.admin_token) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            answer.json()["message"],
        )
    mine = as_alice[0].revoke_token(alice.id)  # a user revokes their own
    assert mine.revoked_at is not None
    with pytest.raises(AuthenticationError):
        as_alice[0].tokens()
    audit = [(e.method, e.path, e.target, e.status) for e in rest.audit()]
    assert ("GRPC", "/corral.v1.Corral/CreateToken", str(alice.id), 201) in audit
    assert ("POST", "/api/v1/tokens", str(bob.id), 201) in audit
    assert ("GRPC", "/corral.v1.Corral/RevokeToken", str(bob.id), 200) in audit
    assert ("DELETE", f"/api/v1/tokens/{bob.id}", str(bob.id), 200) in audit
    assert ("GRPC", "/corral.v1.Corral/RevokeToken", str(bob.id), 404) in audit
    assert ("GRPC", "/corral.v1.Corral/CreateToken", None, 403) in audit


def test_admin_commands_over_grpc(server: Server) -> None:
    assert server.grpc_url is not None
    FakeHardwareAgent(server, "node-a")
    for args in (
        ("drain", "node-a", "-o", "json"),
        ("drain", "node-a"),
        ("undrain", "node-a", "-o", "json"),
        ("undrain", "node-a"),
        ("node", "notice", "node-a", "--deadline", "1m"),
        ("token", "list", "-o", "json"),
        ("token", "list"),
    ):
        over_grpc = _corral(server, server.grpc_url, *args)
        over_rest = _corral(server, server.url, *args)
        assert over_grpc.returncode == 0, over_grpc.stderr
        assert over_grpc.stdout == over_rest.stdout, args
    created = _corral(server, server.grpc_url, "token", "create", "--user", "carol", "-o", "json")
    assert created.returncode == 0, created.stderr
    carol = json.loads(created.stdout)
    assert carol["user"] == "carol" and carol["token"]
    assert Client(server.url, carol["token"]).whoami().user == "carol"
    revoked = _corral(server, server.grpc_url, "token", "revoke", str(carol["id"]))
    assert revoked.returncode == 0, revoked.stderr
    assert server.client().tokens()[-1].revoked_at is not None
    listed = [
        _corral(server, a, "token", "list", "-o", "json") for a in (server.grpc_url, server.url)
    ]
    assert listed[0].stdout == listed[1].stdout and str(carol["id"]) in listed[0].stdout


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
