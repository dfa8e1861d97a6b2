"""`corral server`'s containment flags: bad values are refused naming the flag."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from corral.cli.main import app
from corral.errors import ValidationError


def test_the_flags_are_offered() -> None:
    result = CliRunner().invoke(app, ["server", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for flag in ("--max-grace-period", "--log-cap", "--allow-root-jobs"):
        assert flag in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-grace-period", "soon"], "--max-grace-period: expected a duration"),
        (["--log-cap", "lots"], "--log-cap: expected a size"),
        (["--log-cap", "10"], "--log-cap: at least 1KB"),
    ],
)
def test_bad_values_are_refused(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["server", *args])
    assert isinstance(result.exception, ValidationError)
    assert result.exception.message.startswith(message)
