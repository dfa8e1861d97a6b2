"""Schemathesis against the OpenAPI schema of a real server: every operation, with valid
and invalid input, authenticated (admin) and not: never a 5xx, always a JSON error."""

from __future__ import annotations

import contextlib

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from corral.server.services.auth import TokenService
from tests.integration.conftest import Server
from tests.integration.protocol import FakeHardwareAgent

EXAMPLES = 8  # per operation and mode: bounded, so that the whole walk takes seconds


def test_no_operation_answers_a_server_error(server: Server) -> None:
    FakeHardwareAgent(server, "node-a")
    server.client().submit({"command": "true"})
    schema = schemathesis.openapi.from_url(f"{server.url}/api/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    # A server-sent-events stream never ends, so a call cannot wait for its answer; its
    # parameters are those of GET /events, fuzzed there.
    operations = [op for op in operations if not op.path.endswith("/events/stream")]
    failures: list[str] = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failures += _fuzz(server, operation, mode)
    assert not failures, "\n".join(failures[:20])


def _fuzz(server: Server, operation: object, mode: GenerationMode) -> list[str]:
    failures: list[str] = []

    @given(case=operation.as_strategy(generation_mode=mode))  # type: ignore[attr-defined]
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        # a fresh admin token each time: a generated DELETE /tokens/{id} may revoke it
        _, admin = TokenService(server.ctx).create("fuzzer", "admin")
        for auth in ({"Authorization": f"Bearer {admin}"}, {}):
            headers = {**(case.headers or {}), **auth}
            if "timeout" in (case.query or {}):  # long-poll: answer at once
                case.query["timeout"] = 0
            response = case.call(headers=headers, timeout=30)
            label = f"{case.operation.label} {mode.value} auth={bool(auth)}"
            if response.status_code >= 500:
                failures.append(f"{label}: {response.status_code} {response.text[:200]}")
            elif response.status_code >= 400 and "message" not in response.json():
                failures.append(f"{label}: {response.status_code} without a message")

    with contextlib.suppress(Unsatisfiable):  # no invalid input exists for some operations
        run()
    return failures
