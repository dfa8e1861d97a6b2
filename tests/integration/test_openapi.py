"""The OpenAPI document tells the truth: every error a route can give, in the one error
shape the server answers; stable camelCase operation ids; the event stream as
``text/event-stream``. The document is read as built, then compared with what a real
server answers (schemathesis: documented status, content type, headers and body)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.errors import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from corral.schemas.api import ErrorOut
from corral.server.app import API_PREFIX, build_context, create_app
from corral.server.context import ServerSettings
from corral.server.openapi import ERRORS, operation_id
from corral.server.routers import jobs
from corral.server.services.auth import TokenService
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent

Document = dict[str, Any]
ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
STREAM = f"{API_PREFIX}/events/stream"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES = 6  # per operation, mode and credential: bounded, so the walk takes seconds
CAMEL = re.compile(r"^[a-z]+(?:[A-Z0-9][a-z0-9]*)*$")
# Client code and generated SDKs name operations by these: renaming one breaks them.
OPERATION_IDS = {
    "submitJob", "listJobs", "getJob", "getJobAdvice", "cancelJob", "holdJob", "releaseJob",
    "preemptJob", "reportCheckpoint", "getJobLogs", "getJobTelemetry",
    "createStep", "listSteps", "getStep", "cancelStep",
    "getHealth", "listNodes", "getNode", "drainNode", "undrainNode", "resetNode",
    "giveNodeNotice", "getNodeTelemetry", "listPools", "listQueues",
    "createToken", "listTokens", "revokeToken", "whoAmI", "listAudit",
    "registerNode", "syncNode", "watchNode",
    "getUsage", "getMetrics", "listEvents", "streamEvents",
}  # fmt: skip


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> Document:
    home = tmp_path_factory.mktemp("openapi") / "home"
    ctx = build_context(ServerSettings(db_url=f"sqlite:///{home / 'corral.db'}", home=home))
    return create_app(ctx, run_loop=False).openapi()


def _operations(document: Document) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def test_operation_ids_are_camel_case_unique_and_stable(document: Document) -> None:
    ids = [op.get("operationId", "") for _, _, op in _operations(document)]
    assert all(CAMEL.match(i) for i in ids), [i for i in ids if not CAMEL.match(i)]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert set(ids) >= OPERATION_IDS, sorted(OPERATION_IDS - set(ids))
    # derived from the route's function, not its path: the same under another prefix
    moved = FastAPI(generate_unique_id_function=operation_id)
    moved.include_router(jobs.router, prefix="/elsewhere/v9")
    assert {op["operationId"] for _, _, op in _operations(moved.openapi())} <= set(ids)


def test_every_error_answer_is_the_error_schema(document: Document) -> None:
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    fields = {"code", "message"}  # server/errors.py, and the 413 of server/audit.py
    assert set(schemas["ErrorOut"]["required"]) == set(ErrorOut.model_fields) == fields
    for method, path, op in _operations(document):
        for status, response in op["responses"].items():
            if int(status) >= 400:
                assert response["content"] == ERROR_CONTENT, (method, path, status)
                assert response["description"] == ERRORS[int(status)], (method, path, status)


def test_routes_declare_the_errors_their_code_can_give(document: Document) -> None:
    """The statuses a route's dependencies, parameters and the middleware imply."""
    for method, path, op in _operations(document):
        declared = {int(s) for s in op["responses"] if int(s) >= 400}
        implied = set()
        if op.get("security"):  # a token: missing or bad, the wrong kind, its lookup
            implied |= {401, 403, 503}
        if "requestBody" in op:  # a JSON body: unreadable, invalid
            implied |= {400, 422}
        params = op.get("parameters", [])
        if params:
            implied.add(422)
        if any(p["in"] == "path" for p in params):  # a job, node, token or step looked up
            implied.add(404)
        if method != "GET" and path.startswith(f"{API_PREFIX}/") and "/agent/" not in path:
            implied.add(413)  # the request size limit (server.audit.BodyLimitMiddleware)
        assert implied <= declared, (method, path, sorted(implied - declared))
        if not op.get("security"):
            assert not declared & {401, 403}, (method, path)
        if method == "GET" or "/agent/" in path:
            assert 413 not in declared, (method, path)
        extra = declared - implied  # what the services raise: by the route's own list
        assert extra <= {404, 409, 429}, (method, path, sorted(extra))
    limited = {op["operationId"] for _, _, op in _operations(document) if "429" in op["responses"]}
    assert limited == {"submitJob", "createStep"}  # the only routes that spend a limit


def test_the_event_stream_is_documented_as_server_sent_events(document: Document) -> None:
    ok = document["paths"][STREAM]["get"]["responses"]["200"]
    assert set(ok["content"]) == {"text/event-stream"}
    item = ok["content"]["text/event-stream"]["itemSchema"]
    assert item["properties"]["data"]["contentSchema"] == {"$ref": "#/components/schemas/EventItem"}
    assert "Last-Event-ID" in ok["description"] and "keep-alive" in ok["description"]
    metrics = document["paths"]["/metrics"]["get"]["responses"]["200"]
    assert set(metrics["content"]) == {"text/plain"}
    not_json = [
        (m, p)
        for m, p, op in _operations(document)
        if (p, m) not in ((STREAM, "GET"), ("/metrics", "GET"))
        and any(set(r.get("content", {})) != {"application/json"} for r in op["responses"].values())
    ]
    assert not not_json  # every other answer is JSON


