"""The ``corral`` command starts fast (issue 21): what it imports is held to a budget, and
the shortcuts ``main()`` takes answer exactly as the whole app does.

Module sets come from fresh interpreters, so that nothing a test imported before counts.
Sets, not times (no wall-clock limits in tests): ``bench/cli_start.py`` reports the times.
tests/e2e/test_cli_start.py checks ``submit``, ``jobs`` and ``show`` against a server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from corral.cli.main import app, only

# Never in the CLI's import graph: the control plane, the simulator, plotting, gRPC, torch.
SERVER_SIDE = (
    "fastapi",
    "sqlalchemy",
    "alembic",
    "starlette",
    "uvicorn",
    "corral.server",
    "corral.sim",
    "corral.scheduling",
    "matplotlib",
    "grpc",
    "torch",
)
# Only in the commands that use them: Rich (tables), httpx (the client: it brings click and
# Pygments with its own CLI), pydantic and YAML (the schemas).
ON_DEMAND = (
    "rich",
    "httpx",
    "httpcore",
    "click",
    "pygments",
    "pydantic",
    "yaml",
    "corral.client.client",
    "corral.schemas.api",
    "corral.schemas.manifest",
)


def modules_after(code: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The modules a fresh interpreter (with ``env``) holds after running ``code``."""
    script = (
        "import json, sys\n"
        f"{code}\n"
        "print(json.dumps(sorted(k for k, v in sys.modules.items() if v is not None)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def among(found: list[str], names: tuple[str, ...]) -> list[str]:
    """Those of ``found`` that are one of ``names`` or inside one of them."""
    return [m for m in found if any(m == n or m.startswith(n + ".") for n in names)]


def main_with(*argv: str) -> str:
    """Code that runs ``corral ARGV`` as the console script does."""
    return (
        f"sys.argv = ['corral', *{list(argv)!r}]\n"
        "from corral.cli.main import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
    )


def test_importing_the_cli_imports_nothing_heavy() -> None:
    found = modules_after("import corral.cli.main")
    assert among(found, (*SERVER_SIDE, *ON_DEMAND, "typer")) == []


def test_the_whole_app_imports_nothing_on_demand() -> None:
    """Every command module, and every command turned into Click's (as ``--help`` does)."""
    code = "from typer.main import get_command\nfrom corral.cli.main import app\nget_command(app)"
    found = modules_after(code)
    assert "corral.cli.jobs" in found and "corral.cli.daemons" in found
    assert among(found, (*SERVER_SIDE, *ON_DEMAND)) == []


def test_version_needs_no_typer() -> None:
    assert among(modules_after(main_with("--version")), (*SERVER_SIDE, *ON_DEMAND, "typer")) == []


def test_help_imports_nothing_on_demand() -> None:
    """``corral --help`` (a command's own ``--help`` has Typer import pydantic: it coerces
    parameters with it)."""
    assert among(modules_after(main_with("--help")), (*SERVER_SIDE, *ON_DEMAND)) == []


def test_a_job_manifest_is_checked_without_the_server_side() -> None:
    """``corral submit`` validates the manifest here (pydantic) before it sends it."""
    code = (
        "from corral.cli.jobs import build_manifest\n"
        "build_manifest(None, ['true'], {'gpus': 1}, [])"
    )
    found = modules_after(code)
    assert "corral.schemas.manifest" in found
    assert among(found, (*SERVER_SIDE, "rich", "httpx")) == []


def _paths(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [path] if path else []
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        paths += _paths(sub, (*path, name))
    return paths


PATHS = _paths(get_command(app))


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_the_app_of_one_command_answers_as_the_whole_app(path: tuple[str, ...]) -> None:
    """``main()`` runs ``corral NAME ...`` with an app of NAME alone: same help, same
    usage errors."""
    small = only(app, path[0])
    assert small is not None
    assert set(get_command(small).commands) == {path[0]}  # type: ignore[attr-defined]
    for args in ([*path, "--help"], [*path, "--no-such-option"]):
        expected = CliRunner().invoke(app, args, prog_name="corral", env={"COLUMNS": "80"})
        got = CliRunner().invoke(small, args, prog_name="corral", env={"COLUMNS": "80"})
        assert (got.exit_code, got.output) == (expected.exit_code, expected.output)


def test_a_name_that_is_no_command_gets_the_whole_app() -> None:
    assert only(app, "sumbit") is None
