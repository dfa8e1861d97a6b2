"""Abuse limits and idempotent submission over a real server, and the login CLI."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from corral.errors import ConflictError, LimitExceededError, ValidationError
from tests.integration.conftest import Server, start_server

CONFIG = """
queues:
  - name: default
  - name: tiny
    max_pending: 2
    max_pending_per_user: 1
limits:
  max_pending_per_user: 5
  max_request_bytes: 4KiB
"""
JOB = {"command": "true"}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server, uvicorn_server, thread = start_server(
        tmp_path_factory.mktemp("limits") / "home", config=CONFIG
    )
    try:
        yield server
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout=10)


def _user(server: Server, name: str) -> str:
    return server.client().create_token(name).token or ""


def test_pending_limits_per_user_and_per_queue(limited: Server) -> None:
    pat = limited.client(_user(limited, "pat"))
    for _ in range(5):
        pat.submit(JOB)
    with pytest.raises(LimitExceededError, match="pat has 5 \\(limit 5\\)"):
        pat.submit(JOB)
    tiny = {**JOB, "queue": "tiny"}
    quinn = limited.client(_user(limited, "quinn"))
    quinn.submit(tiny)
    with pytest.raises(LimitExceededError, match="quinn has in queue 'tiny' 1"):
        quinn.submit(tiny)
    limited.client(_user(limited, "ruth")).submit(tiny)
    answer = limited.http(_user(limited, "sam")).post("/jobs", json=tiny)
    assert answer.status_code == 429
    assert "queue 'tiny' has 2 (limit 2)" in answer.json()["message"]


def test_request_size_and_field_lengths(limited: Server) -> None:
    http = limited.http(limited.admin_token)
    big = http.post("/jobs", json={**JOB, "env": {"X": "x" * 5000}})
    assert big.status_code == 413 and big.json()["code"] == "too_large"
    chunked = http.post("/jobs", content=iter([b"{" + b" " * 3000, b" " * 3000 + b"}"]))
    assert chunked.status_code == 413
    long_name = http.post("/jobs", json={**JOB, "name": "n" * 254})
    assert long_name.status_code == 422 and long_name.json()["message"].startswith("name:")
    long_key = http.post("/jobs", json={**JOB, "env": {"K" * 1025: "v"}})
    assert long_key.status_code == 422 and "env" in long_key.json()["message"]
    many = http.post("/jobs", json={**JOB, "node_selector": {str(i): "" for i in range(65)}})
    assert many.status_code == 422


def test_idempotent_submission(limited: Server) -> None:
    token = _user(limited, "ida")
    http = limited.http(token)
    first = http.post("/jobs", json=JOB, headers={"Idempotency-Key": "k1"})
    again = http.post("/jobs", json=JOB, headers={"Idempotency-Key": "k1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    other = http.post("/jobs", json={"command": "false"}, headers={"Idempotency-Key": "k1"})
    assert other.status_code == 409 and "different manifest" in other.json()["message"]
    # the key is per user: another user's k1 is another job
    theirs = limited.http(_user(limited, "ivy")).post(
        "/jobs", json=JOB, headers={"Idempotency-Key": "k1"}
    )
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]

    def post(_: int) -> httpx.Response:
        with limited.http(token) as client:
            return client.post("/jobs", json=JOB, headers={"Idempotency-Key": "race"})

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(post, range(12)))
    assert sorted(a.status_code for a in answers) == [200] * 11 + [201]
    assert len({a.json()["id"] for a in answers}) == 1
    with pytest.raises(ConflictError):
        limited.client(token).submit({"command": "false"}, idempotency_key="race")
    assert len(limited.client(token).list()) == 2


class LoseFirstAnswer(httpx.HTTPTransport):
    """The network drops the answer to the first POST after the server handled it."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and not self.dropped:
            self.dropped = True
            response.read()
            response.close()
            raise httpx.ReadError("connection reset before the answer", request=request)
        return response


def test_sdk_retries_a_lost_submission_without_a_second_job(limited: Server) -> None:
    token = _user(limited, "rory")
    transport = LoseFirstAnswer()
    client = type(limited.client())(limited.url, token, transport=transport)
    job = client.submit(JOB)
    assert transport.dropped
    assert [j.id for j in limited.client(token).list()] == [job.id]


RATE = """
limits:
  submissions_per_second: 0.01
  submission_burst: 2
"""


@pytest.mark.server_options(config=RATE)
def test_submission_rate_is_limited_per_user(server: Server) -> None:
    rita = server.http(_user(server, "rita"))
    assert [rita.post("/jobs", json=JOB).status_code for _ in range(2)] == [201, 201]
    refused = rita.post("/jobs", json=JOB)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 90
    assert "rita may submit 0.01 job(s) per second" in refused.json()["message"]
    assert server.http(_user(server, "other")).post("/jobs", json=JOB).status_code == 201


def test_bad_limits_in_the_configuration_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="limits.max_pending_per_user"):
        start_server(tmp_path / "home", config="limits: {max_pending_per_user: -1}")


def _corral(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_SERVER", "CORRAL_TOKEN")}
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        env={**env, "CORRAL_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_login_stores_the_credential_and_audit_lists_calls(limited: Server, tmp_path: Path) -> None:
    home = tmp_path / "client-home"
    token = _user(limited, "lena")
    bad = _corral(home, "login", "--server", limited.url, "--token", "crl_nope")
    assert bad.returncode == 1 and "invalid or revoked API token" in bad.stderr
    assert "Traceback" not in bad.stderr and not (home / "token").exists()
    ok = _corral(home, "login", "--server", limited.url, "--token", token)
    assert ok.returncode == 0, ok.stderr
    assert "as lena (user)" in ok.stdout
    for name in ("token", "server"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600
    who = _corral(home, "whoami", "-o", "json")
    assert json.loads(who.stdout)["user"] == "lena"
    assert _corral(home, "submit", "--", "true").returncode == 0
    mine = json.loads(_corral(home, "token", "list", "-o", "json").stdout)["tokens"]
    assert {t["user"] for t in mine} == {"lena"}
    refused = _corral(home, "audit")
    assert refused.returncode == 1 and "admin" in refused.stderr
    admin = _corral(
        home,
        "audit",
        "--user",
        "lena",
        "--since",
        "1h",
        "-o",
        "json",
        "--token",
        limited.admin_token,
    )
    entries = json.loads(admin.stdout)["entries"]
    assert [(e["method"], e["path"], e["status"]) for e in entries] == [
        ("POST", "/api/v1/jobs", 201)
    ]
    table = _corral(home, "audit", "--limit", "5", "--token", limited.admin_token)
    assert table.returncode == 0 and "/api/v1/jobs" in table.stdout