@pytest.mark.parametrize("backend", ["sqlite"])  # the document does not depend on it
def test_every_answer_matches_the_document(server: Server) -> None:
    """Every operation, with valid and invalid input, as an admin, a user and anonymous."""
    FakeHardwareAgent(server, "node-a")
    server.client().submit({"command": "true"})
    schema = _schema(server)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.definition.raw["operationId"] for op in operations} >= OPERATION_IDS
    failures: list[str] = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failures += _walk(server, operation, mode)
    assert not failures, "\n\n".join(failures[:10])


RATE = """
limits:
  submissions_per_second: 0.01
  submission_burst: 1
"""


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.server_options(config=RATE)
def test_each_kind_of_refusal_is_documented(server: Server) -> None:
    """The refusals a random walk seldom reaches, forced: each answer as documented."""
    schema = _schema(server)
    _, user = TokenService(server.ctx).create("rita", "user")
    admin, rita = server.http(server.admin_token), server.http(user)
    job, as_json = {"command": "true"}, {"Content-Type": "application/json"}
    first = rita.post("/jobs", json=job, headers={"Idempotency-Key": "k"})
    answers = {
        "POST /jobs": [
            first,
            rita.post("/jobs", json=job, headers={"Idempotency-Key": "k"}),  # 200: replayed
            rita.post("/jobs", json={"command": "x"}, headers={"Idempotency-Key": "k"}),  # 409
            rita.post("/jobs", json=job),  # 429, with Retry-After
            admin.post("/jobs", json={"command": "true", "nodes": 0}),  # 422
            admin.post("/jobs", json={"command": "x" * (2 << 20)}),  # 413
            admin.post("/jobs", content=b'"\xff"', headers=as_json),  # 400: not UTF-8
            server.http().post("/jobs", json=job),  # 401
            server.http(server.join_token).post("/jobs", json=job),  # 403
        ],
        "POST /jobs/{job_id}/release": [admin.post(f"/jobs/{first.json()['id']}/release")],
        "GET /jobs/{job_id}": [admin.get("/jobs/999999"), admin.get("/jobs/x")],
        "POST /tokens": [rita.post("/tokens", json={"user": "x"})],
        "DELETE /tokens/{token_id}": [admin.delete("/tokens/999999")],
    }
    statuses = [a.status_code for a in answers["POST /jobs"]]
    assert statuses == [201, 200, 409, 429, 422, 413, 400, 401, 403]
    assert int(answers["POST /jobs"][3].headers["Retry-After"]) >= 1
    assert [a[0].status_code for a in list(answers.values())[1:]] == [409, 404, 403, 404]
    failures = [
        problem
        for label, replies in answers.items()
        for reply in replies
        if (problem := _conformance(schema, label, reply))
    ]
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_event_stream_answers_as_documented(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    server.client().submit({"command": "true"})
    case = _schema(server)[STREAM]["GET"].Case(query={"since_id": 0})
    response = case.call(headers=_auth(server.admin_token), timeout=1)
    assert response.headers["content-type"][0].startswith("text/event-stream")
    assert response.text.startswith("retry: 2000\n\n") and "\nid: " in response.text
    case.validate_response(response, checks=CHECKS)  # each event: id, and EventItem as data


def _schema(server: Server) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(f"{server.url}{API_PREFIX}/openapi.json")


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _conformance(schema: schemathesis.BaseSchema, label: str, reply: httpx.Response) -> str:
    """Why ``reply`` to the operation ``label`` (METHOD PATH) is not as documented; ""."""
    method, path = label.split(" ", 1)
    case = schema[API_PREFIX + path][method].Case()
    try:
        case.validate_response(reply, checks=CHECKS)
    except FailureGroup as exc:
        return f"{label} {reply.status_code}: {exc}"
    return ""


def _walk(server: Server, operation: Any, mode: GenerationMode) -> list[str]:
    failures: list[str] = []
    stream = operation.path == STREAM

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        # fresh tokens each time: a generated DELETE /tokens/{id} may revoke one
        tokens = TokenService(server.ctx)
        admin, user = tokens.create("walker", "admin")[1], tokens.create("user", "user")[1]
        for who, token in (("admin", admin), ("user", user), ("anonymous", None)):
            headers = {**(case.headers or {}), **_auth(token)}
            if "timeout" in (case.query or {}):  # long-poll: answer at once
                case.query["timeout"] = 0
            # a stream never ends: read what it sends in half a second
            response = case.call(headers=headers, timeout=0.5 if stream else 30)
            try:
                case.validate_response(response, checks=CHECKS, headers=headers)
            except FailureGroup as exc:
                failures.append(f"{case.operation.label}, {mode.value}, {who}: {exc}")

    with contextlib.suppress(Unsatisfiable):  # no invalid input exists for some operations
        run()
    return failures
