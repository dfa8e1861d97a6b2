"""Users, roles and credentials over a real server: who may see and do what.

The route walk covers every operation the app declares (its OpenAPI schema, which FastAPI
builds from the app's routes), so new endpoints are checked without changing this file."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.errors import AuthenticationError, NotFoundError, PermissionDeniedError
from corral.server.app import build_context
from corral.server.context import ServerSettings
from corral.server.services.auth import TokenService, hash_secret, job_token
from corral.server.services.auth_cache import TokenCache
from tests.integration.conftest import Server, start_server
from tests.integration.protocol import FakeHardwareAgent
from tests.unit.server.test_credentials import FakeClock

CONFIG = """
queues:
  - name: default
  - name: restricted
    users: [alice]
"""
PUBLIC = {"/api/v1/health"}
JOB_TOKEN_ROUTES = {  # what a job's own token may call besides its checkpoint report
    "/api/v1/jobs/{job_id}/logs",
    "/api/v1/jobs/{job_id}/steps",
    "/api/v1/jobs/{job_id}/steps/{step}",
    "/api/v1/jobs/{job_id}/steps/{step}/cancel",
}
JOB = {"command": "true"}


@dataclass
class Tenants:
    server: Server
    alice: str
    bob: str
    revoked: str
    node: str
    alice_job: int
    alice_token_id: int
    routes: list[tuple[str, str]]  # (method, path template) of every API endpoint


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    server, uvicorn_server, thread = start_server(
        tmp_path_factory.mktemp("auth") / "home", config=CONFIG
    )
    admin = server.client()
    alice = admin.create_token("alice")
    bob = admin.create_token("bob").token
    revoked = admin.create_token("carol")
    admin.revoke_token(revoked.id)
    agent = FakeHardwareAgent(server, "node-a")
    job = server.client(alice.token).submit(JOB)
    try:
        node = agent.http.headers["Authorization"].split()[1]
        # every operation the app declares (FastAPI builds its schema from its routes)
        paths = uvicorn_server.config.app.openapi()["paths"]
        routes = [(m.upper(), p) for p, ops in paths.items() for m in ops]
        yield Tenants(server, alice.token, bob, revoked.token, node, job.id, alice.id, routes)
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout=10)


def test_users_see_and_act_on_their_own_jobs_only(tenants: Tenants) -> None:
    s = tenants.server
    alice, bob, admin = s.client(tenants.alice), s.client(tenants.bob), s.client()
    job = tenants.alice_job
    for act in (bob.get, bob.cancel, bob.preempt, bob.logs, bob.advice, bob.checkpoint):
        with pytest.raises(NotFoundError, match=f"no job with id {job}"):
            act(job)
    assert [j.id for j in alice.list()] == [job]
    assert bob.list() == []
    bob_job = bob.submit(JOB).id
    assert {j.id for j in admin.list()} >= {job, bob_job}
    assert alice.get(job).user == "alice" and admin.get(bob_job).user == "bob"
    assert bob.cancel(bob_job).state == "cancelled"
    assert bob.list(all=True)[0].id == bob_job


def test_users_see_only_their_own_jobs_in_events_usage_and_telemetry(tenants: Tenants) -> None:
    s = tenants.server
    bob, admin = s.client(tenants.bob), s.client()
    job = str(tenants.alice_job)
    bob_job = str(bob.submit(JOB).id)
    admin_events = {(e.entity, e.entity_id) for e in admin.events(since_id=0, limit=1000)}
    bob_events = {(e.entity, e.entity_id) for e in bob.events(since_id=0, limit=1000)}
    assert {("job", job), ("job", bob_job)} <= admin_events
    assert ("job", bob_job) in bob_events and ("job", job) not in bob_events
    assert {r.key for r in admin.usage(by="job").rows} >= {job, bob_job}
    bob_rows = {r.key for r in bob.usage(by="job").rows}
    assert bob_job in bob_rows and job not in bob_rows
    assert {r.key for r in bob.usage(by="user").rows} == {"bob"}
    with pytest.raises(NotFoundError):
        bob.job_telemetry(int(job))


def test_queue_allow_list(tenants: Tenants) -> None:
    s = tenants.server
    restricted = {**JOB, "queue": "restricted"}
    with pytest.raises(PermissionDeniedError, match="bob may not submit to queue 'restricted'"):
        s.client(tenants.bob).submit(restricted)
    assert s.client(tenants.alice).submit(restricted).queue == "restricted"
    assert s.client().submit(restricted).queue == "restricted"  # admins may use any queue


def test_whoami_and_users_manage_their_own_tokens(tenants: Tenants) -> None:
    s = tenants.server
    alice = s.client(tenants.alice)
    who = alice.whoami()
    assert (who.user, who.role, who.token_id) == ("alice", "user", tenants.alice_token_id)
    assert s.client(tenants.node).whoami().node == "node-a"
    spare = s.client().create_token("alice")
    assert {t.user for t in alice.tokens()} == {"alice"}
    assert len(s.client().tokens()) > len(alice.tokens())
    bob_token = s.client(tenants.bob).whoami().token_id
    with pytest.raises(NotFoundError):
        alice.revoke_token(bob_token)
    assert alice.revoke_token(spare.id).revoked_at is not None
    assert s.http(spare.token).get("/whoami").status_code == 401
    with pytest.raises(PermissionDeniedError):
        alice.create_token("mallory", "admin")


def _routes(tenants: Tenants) -> list[tuple[str, str, str]]:
    """(method, template, concrete path) of every API endpoint, with real ids filled in."""
    values = {"job_id": str(tenants.alice_job), "name": "node-a", "step": "1"}
    values["token_id"] = str(tenants.alice_token_id)
    found = []
    for method, template in tenants.routes:
        path = re.sub(r"{(\w+)}", lambda m: values[m.group(1)], template)
        found.append((method, template, path))
    assert len(found) >= 20
    return found


def _call(tenants: Tenants, token: str | None, method: str, path: str) -> int:
    http = tenants.server.http(token)
    query = {"node": "node-a", "timeout": 0}
    body = {} if method in ("POST", "PUT", "PATCH") else None
    url = tenants.server.url + path  # absolute: some endpoints (/metrics) are outside /api/v1
    return http.request(method, url, params=query, json=body).status_code


def test_every_endpoint_refuses_missing_and_revoked_tokens(tenants: Tenants) -> None:
    for method, template, path in _routes(tenants):
        if template in PUBLIC:
            continue
        assert _call(tenants, None, method, path) == 401, (method, template)
        assert _call(tenants, tenants.revoked, method, path) == 401, (method, template)
        assert _call(tenants, "crl_forged", method, path) == 401, (method, template)


def test_every_job_endpoint_hides_another_users_job(tenants: Tenants) -> None:
    job_routes = [r for r in _routes(tenants) if "{job_id}" in r[1]]
    assert len(job_routes) >= 6
    for method, template, path in job_routes:
        assert _call(tenants, tenants.bob, method, path) == 404, (method, template)


def test_node_and_job_credentials_cannot_use_user_endpoints(tenants: Tenants) -> None:
    key = tenants.server.ctx.job_key
    own_job_token = job_token(key, tenants.alice_job, 0)
    for method, template, path in _routes(tenants):
        if template in PUBLIC:
            continue
        node_status = _call(tenants, tenants.node, method, path)
        if template in ("/api/v1/agent/sync", "/api/v1/agent/watch"):
            assert node_status not in (401, 403), (method, template, node_status)
        elif template != "/api/v1/whoami":
            assert node_status == 403, (method, template, node_status)
        job_status = _call(tenants, own_job_token, method, path)
        if template == "/api/v1/jobs/{job_id}/checkpoint":  # accepted (409 unless it runs)
            assert job_status in (200, 409), job_status
        elif template in JOB_TOKEN_ROUTES:  # its logs and steps (no step 1 here: 404)
            assert job_status in (200, 404, 422), (method, template, job_status)
        else:
            assert job_status == 403, (method, template, job_status)


def test_job_token_of_another_attempt_is_refused(tenants: Tenants) -> None:
    s = tenants.server
    url = f"/jobs/{tenants.alice_job}/checkpoint"
    wrong_attempt = job_token(s.ctx.job_key, tenants.alice_job, 1)
    answer = s.http(wrong_attempt).post(url, json={})
    assert answer.status_code == 403 and "current attempt is 0" in answer.json()["message"]
    assert (
        s.http(job_token(b"another key", tenants.alice_job, 0)).post(url, json={}).status_code
        == 401
    )


def test_audit_records_who_what_and_outcome(tenants: Tenants) -> None:
    s = tenants.server
    bob = s.client(tenants.bob)
    job = bob.submit(JOB).id
    s.http(tenants.bob).post(f"/jobs/{tenants.alice_job}/cancel")  # refused: 404
    s.http().post("/jobs", json=JOB)  # unauthenticated: 401
    entries = s.client().audit(user="bob", limit=1000)
    bob_id = bob.whoami().token_id
    submitted = [e for e in entries if e.path == "/api/v1/jobs" and e.target == str(job)]
    assert len(submitted) == 1
    assert (submitted[0].role, submitted[0].token_id, submitted[0].status) == ("user", bob_id, 201)
    refused = [e for e in entries if e.target == str(tenants.alice_job)]
    assert refused[-1].status == 404 and refused[-1].method == "POST"
    anonymous = [e for e in s.client().audit(limit=10_000) if e.user is None]
    assert anonymous and anonymous[-1].status == 401
    assert all(e.at >= entries[0].at for e in entries)
    assert not [e for e in s.client().audit(limit=10_000) if e.path == "/api/v1/agent/sync"]
    with pytest.raises(PermissionDeniedError):
        bob.audit()


def test_join_token_registers_nodes_only(tenants: Tenants) -> None:
    s = tenants.server
    assert s.http(s.join_token).get("/whoami").json()["role"] == "join"
    assert s.http(s.join_token).post("/jobs", json=JOB).status_code == 403
    assert s.http(s.join_token).post("/agent/sync", json={}).status_code == 403


def test_a_revoked_token_is_refused_at_once_though_it_was_cached(tenants: Tenants) -> None:
    s = tenants.server
    spare = s.client().create_token("bob")
    assert s.http(spare.token).get("/whoami").status_code == 200  # verified: now cached
    assert s.ctx.tokens.get(hash_secret(spare.token)) is not None
    s.client().revoke_token(spare.id)
    assert s.http(spare.token).get("/whoami").status_code == 401
    assert s.http(spare.token).post("/jobs", json=JOB).status_code == 401


def test_a_revocation_on_another_replica_takes_effect_within_the_ttl(tmp_path: Path) -> None:
    """Two replicas (contexts) on one database; this one caches tokens for 5 s."""
    settings = ServerSettings(db_url=f"sqlite:///{tmp_path / 'corral.db'}", home=tmp_path)
    here, there = build_context(settings), build_context(settings)
    clock = FakeClock()
    here.tokens = TokenCache(ttl=5.0, timer=clock)
    row, secret = TokenService(there).create("bob", "user")
    assert TokenService(here).verify(secret).id == row.id  # cached here
    TokenService(there).revoke(row.id)
    assert TokenService(here).verify(secret).id == row.id  # still trusted: within the TTL
    clock.now += 5.0
    with pytest.raises(AuthenticationError):
        TokenService(here).verify(secret)
    with pytest.raises(AuthenticationError):  # an unknown or revoked secret is not cached
        TokenService(here).verify(secret)
