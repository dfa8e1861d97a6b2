"""The times ``corral usage --since/--until`` accepts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral.cli.monitoring import parse_time
from corral.errors import ValidationError

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24h", NOW - 86400),
        ("90m", NOW - 5400),
        ("7d", NOW - 7 * 86400),
        ("1700000000", 1_700_000_000.0),
        ("2026-11-30T08:00:00+00:00", datetime(2026, 11, 30, 8, tzinfo=UTC).timestamp()),
        ("2026-11-30", datetime(2026, 11, 30).timestamp()),  # local midnight
    ],
)
def test_parse_time(text: str, expected: float) -> None:
    assert parse_time(text, NOW, "--since") == expected


def test_parse_time_error_names_the_option() -> None:
    with pytest.raises(ValidationError, match="--until: expected"):
        parse_time("yesterday", NOW, "--until")
