"""The ``corral`` command: assembles the sub-apps and turns errors into one-line messages."""

from __future__ import annotations

import sys

import typer
from rich.markup import escape

import corral
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
from corral.cli.common import err_console
from corral.errors import CorralError

app = typer.Typer(
    name="corral",
    help="Corral: a workload manager for GPU and TPU clusters.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion, --show-completion (bash, zsh, fish)
    pretty_exceptions_enable=False,
    # Help is plain text, never parsed as Rich markup: a help text such as "AGE[/RES]" or
    # "[TYPE:]N" would otherwise lose its brackets or crash `--help` (typer >= 0.12 parses
    # markup by default). Sub-apps inherit this from the root app.
    rich_markup_mode=None,
    context_settings={"max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        print(f"corral {corral.__version__}")
        raise typer.Exit()


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


def main() -> None:
    try:
        app()
    except CorralError as exc:
        err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
