"""The gRPC API's monitoring, accounting, administration and job-side RPCs against the
REST API on one real server: telemetry, usage, the audit log, node reset, checkpoint
reports and job steps answer the same over both (the same services, tokens, messages and
audit entries), and the CLI commands built on them print the same over ``grpc://``."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from corral.api.v1 import corral_pb2 as pb
from corral.client import Client
from corral.errors import (
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    ValidationError,
)
from corral.server.services.auth import job_token
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, reading, report, step_report
from tests.integration.test_grpc import JOB, _corral, _refusal, _stub, _user

pytestmark = pytest.mark.server_options(grpc=True)


def _same_refusals(server: Server, cases: list[tuple[str, str, Any, Any, Any]]) -> None:
    """Each bad input answers INVALID_ARGUMENT over gRPC with the message of REST's 422:
    ``(method, path, JSON body, rpc, request)`` per case."""
    with server.http(server.admin_token) as http:
        for method, path, body, call, request in cases:
            answer = http.request(method, path, json=body)
            assert answer.status_code == 422, (path, answer.text)
            assert _refusal(call, request, server.admin_token) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                answer.json()["message"],
            ), path


def _same_cli(server: Server, *commands: tuple[str, ...]) -> None:
    assert server.grpc_url is not None
    for args in commands:
        over_grpc = _corral(server, server.grpc_url, *args)
        over_rest = _corral(server, server.url, *args)
        assert over_grpc.returncode == 0, (args, over_grpc.stderr)
        assert over_grpc.stdout == over_rest.stdout, args


@pytest.mark.server_options(grpc=True, telemetry_resolution=0)
def test_telemetry_and_usage_over_grpc(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a", gpus=4)
    stub, rest = _stub(server), server.client()
    over_grpc = Client(server.grpc_url, server.admin_token)
    job = rest.submit({"command": "x", "resources": {"gpus": 2}})
    wait_for(lambda: rest.get(job.id).state == "running", 10, "placed")
    held = node.sync()["tasks"][0]["gpus"]
    gpus = [reading(i, 80 if i in held else 0) for i in range(4)]
    t0 = time.time()
    node.sync([report(job.id, 0, "running", pid=7, started_at=t0)], gpus=gpus)
    node.sync([report(job.id, 0, "running", pid=7, started_at=t0)], gpus=gpus)
    samples = over_grpc.node_telemetry("node-a")
    assert len(samples) == 8 and samples == rest.node_telemetry("node-a")
    later = samples[3].at
    assert over_grpc.node_telemetry("node-a", later) == rest.node_telemetry("node-a", later)
    assert over_grpc.job_telemetry(job.id) == rest.job_telemetry(job.id)
    assert {s.gpu for s in over_grpc.job_telemetry(job.id)} == set(held)
    alice = _user(server, "alice")
    as_alice = Client(server.grpc_url, alice), Client(server.url, alice)
    assert as_alice[0].node_telemetry("node-a") == as_alice[1].node_telemetry("node-a")
    assert all(s.job_id is None for s in as_alice[0].node_telemetry("node-a"))  # not hers
    with pytest.raises(NotFoundError):
        as_alice[0].job_telemetry(job.id)  # another user's job: not found, as over REST
    with pytest.raises(NotFoundError):
        over_grpc.node_telemetry("nope")
    ended = [report(job.id, 0, "exited", exit_code=0, started_at=t0, ended_at=t0 + 3600)]
    node.sync(ended, gpus=gpus)
    wait_for(lambda: rest.get(job.id).state == "succeeded", 10, "ended")
    window = t0 + 7200
    for by in ("queue", "user", "job"):
        assert over_grpc.usage(by, until=window) == rest.usage(by, until=window)
    half = over_grpc.usage("queue", since=t0 + 1800, until=window).rows[0]
    assert half.gpu_hours_allocated == pytest.approx(1.0)
    assert as_alice[0].usage("job", until=window) == as_alice[1].usage("job", until=window)
    assert as_alice[0].usage("job", until=window).rows == []  # a user's own jobs only
    _same_refusals(
        server,
        [
            ("GET", "/usage?by=team", None, stub.GetUsage, pb.UsageRequest(by="team")),
            (
                "GET",
                "/usage?since=10&until=5",
                None,
                stub.GetUsage,
                pb.UsageRequest(since=10, until=5),
            ),
            (
                "GET",
                "/nodes/a%00b/telemetry",
                None,
                stub.GetNodeTelemetry,
                pb.NodeTelemetryRequest(name="a\0b"),
            ),
        ],
    )
    _same_cli(
        server,
        ("usage", "--until", str(window), "-o", "json"),
        ("usage", "--by", "job", "--until", str(window), "-o", "csv"),
        ("usage", "--by", "user", "--until", str(window)),
        ("telemetry", "node-a", "--since", str(t0 - 60), "-o", "json"),
        ("telemetry", str(job.id), "--since", str(t0 - 60), "-o", "json"),  # (tables: ages)
    )


def test_audit_and_node_reset_over_grpc(server: Server) -> None:
    node = FakeHardwareAgent(server, "gpu-0")
    stub, rest = _stub(server), server.client()
    over_grpc = Client(server.grpc_url, server.admin_token)
    job = rest.submit({**JOB, "resources": {"gpus": 8}})
    wait_for(lambda: rest.get(job.id).state == "running", 10, "placed")
    node.sync([report(job.id, 0, "running", pid=7)])
    alice = _user(server, "alice")
    for address in (server.url, server.grpc_url):
        with pytest.raises(PermissionDeniedError, match="admin"):
            Client(address, alice).reset_node("gpu-0")
        with pytest.raises(PermissionDeniedError, match="admin"):
            Client(address, alice).audit()
    code, message = _refusal(stub.ResetNode, pb.NodeRequest(name="nope"), server.admin_token)
    with pytest.raises(NotFoundError) as missing:
        rest.reset_node("nope")
    assert (code, message) == (grpc.StatusCode.NOT_FOUND, missing.value.message)
    reset = over_grpc.reset_node("gpu-0")
    assert reset.state == "lost" and reset == rest.nodes()[0]
    assert rest.get(job.id).attempt == 1  # its task lost with the old agent: requeued
    assert rest.reset_node("gpu-0") == over_grpc.reset_node("gpu-0")  # again: the same
    _same_cli(server, ("reset-node", "gpu-0"), ("reset-node", "gpu-0", "-o", "json"))
    # the audit log, over both: the same entries, the same pages
    assert over_grpc.audit(limit=None) == rest.audit(limit=None)
    entries = [(e.method, e.path, e.target, e.status) for e in rest.audit(limit=None)]
    for target, status in (("gpu-0", 200), ("gpu-0", 403), ("nope", 404)):
        assert ("GRPC", "/corral.v1.Corral/ResetNode", target, status) in entries
    assert ("POST", "/api/v1/nodes/gpu-0/reset", "gpu-0", 200) in entries
    first = over_grpc.audit_page(limit=2)
    assert first == rest.audit_page(limit=2) and first.has_more and first.next
    assert over_grpc.audit_page(limit=2, before=first.next) == rest.audit_page(
        limit=2, before=first.next
    )
    mine = over_grpc.audit(user="alice")
    assert mine == rest.audit(user="alice") and [e.status for e in mine] == [403, 403]
    since = first.entries[0].at
    assert over_grpc.audit(since=since) == rest.audit(since=since)
    _same_refusals(
        server,
        [
            ("GET", "/audit?limit=0", None, stub.ListAudit, pb.ListAuditRequest(limit=0)),
            ("GET", "/audit?before=0", None, stub.ListAudit, pb.ListAuditRequest(before=0)),
            ("GET", "/audit?user=a%00b", None, stub.ListAudit, pb.ListAuditRequest(user="a\0b")),
            ("POST", "/nodes/a%00b/reset", None, stub.ResetNode, pb.NodeRequest(name="a\0b")),
        ],
    )
    _same_cli(server, ("audit", "-o", "json"), ("audit", "--user", "alice"))


def test_checkpoints_over_grpc(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    stub, rest = _stub(server), server.client()
    over_grpc = Client(server.grpc_url, server.admin_token)
    job = rest.submit({**JOB, "resources": {"gpus": 8}})
    wait_for(lambda: rest.get(job.id).state == "running", 10, "placed")
    node.sync([report(job.id, 0, "running", pid=7)])
    out = over_grpc.checkpoint(job.id, step=120, path="/ckpt/step-120")
    assert out.last_checkpoint_at is not None and out == rest.get(job.id)
    assert any("checkpoint saved at step 120" in e.reason for e in out.events)
    mine = Client(server.grpc_url, job_token(server.ctx.job_key, job.id, 0))  # CORRAL_JOB_TOKEN
    assert mine.checkpoint(job.id, step=121).last_checkpoint_at is not None
    stale = Client(server.grpc_url, job_token(server.ctx.job_key, job.id, 1))
    with pytest.raises(PermissionDeniedError, match="current attempt is 0"):
        stale.checkpoint(job.id, step=122)
    with pytest.raises(NotFoundError):  # another user's job: not found, as over REST
        Client(server.grpc_url, _user(server, "bob")).checkpoint(job.id, step=1)
    path = f"/jobs/{job.id}/checkpoint"
    _same_refusals(
        server,
        [
            (
                "POST",
                path,
                {"step": -1},
                stub.ReportCheckpoint,
                pb.CheckpointRequest(job_id=job.id, step=-1),
            ),
            (
                "POST",
                path,
                {"path": "x" * 4097},
                stub.ReportCheckpoint,
                pb.CheckpointRequest(job_id=job.id, path="x" * 4097),
            ),
        ],
    )
    # (REST says it twice, as for logs: the route and its job_caller dependency)
    for call, request in (
        (stub.ReportCheckpoint, pb.CheckpointRequest()),
        (stub.GetStep, pb.StepRequest(step=1)),
    ):
        assert _refusal(call, request, server.admin_token) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "job_id: Input should be greater than or equal to 1",
        )
    rest.cancel(job.id)
    for client in (rest, over_grpc):
        with pytest.raises(ConflictError, match="only running jobs"):
            client.checkpoint(job.id, step=123)
    audit = [(e.method, e.path, e.user, e.target, e.status) for e in rest.audit()]
    rpc, admin, own = "/corral.v1.Corral/ReportCheckpoint", rest.whoami().user, f"job:{job.id}"
    for user, status in ((admin, 200), (own, 200), (own, 403), (admin, 409)):
        assert ("GRPC", rpc, user, str(job.id), status) in audit


def test_steps_over_grpc(server: Server) -> None:
    a, b = (FakeHardwareAgent(server, name, gpus=2) for name in ("node-a", "node-b"))
    a.sync(), b.sync()  # free ports for MASTER_PORT
    stub, rest = _stub(server), server.client()
    job = rest.submit({**JOB, "nodes": 2, "resources": {"gpus": 2}})
    wait_for(lambda: rest.get(job.id).state == "running", 10, "placed")
    ranks = {t.node: t.rank for t in rest.get(job.id).tasks}
    for node in (a, b):
        node.sync([report(job.id, ranks[node.name], "running", pid=10)])
    token = job_token(server.ctx.job_key, job.id, 0)
    me, me_rest = Client(server.grpc_url, token), Client(server.url, token)
    step = me.start_step(job.id, ["orted", "-x"], ["node-b"], 2, {"B": "2"})
    assert (step.step, step.state, step.created_by) == (1, "pending", f"job:{job.id}")
    assert step == me_rest.step(job.id, 1) and [t.node for t in step.tasks] == ["node-b"] * 2
    sent = b.sync([report(job.id, ranks["node-b"], "running", pid=10)])["steps"]
    assert [(s["step"], s["command"], s["env"]["B"]) for s in sent] == [
        (1, ["orted", "-x"], "2"),
        (1, ["orted", "-x"], "2"),
    ]
    second = Client(server.grpc_url, server.admin_token).start_step(job.id, "echo hi")
    assert (second.step, second.command, second.created_by) == (2, "echo hi", rest.whoami().user)
    assert [t.node for t in second.tasks] == sorted(ranks)  # by default every node
    assert me.steps(job.id) == me_rest.steps(job.id) == rest.steps(job.id)
    assert [s.step for s in me.steps(job.id)] == [1, 2]
    b.sync(
        [report(job.id, ranks["node-b"], "running", pid=10)],
        steps=[step_report(job.id, 1, r, "exited", exit_code=3 - 3 * r) for r in (0, 1)],
    )
    done = me.wait_step(job.id, 1, timeout=5)
    assert (done.state, done.exit_code) == ("ended", 3) and done == rest.step(job.id, 1)
    cancelled = me.cancel_step(job.id, 2)
    assert cancelled.cancelled and cancelled == rest.cancel_step(job.id, 2)  # idempotent
    bob = Client(server.grpc_url, _user(server, "bob"))
    with pytest.raises(NotFoundError):
        bob.steps(job.id)
    with pytest.raises(PermissionDeniedError, match="current attempt is 0"):
        Client(server.grpc_url, job_token(server.ctx.job_key, job.id, 1)).step(job.id, 1)
    outside = Client(server.grpc_url, server.admin_token)
    for client in (outside, rest):
        with pytest.raises(ValidationError, match="more than once"):
            client.start_step(job.id, "true", ["node-a", "node-a"])
        with pytest.raises(NotFoundError):
            client.step(job.id, 9)
    base = f"/jobs/{job.id}/steps"
    bad_bodies: list[dict[str, Any]] = [
        {},
        {"command": "true", "tasks_per_node": 0},
        {"command": ["true"], "env": {"A=B": "1"}},
        {"command": "  "},
        {"command": [1]},
        {"command": {"a": "b"}},
    ]
    _same_refusals(
        server,
        [
            *(
                (
                    "POST",
                    base,
                    body,
                    stub.StartStep,
                    json_format.ParseDict({**body, "job_id": job.id}, pb.StartStepRequest()),
                )
                for body in bad_bodies
            ),
            (
                "GET",
                f"{base}?limit=0",
                None,
                stub.ListSteps,
                pb.ListStepsRequest(job_id=job.id, limit=0),
            ),
            ("GET", f"{base}/0", None, stub.GetStep, pb.StepRequest(job_id=job.id, step=0)),
            (
                "POST",
                f"{base}/1/cancel?attempt=-1",
                None,
                stub.CancelStep,
                pb.StepRequest(job_id=job.id, step=1, attempt=-1),
            ),
        ],
    )
    _same_cli(
        server,
        ("step", "list", str(job.id), "-o", "json"),
        ("step", "list", str(job.id)),
        ("step", "show", str(job.id), "1", "-o", "json"),
        ("step", "cancel", str(job.id), "2", "-o", "json"),
    )
    audit = [(e.method, e.path, e.user, e.target, e.status) for e in rest.audit()]
    assert ("GRPC", "/corral.v1.Corral/StartStep", f"job:{job.id}", f"{job.id}.1", 201) in audit
    assert ("GRPC", "/corral.v1.Corral/CancelStep", f"job:{job.id}", str(job.id), 200) in audit
