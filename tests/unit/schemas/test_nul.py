"""Every request and file schema refuses NUL characters, naming the field (issue 14)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError as PydanticValidationError

from corral.errors import ValidationError
from corral.schemas.agent import RegisterRequest, SyncRequest
from corral.schemas.api import CheckpointIn, TokenCreate
from corral.schemas.common import describe_errors, nul_problem
from corral.schemas.config import load_config

REGISTER = {"name": "n", "agent_id": "a", "address": "x", "cpus": 1, "memory": 1}
SYNC = {"node": "n", "agent_id": "a"}


@pytest.mark.parametrize(
    ("model", "data", "field"),
    [
        (RegisterRequest, {**REGISTER, "labels": {"k\0": "v"}}, "labels"),
        (RegisterRequest, {**REGISTER, "network": ["a", "b\0"]}, "network"),
        (RegisterRequest, {**REGISTER, "credential": "c\0"}, "credential"),
        (
            SyncRequest,
            {**SYNC, "tasks": [{"job_id": 1, "attempt": 0, "rank": 0, "state": "x\0"}]},
            "tasks.0.state",
        ),
        (
            SyncRequest,
            {
                **SYNC,
                "tasks": [
                    {"job_id": 1, "attempt": 0, "rank": 0, "state": "exited", "reason": "\0"}
                ],
            },
            "tasks.0.reason",
        ),
        (TokenCreate, {"user": "al\0ice"}, "user"),
        (CheckpointIn, {"path": "/a\0"}, "path"),
    ],
)
def test_nul_is_refused_naming_the_field(model: type, data: dict, field: str) -> None:
    with pytest.raises(PydanticValidationError) as refused:
        model.model_validate(data)
    message = describe_errors(refused.value)
    assert message.startswith(f"{field}: ") and "NUL" in message


def test_nul_in_the_scheduler_config_is_refused() -> None:
    with pytest.raises(ValidationError, match="queues.0.name: must not contain a NUL"):
        load_config('queues: [{name: "a\\0b"}]')


def test_nested_values_are_walked() -> None:
    assert (
        nul_problem({"a": ["x", {"b": "y\0"}]})
        == "'a': 'b': must not contain a NUL character (\\x00)"
    )
    assert nul_problem({"a": ["x"], "b": 1}) is None
