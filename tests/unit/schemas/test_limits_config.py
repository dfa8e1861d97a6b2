"""``limits:`` and per-queue ``users``/``max_pending`` in scheduler.yaml."""

from __future__ import annotations

import pytest

from corral.errors import ValidationError
from corral.scheduling.config import Limits
from corral.schemas.config import load_config
from corral.schemas.manifest import parse_manifest

YAML = """
queues:
  - name: team-a
    users: [alice, bob]
    max_pending: 10
    max_pending_per_user: 2
  - name: open
limits:
  max_pending_per_user: 100
  submissions_per_second: 5
  max_request_bytes: 64KiB
"""


def test_limits_and_allow_lists_are_read() -> None:
    config = load_config(YAML)
    team = config.queue("team-a")
    assert team.users == ("alice", "bob") and team.allows("bob") and not team.allows("eve")
    assert (team.max_pending, team.max_pending_per_user) == (10, 2)
    assert config.queue("open").users is None and config.queue("open").allows("eve")
    assert config.limits == Limits(
        max_pending_per_user=100, submissions_per_second=5.0, max_request_bytes=65536
    )
    assert load_config(None).limits == Limits()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("limits: {submissions_per_second: 0}", "limits.submissions_per_second"),
        ("limits: {max_request_bytes: 10}", "limits.max_request_bytes"),
        ("limits: {max_pending: 3}", "limits.max_pending"),
        ("queues: [{name: a, max_pending: -1}]", "max_pending"),
    ],
)
def test_bad_limits_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        load_config(text)


@pytest.mark.parametrize(
    "manifest",
    [
        {"command": "x", "name": "n" * 254},
        {"command": ["x" * 65_537]},
        {"command": ["x"] * 4097},
        {"command": "x", "env": {"K": "v" * 65_537}},
        {"command": "x", "workdir": "/" * 4097},
        {"command": "x", "priority": "p" * 65},
        {"command": "x", "priority": 2**40},
        {"command": "x", "resources": {"gpu_model": "m" * 254}},
        {"command": "x", "grace_period": {"seconds": 1}},
        {"command": "x", "resources": {"memory": [1]}},
    ],
    ids=[
        "name", "arg", "args", "env-value", "workdir", "priority-name", "priority-int",
        "gpu-model", "duration-type", "size-type",
    ],
)  # fmt: skip
def test_manifest_field_limits(manifest: dict) -> None:
    with pytest.raises(ValidationError):
        parse_manifest(manifest)
