"""A node's name is bound to the agent that registered it first (issue 14): another agent
cannot take it, and so never receives its tasks, until an admin resets the name."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.errors import PermissionDeniedError
from corral.server.db.models import NodeRow
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, report


def _register(server: Server, name: str, agent_id: str, credential: str | None = None):  # noqa: ANN202
    body = {
        "name": name,
        "agent_id": agent_id,
        "address": "127.0.0.1",
        "devices": [{"index": 0, "model": "H100", "memory": 80 * 10**9}],
        "cpus": 8,
        "memory": 10**10,
        "credential": credential,
    }
    with server.http(server.join_token) as http:
        return http.post("/agent/register", json=body)


def _running(server: Server, gpus: int = 1) -> int:
    job = server.client().submit({"command": "x", "resources": {"gpus": gpus}})
    wait_for(lambda: server.client().get(job.id).state == "running", 10, "the job placed")
    return job.id


def test_the_first_registration_binds_the_name(server: Server) -> None:
    first = _register(server, "gpu-0", "agent-1")
    assert first.status_code == 200, first.text
    credential = first.json()["credential"]
    assert credential and first.json()["log_cap"] == server.ctx.settings.log_cap
    with server.ctx.sessions() as session:  # stored hashed, like tokens
        stored = session.get(NodeRow, "gpu-0").credential_hash
    assert stored and credential not in stored
    # the same agent, or its next incarnation, presents the credential: no new one
    again = _register(server, "gpu-0", "agent-2", credential)
    assert again.status_code == 200 and again.json()["credential"] is None
    for wrong in (None, "crc_not-the-one"):
        refused = _register(server, "gpu-0", "intruder", wrong)
        assert refused.status_code == 403, refused.text
        message = refused.json()["message"]
        assert "'gpu-0' belongs to another agent" in message
        assert "corral reset-node gpu-0" in message
    with server.ctx.sessions() as session:  # the refused ones changed nothing
        assert session.get(NodeRow, "gpu-0").agent_id == "agent-2"


def test_a_refused_agent_never_sees_the_nodes_tasks(server: Server) -> None:
    node = FakeHardwareAgent(server, "gpu-0")
    job_id = _running(server)
    assert [t["job_id"] for t in node.sync()["tasks"]] == [job_id]
    assert _register(server, "gpu-0", "intruder").status_code == 403
    # the owner keeps its node token, its task and its job
    node.sync([report(job_id, 0, "running", pid=7)])
    assert [t["job_id"] for t in node.sync()["tasks"]] == [job_id]
    assert server.client().get(job_id).attempt == 0
    # a node token of the name does not help another agent id either
    body = {"node": "gpu-0", "agent_id": "intruder", "tasks": [], "logs": []}
    assert node.http.post("/agent/sync", json=body).status_code == 409


def test_a_node_from_before_credentials_is_trusted_on_first_use(server: Server) -> None:
    node = FakeHardwareAgent(server, "gpu-0")
    with server.ctx.sessions.begin() as session:  # as the migration leaves an older node
        session.get(NodeRow, "gpu-0").credential_hash = None
    node.credential = None
    node.register()
    assert node.credential  # a new credential, now required
    assert _register(server, "gpu-0", "intruder").status_code == 403


def test_an_admin_resets_a_name_for_a_reinstalled_host(server: Server) -> None:
    node = FakeHardwareAgent(server, "gpu-0")
    job_id = _running(server)
    node.sync()
    node.sync([report(job_id, 0, "running", pid=7)])
    user = server.client().create_token("alice").token
    with pytest.raises(PermissionDeniedError, match="admin"):
        server.client(user).reset_node("gpu-0")

    runner = CliRunner()
    args = ["reset-node", "gpu-0", "--server", server.url, "--token", server.admin_token]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "node gpu-0 reset: lost" in result.output
    shown = server.client().get(job_id)  # lost as with a new agent incarnation: requeued
    assert shown.attempt == 1 and "reset by an admin" in " ".join(e.reason for e in shown.events)
    assert server.client().nodes()[0].state == "lost"
    # the old agent's node token is revoked: it must register again
    body = {"node": "gpu-0", "agent_id": node.agent_id, "tasks": [], "logs": []}
    refused = node.http.post("/agent/sync", json=body)
    assert refused.status_code == 401, refused.text
    # the reinstalled host registers afresh and receives the name's new credential
    fresh = _register(server, "gpu-0", "reinstalled")
    assert fresh.status_code == 200 and fresh.json()["credential"]
    assert server.client().nodes()[0].state == "ready"
    # ...which the old agent does not have
    assert _register(server, "gpu-0", node.agent_id, node.credential).status_code == 403
    audit = [(e.method, e.path, e.status) for e in server.client().audit()]
    assert ("POST", "/api/v1/nodes/gpu-0/reset", 200) in audit
    assert ("POST", "/api/v1/nodes/gpu-0/reset", 403) in audit
