"""Whose account a job runs as, what its tasks are limited to and used, and what other
users see of it (issue 14), over the real server."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.errors import PermissionDeniedError, ValidationError
from tests.e2e.cluster import wait_for
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent, reading, report

MiB = 1 << 20


def placed(server: Server, job_id: int) -> None:
    wait_for(lambda: server.client().get(job_id).state == "running", 10, f"job {job_id} placed")


def cli(server: Server, *args: str, token: str | None = None) -> str:
    """Run ``corral ARGS`` in-process against the server; its output (exit code 0)."""
    options = ["--server", server.url, "--token", token or server.admin_token]
    result = CliRunner().invoke(app, [*args, *options])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_a_job_runs_as_its_tokens_unix_account(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    out = cli(server, "token", "create", "--user", "alice", "--unix-user", "alice2", "-o", "json")
    created = json.loads(out)
    assert (created["user"], created["unix_user"]) == ("alice", "alice2")
    bob = server.client().create_token("bob").token
    assert "alice2" in cli(server, "token", "list")
    assert [t.unix_user for t in server.client().tokens() if t.user == "alice"] == ["alice2"]

    manifest = {"command": "x", "resources": {"gpus": 1, "cpus": 4, "memory": "1GiB"}}
    alice_job = server.client(created["token"]).submit({**manifest, "tasks_per_node": 1})
    bob_job = server.client(bob).submit({"command": "x", "tasks_per_node": 2})
    assert alice_job.user == "alice" and alice_job.unix_user == "alice2"
    assert bob_job.unix_user == "bob"  # no mapping: the user's own name
    for job in (alice_job, bob_job):
        placed(server, job.id)
    tasks = {(t["job_id"], t["rank"]): t for t in node.sync()["tasks"]}
    alice_task = tasks[(alice_job.id, 0)]
    assert alice_task["user"] == "alice2"
    assert (alice_task["cpus"], alice_task["memory"]) == (4.0, 1 << 30)
    # tasks_per_node 2 without cpus or memory: no limits
    assert [(tasks[(bob_job.id, r)]["user"], tasks[(bob_job.id, r)]["memory"]) for r in (0, 1)] == [
        ("bob", None),
        ("bob", None),
    ]
    shown = cli(server, "show", str(alice_job.id), token=created["token"])
    assert re.search(r"User\s+alice\s", shown) and re.search(r"Runs as\s+alice2\s", shown)
    assert json.loads(cli(server, "show", str(alice_job.id), "-o", "json"))["unix_user"] == "alice2"


@pytest.mark.server_options(allow_root_jobs=False)
def test_jobs_as_root_are_refused_unless_allowed(server: Server) -> None:
    for user, unix_user in (("root", None), ("alice", "root")):
        token = server.client().create_token(user, unix_user=unix_user).token
        with pytest.raises(PermissionDeniedError) as refused:
            server.client(token).submit({"command": "x"})
        assert refused.value.status_code == 403
        message = refused.value.message
        assert "does not run jobs as root" in message and "--allow-root-jobs" in message
        assert "--unix-user" in message
    mapped = server.client().create_token("root", unix_user="ops").token
    assert server.client(mapped).submit({"command": "x"}).unix_user == "ops"


@pytest.mark.server_options(allow_root_jobs=True)
def test_an_admin_may_allow_jobs_as_root(server: Server) -> None:
    token = server.client().create_token("root").token
    assert server.client(token).submit({"command": "x"}).unix_user == "root"


def test_unix_account_names_are_checked(server: Server) -> None:
    with server.http(server.admin_token) as http:
        for bad in ("al ice", "-rf", "a/b", ""):
            answer = http.post("/tokens", json={"user": "alice", "unix_user": bad})
            assert answer.status_code == 422 and "unix_user" in answer.json()["message"]


@pytest.mark.server_options(max_grace_period=60.0)
def test_the_grace_period_is_capped(server: Server) -> None:
    client = server.client()
    assert client.submit({"command": "x", "grace_period": "1m"}).state == "pending"
    with pytest.raises(ValidationError) as refused:
        client.submit({"command": "x", "grace_period": "61s"})
    assert refused.value.status_code == 422
    assert refused.value.message.startswith("grace_period: 61s")
    assert "maximum of 60s" in refused.value.message


def test_task_usage_and_reasons_reach_show_and_usage(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a")
    client = server.client()
    job = client.submit({"command": "x", "resources": {"gpus": 1, "memory": "64MiB"}})
    placed(server, job.id)
    node.sync()
    node.sync([report(job.id, 0, "running", pid=7, started_at=1.0, peak_memory=10 * MiB)])
    node.sync([report(job.id, 0, "running", pid=7, peak_memory=5 * MiB, cpu_seconds=1.5)])
    reason = "out of memory: killed at its limit of 64 MiB"
    ended = report(job.id, 0, "exited", exit_code=137, ended_at=3.0, cpu_seconds=2.5, reason=reason)
    assert node.sync([ended], [])["acks"][0]["final"] is True
    done = client.get(job.id)
    assert done.state == "failed"
    assert done.reason == f"task 0 on node-a exited with code 137: {reason}"
    task = done.tasks[0]
    assert (task.peak_memory, task.cpu_seconds, task.reason) == (10 * MiB, 2.5, reason)
    shown = cli(server, "show", str(job.id))
    assert "PEAK MEM" in shown and "CPU TIME" in shown and "10.5MB" in shown
    assert "2.5s" in shown and "out of memory" in shown
    as_json = json.loads(cli(server, "show", str(job.id), "-o", "json"))
    assert as_json["tasks"][0]["peak_memory"] == 10 * MiB
    assert as_json["tasks"][0]["cpu_seconds"] == 2.5
    row = client.usage("job", since=0).rows[0]
    assert (row.cpu_seconds, row.peak_memory) == (2.5, 10 * MiB)
    table = cli(server, "usage", "--by", "job", "--since", "0")
    assert "CPU TIME" in table and "PEAK MEM" in table and "10.5MB" in table
    csv = cli(server, "usage", "--by", "job", "--since", "0", "-o", "csv")
    assert "cpu_seconds,peak_memory" in csv.splitlines()[0]


def test_a_task_that_could_not_start_says_why(server: Server) -> None:
    node = FakeHardwareAgent(server, "gpu-0")
    client = server.client()
    job = client.submit({"command": "x"})
    placed(server, job.id)
    node.sync()
    why = "no Unix account 'alice' on node gpu-0"
    node.sync([report(job.id, 0, "exited", reason=why)])
    assert client.get(job.id).reason == f"task 0 on gpu-0 failed: {why}"


def test_nodes_show_job_ids_only_to_their_owners(server: Server) -> None:
    node = FakeHardwareAgent(server, "node-a", gpus=2)
    alice = server.client(server.client().create_token("alice").token)
    bob = server.client(server.client().create_token("bob").token)
    mine = alice.submit({"command": "x", "resources": {"gpus": 1}})
    theirs = bob.submit({"command": "x", "resources": {"gpus": 1}})
    for job in (mine, theirs):
        placed(server, job.id)
    node.sync(gpus=[reading(0, 50), reading(1, 50)])
    seen = alice.nodes()[0]
    assert seen.jobs == [mine.id] and seen.gpus_used == 2  # the use counts, the name does not
    assert sorted(j for d in seen.devices for j in d.used_by) == [mine.id]
    with server.http(alice.token) as http:  # GET /nodes/{name} answers the same
        one = http.get("/nodes/node-a").json()
    assert one["jobs"] == [mine.id]
    assert sorted(j for d in one["devices"] for j in d["used_by"]) == [mine.id]
    admin = server.client().nodes()[0]
    assert admin.jobs == sorted([mine.id, theirs.id])
    named = {j for s in bob.node_telemetry("node-a") for j in s.job_ids}
    assert named == {theirs.id}
    assert "node-a" in cli(server, "nodes", token=bob.token)
