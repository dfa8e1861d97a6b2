"""The REST API over a real server: schema, authentication, validation, job operations."""

from __future__ import annotations

import pytest

from corral.errors import ConflictError, NotFoundError, UnschedulableError, ValidationError
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent


def test_openapi_schema_lists_the_api(server: Server) -> None:
    schema = server.http().get("/openapi.json").json()
    paths = set(schema["paths"])
    for path in (
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/logs",
        "/api/v1/nodes",
        "/api/v1/queues",
        "/api/v1/health",
        "/api/v1/agent/sync",
    ):
        assert path in paths
    assert server.http().get("/health").json()["status"] == "ok"


def test_every_endpoint_needs_a_valid_token(server: Server) -> None:
    anonymous = server.http()
    answer = anonymous.get("/jobs")
    assert answer.status_code == 401
    assert "no API token" in answer.json()["message"]
    assert server.http("crl_wrong").get("/jobs").status_code == 401
    # the join token registers nodes and nothing else
    assert server.http(server.join_token).get("/jobs").status_code == 403
    # users cannot manage tokens
    user = server.client().create_token("bob").token
    assert server.http(user).get("/jobs").status_code == 200
    assert server.http(user).post("/tokens", json={"user": "x"}).status_code == 403


def test_node_token_reports_only_for_its_own_node(server: Server) -> None:
    a = FakeHardwareAgent(server, "node-a")
    FakeHardwareAgent(server, "node-b")
    answer = a.http.post(
        "/agent/sync", json={"node": "node-b", "agent_id": a.agent_id, "tasks": [], "logs": []}
    )
    assert answer.status_code == 403
    assert "belongs to node-a" in answer.json()["message"]


def test_invalid_manifests_name_the_field_and_store_nothing(server: Server) -> None:
    http = server.http(server.admin_token)
    answer = http.post("/jobs", json={"command": "true", "resources": {"gpuz": 1}})
    assert answer.status_code == 422
    assert answer.json() == {"code": "invalid", "message": "resources.gpuz: unknown field"}
    answer = http.post("/jobs", json={"command": "true", "nodes": 0})
    assert answer.status_code == 422 and answer.json()["message"].startswith("nodes:")
    answer = http.post("/jobs", json={"nodes": 1})
    assert "command: Field required" in answer.json()["message"]
    with pytest.raises(ValidationError, match="time_limit"):
        server.client().submit({"command": "true", "time_limit": "eventually"})
    assert server.client().list(all=True) == []


def test_jobs_wait_for_nodes_when_none_is_registered(server: Server) -> None:
    client = server.client()
    job = client.submit({"command": "true", "resources": {"gpus": 8}})
    wait_for(lambda: "no node is registered" in (client.get(job.id).reason or ""), 10, "reason")
    assert client.get(job.id).position == 1


def test_never_fitting_jobs_are_refused_once_nodes_exist(server: Server) -> None:
    FakeHardwareAgent(server, "node-a", gpus=8)
    client = server.client()
    with pytest.raises(UnschedulableError, match="can never fit.*largest node has 8 GPUs"):
        client.submit({"command": "true", "resources": {"gpus": 9}})
    with pytest.raises(UnschedulableError, match="1 of 1 nodes"):
        client.submit({"command": "true", "nodes": 2, "resources": {"gpus": 1}})
    with pytest.raises(UnschedulableError):
        client.submit({"command": "true", "resources": {"gpus": 1, "gpu_model": "A100"}})
    with pytest.raises(UnschedulableError, match="label pool=x"):
        client.submit({"command": "true", "node_selector": {"pool": "x"}})
    assert client.list(all=True) == []


def test_a_required_nvlink_domain_no_node_has_is_refused(server: Server) -> None:
    pairs = [
        {"index": i, "model": "H100", "memory": 80 * 10**9, "nvlink_domain": i // 2}
        for i in range(8)
    ]
    FakeHardwareAgent(server, "node-a", devices=pairs)
    client = server.client()
    asked = {"command": "true", "resources": {"gpus": 4}}
    with pytest.raises(
        UnschedulableError,
        match="topology: nvlink required: 4 GPUs per node in one NVLink domain, but the "
        "largest NVLink domain of any node that could host it holds 2",
    ):
        client.submit({**asked, "topology": {"level": "nvlink", "mode": "required"}})
    assert client.list(all=True) == []
    # preferred may span domains; two GPUs fit one domain
    client.submit({**asked, "topology": {"level": "nvlink", "mode": "preferred"}})
    client.submit({**asked, "resources": {"gpus": 2}, "topology": {"level": "nvlink"}})
    assert len(client.list(all=True)) == 2


@pytest.mark.server_options(
    config=(
        "queues:\n"
        "  - {name: team-a, weight: 2, quota: {gpus: 16}}\n"
        "  - {name: team-b}\n"
        "priority_classes:\n"
        "  batch: {value: 10}\n"
        "  prod: {value: 500, preemptible: false}\n"
    )
)
def test_configured_queues_and_priority_classes(server: Server) -> None:
    client = server.client()
    assert [(q.name, q.weight, q.quota) for q in client.queues()] == [
        ("team-a", 2.0, {"gpus": 16.0}),
        ("team-b", 1.0, {}),
    ]
    with pytest.raises(ValidationError, match="unknown queue 'default'"):
        client.submit({"command": "true"})
    job = client.submit({"command": "true", "queue": "team-b", "priority": "prod"})
    assert (job.priority, job.priority_class, job.preemptible) == (500, "prod", False)
    job = client.submit({"command": "true", "queue": "team-a", "priority": 20})
    assert (job.priority, job.preemptible) == (20, True)
    with pytest.raises(ValidationError, match="unknown priority class 'high'"):
        client.submit({"command": "true", "queue": "team-a", "priority": "high"})
    assert {q.name: q.pending for q in client.queues()} == {"team-a": 1, "team-b": 1}


def test_cancel_and_preempt_rules(server: Server) -> None:
    client = server.client()
    job = client.submit({"command": "true"})
    with pytest.raises(ConflictError, match="only running jobs"):
        client.preempt(job.id)
    assert client.cancel(job.id).state == "cancelled"
    with pytest.raises(ConflictError, match="already ended"):
        client.cancel(job.id)
    with pytest.raises(NotFoundError):
        client.get(999)
    logs = client.log_chunk(job.id)
    assert logs.data == "" and logs.complete
    with pytest.raises(NotFoundError, match="tasks 0..0"):
        client.log_chunk(job.id, task=3)
    assert [e.to_state for e in client.get(job.id).events] == ["pending", "cancelled"]


def test_drain_unknown_node_is_not_found(server: Server) -> None:
    with pytest.raises(NotFoundError, match="no node named 'ghost'"):
        server.client().drain("ghost")
