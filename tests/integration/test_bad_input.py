"""Bad input on a shared cluster (issue 14): NUL characters and absurd durations are
refused with a 422 naming the field on both databases, stored values never crash the
CLI, and users (not admins) are held to default submission limits."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import update
from typer.testing import CliRunner

from corral.cli.main import app
from corral.server.db.models import JobRow
from tests.integration.conftest import Server

JOB: dict[str, Any] = {"command": ["true"]}
NUL = "a\x00b"


NUL_FIELDS = [
    ({"name": NUL}, "name"),
    ({"queue": NUL}, "queue"),
    ({"command": NUL}, "command"),
    ({"command": ["run", NUL]}, "command"),
    ({"env": {NUL: "1"}}, "env"),
    ({"env": {"A": NUL}}, "env"),
    ({"workdir": NUL}, "workdir"),
    ({"node_selector": {NUL: "x"}}, "node_selector"),
    ({"node_selector": {"pool": NUL}}, "node_selector"),
    ({"priority": NUL}, "priority"),
    ({"resources": {"gpu_model": NUL}}, "resources.gpu_model"),
]


def test_nul_in_a_manifest_is_refused_naming_the_field(server: Server) -> None:
    with server.http(server.admin_token) as http:
        for change, field in NUL_FIELDS:  # one server for every case: the suite's time
            answer = http.post("/jobs", json={**JOB, **change})
            assert answer.status_code == 422, (field, answer.text)
            message = answer.json()["message"]
            assert message.startswith(f"{field}: ") and "NUL" in message, (field, message)


def test_nul_anywhere_else_is_refused(server: Server) -> None:
    with server.http(server.admin_token) as http:
        for method, path, body in (
            ("POST", "/tokens", {"user": NUL}),
            ("GET", "/jobs?queue=a%00b", None),
            ("GET", "/jobs?state=a%00b", None),
            ("GET", "/audit?user=a%00b", None),
            ("GET", "/events?entity=node&entity_id=a%00b", None),
            ("GET", "/nodes/a%00b", None),
            ("GET", "/nodes/a%00b/telemetry", None),
            ("POST", "/nodes/a%00b/drain", None),
            ("POST", "/nodes/a%00b/reset", None),
            ("POST", "/jobs/1/checkpoint", {"path": NUL}),
        ):
            answer = http.request(method, path, json=body)
            assert answer.status_code == 422, (path, answer.text)
            assert "NUL" in answer.json()["message"], (path, answer.text)
        audit = http.get("/audit").json()["entries"]  # the paths were recorded, NUL escaped
        assert any(e["path"] == "/api/v1/nodes/a\\x00b/drain" for e in audit)
    register = {"name": "n", "agent_id": "a", "address": "x", "cpus": 1, "memory": 1}
    with server.http(server.join_token) as http:
        for change in ({"labels": {"k": NUL}}, {"address": NUL}, {"credential": NUL}):
            answer = http.post("/agent/register", json={**register, **change})
            assert answer.status_code == 422 and "NUL" in answer.json()["message"]


ABSURD_DURATIONS = [
    ({"time_limit": "99999999999999999999d"}, "time_limit"),
    ({"time_limit": 1e308}, "time_limit"),
    ({"runtime_estimate": "1e308"}, "runtime_estimate"),
    ({"runtime_estimate": "367d"}, "runtime_estimate"),
    ({"grace_period": "400d"}, "grace_period"),
]


def test_absurd_durations_are_refused(server: Server) -> None:
    with server.http(server.admin_token) as http:
        for change, field in ABSURD_DURATIONS:
            answer = http.post("/jobs", json={**JOB, **change})
            assert answer.status_code == 422, (field, answer.text)
            assert answer.json()["message"].startswith(f"{field}: at most 366 days"), field


def test_a_duration_past_any_float_is_refused(server: Server) -> None:
    body = '{"command": "true", "grace_period": 1' + "0" * 400 + "}"
    with server.http(server.admin_token) as http:
        answer = http.post("/jobs", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["message"].startswith("grace_period: a duration must be a finite")


def test_show_and_jobs_never_crash_on_stored_values(server: Server) -> None:
    client = server.client()
    pending = client.submit({**JOB, "time_limit": "366d"})
    ended = client.submit(JOB)
    with server.ctx.sessions.begin() as session:
        session.execute(update(JobRow).where(JobRow.id == pending.id).values(estimated_start=1e308))
        session.execute(
            update(JobRow)
            .where(JobRow.id == ended.id)
            .values(state="failed", started_at=-1e300, ended_at=1e308, time_limit=1e308)
        )
    options = ["--server", server.url, "--token", server.admin_token]
    for args in (
        ["jobs", "--all"],
        ["show", str(pending.id)],
        ["show", str(ended.id)],
        ["show", str(ended.id), "-o", "json"],
    ):
        result = CliRunner().invoke(app, [*args, *options])
        assert result.exit_code == 0, (args, result.output, result.exception)
    shown = CliRunner().invoke(app, ["show", str(ended.id), *options]).output
    assert "1e+308 (epoch seconds)" in shown
    as_json = CliRunner().invoke(app, ["show", str(ended.id), "-o", "json", *options]).output
    assert json.loads(as_json)["ended_at"] == 1e308


def test_users_have_default_submission_limits_and_admins_do_not(server: Server) -> None:
    server.ctx.submissions.clock = lambda: 1000.0  # no refill while the test runs
    limits = server.ctx.config.limits
    assert (limits.submissions_per_second, limits.submission_burst) == (50.0, 500)
    for _ in range(500):  # the default burst, spent
        server.ctx.submissions.take("alice", limits)
    alice = server.http(server.client().create_token("alice").token)
    answer = alice.post("/jobs", json=JOB)
    assert answer.status_code == 429 and "burst 500" in answer.json()["message"]
    assert "Retry-After" in answer.headers
    for _ in range(500):
        server.ctx.submissions.take("root-admin", limits)
    admin = server.client(server.client().create_token("root-admin", role="admin").token)
    assert admin.submit(JOB).state == "pending"
