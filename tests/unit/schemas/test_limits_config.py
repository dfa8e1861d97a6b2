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
        max_pending_per_user=100,
        submissions_per_second=5.0,
        submission_burst=None,  # a rate set alone: a burst of that rate
        max_request_bytes=65536,
        configured=frozenset(
            {"max_pending_per_user", "submissions_per_second", "max_request_bytes"}
        ),
    )
    assert load_config(None).limits == Limits()


def test_default_limits_bind_users_and_configured_ones_bind_admins_too() -> None:
    defaults = load_config(None).limits
    assert (defaults.max_pending_per_user, defaults.submissions_per_second) == (10_000, 50.0)
    assert defaults.submission_burst == 500 and defaults.for_caller(admin=False) == defaults
    admin = defaults.for_caller(admin=True)
    assert admin.max_pending_per_user is admin.submissions_per_second is None
    assert admin.submission_burst is None
    configured = load_config(YAML).limits.for_caller(admin=True)
    assert (configured.max_pending_per_user, configured.submissions_per_second) == (100, 5.0)
    unlimited = load_config("limits: {max_pending_per_user: null}").limits
    assert unlimited.max_pending_per_user is None and unlimited.submissions_per_second == 50.0


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
