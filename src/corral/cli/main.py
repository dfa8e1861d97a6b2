"""The ``corral`` command: assembles the sub-apps and turns errors into one-line messages.

Built to start fast (issue 21): importing this module imports no Typer, Rich, httpx or
pydantic. ``app``, the whole Typer app, is assembled on first use (``build_app``);
``main()`` answers ``--version`` without it and, for ``corral COMMAND ...``, has Typer
build that one command rather than every command of the tree. The command modules import
Rich, the client (httpx) and the schemas (pydantic) inside the commands that use them
(tests/unit/cli/test_import_budget.py holds them to it).
"""

from __future__ import annotations

import copy
import os
import sys
from functools import cache
from typing import TYPE_CHECKING, Any

import corral

if TYPE_CHECKING:
    import typer


def _version(value: bool) -> None:
    if value:
        import typer

        print(f"corral {corral.__version__}")
        raise typer.Exit()


@cache
def build_app() -> typer.Typer:
    """The ``corral`` app: every command and group of the sub-apps (built once)."""
    import typer

    from corral.cli import (
        auth,
        cluster,
        daemons,
        demo,
        jobs,
        monitoring,
        pools,
        run,
        sbatch,
        sim,
        steps,
        tokens,
    )

    app = typer.Typer(
        name="corral",
        help="Corral: a workload manager for GPU and TPU clusters.",
        no_args_is_help=True,
        add_completion=True,  # --install-completion, --show-completion (bash, zsh, fish)
        pretty_exceptions_enable=False,
        # Help is plain text, never parsed as Rich markup: a help text such as "AGE[/RES]"
        # or "[TYPE:]N" would otherwise lose its brackets or crash `--help` (typer >= 0.12
        # parses markup by default). Sub-apps inherit this from the root app.
        rich_markup_mode=None,
        context_settings={"max_content_width": 100},
    )

    @app.callback()
    def _root(
        version: bool = typer.Option(
            False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ) -> None:
        """Corral: a workload manager for GPU and TPU clusters."""

    for sub in (
        jobs.app,
        run.app,
        sbatch.app,
        cluster.app,
        daemons.app,
        auth.app,
        monitoring.app,
        sim.app,
        demo.app,
        pools.app,
    ):
        app.registered_commands += sub.registered_commands
    app.add_typer(tokens.app, name="token")
    app.add_typer(steps.app, name="step")
    app.add_typer(pools.node_app, name="node")
    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # ``from corral.cli.main import app``: the whole app
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def only(app: typer.Typer, name: str) -> typer.Typer | None:
    """``app`` (its settings, options and callback) with only its command or group ``name``;
    None when it has none of that name."""
    from typer.main import get_command_name

    small = copy.copy(app)
    small.registered_commands = [
        c
        for c in app.registered_commands
        if c.callback is not None and (c.name or get_command_name(c.callback.__name__)) == name
    ]
    small.registered_groups = [g for g in app.registered_groups if g.name == name]
    return small if small.registered_commands or small.registered_groups else None


def app_for(args: list[str]) -> typer.Typer:
    """The app to run ``corral ARGS`` with. Typer turns every command of an app into a
    Click command before it parses anything (about 50 ms for corral's): when ARGS start
    with a command's name, an app of that command alone, which parses and answers exactly
    as the whole app does. The whole app for the rest: options first (``--help``), no
    command, a name that is none (Click suggests one), shell completion."""
    app = build_app()
    if not args or args[0].startswith("-") or any(k.endswith("_COMPLETE") for k in os.environ):
        return app
    return only(app, args[0]) or app


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:  # as the app answers it, without building the app
        print(f"corral {corral.__version__}")
        return
    # httpx imports its own command-line tool (click, Rich and Pygments: ~60 ms) whenever
    # they are installed, and Typer installs them; corral never runs it. A None entry makes
    # that import fail, and httpx falls back to a stub (issue 21).
    sys.modules.setdefault("httpx._main", None)  # type: ignore[assignment]
    from corral.cli.common import err_console
    from corral.errors import CorralError

    try:
        app_for(args)()
    except CorralError as exc:
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
