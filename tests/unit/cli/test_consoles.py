"""The CLI's consoles print text as written: no emoji codes (``:m:`` in ``H:M:S``)."""

from __future__ import annotations

import subprocess
import sys

from corral.cli.common import console, err_console


def test_emoji_codes_are_not_rendered() -> None:
    for c in (console, err_console):
        with c.capture() as captured:
            c.print("H:M:S :smile: job :x:", highlight=False)
        assert captured.get() == "H:M:S :smile: job :x:\n"


def test_an_error_message_prints_as_written() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "corral", "sbatch", "-t", "forever", "--wrap", "true"],
        capture_output=True,
        text=True,
        env={"CORRAL_SERVER": "http://127.0.0.1:1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1
    assert "MIN, MIN:SEC, H:M:S, D-H, D-H:M or D-H:M:S" in result.stderr
