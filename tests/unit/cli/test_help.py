"""Every command and subcommand of ``corral`` answers ``--help`` (found from the app itself,
so new commands are covered without a change here), ``--version`` and shell completion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

import corral
from corral.cli.main import app


def command_paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """``path`` and the paths of every command below the Click ``command`` (a group has
    ``commands``; hidden ones included)."""
    paths = [path]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        paths += command_paths(sub, (*path, name))
    return paths


PATHS = command_paths(get_command(app))


def test_the_whole_tree_is_found() -> None:
    assert len(PATHS) > 30
    assert {("server",), ("agent",), ("token", "create"), ("node",)} <= set(PATHS)


@pytest.mark.parametrize("path", PATHS, ids=lambda path: " ".join(path) or "corral")
def test_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="corral", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    assert "usage:" in result.output.lower()


def test_version_from_the_installed_entry_point() -> None:
    script = Path(sys.executable).with_name("corral")  # the console script pip installed
    command = [str(script)] if script.exists() else [sys.executable, "-m", "corral"]
    result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"corral {corral.__version__}"


def test_shell_completion() -> None:
    script = CliRunner().invoke(app, ["--show-completion", "bash"], prog_name="corral")
    assert script.exit_code == 0 and "_corral_completion" in script.output
    env = {"_CORRAL_COMPLETE": "complete_bash", "COMP_WORDS": "corral serv", "COMP_CWORD": "1"}
    words = CliRunner().invoke(app, [], prog_name="corral", env=env)
    assert words.output.split() == ["server"]
