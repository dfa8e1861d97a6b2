"""``corral sbatch``: submit a Slurm batch script unchanged (SPEC section 9).

Options come from the script's ``#SBATCH`` lines and the command line (which wins), as
:mod:`corral.cli.sbatch_options` reads them; the script itself is copied into the job
(kind ``batch``), so editing it afterwards changes nothing, as with Slurm.
"""

from __future__ import annotations

import os
import socket
import sys

import typer

from corral.cli.common import client, err_console, print_json
from corral.errors import ValidationError

app = typer.Typer()
CLIENT_OPTIONS = {"--server": "server", "--token": "token"}


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def sbatch(ctx: typer.Context) -> None:
    """Submit a Slurm batch script: corral sbatch [OPTIONS] SCRIPT [ARGS...] (--help)."""
    from corral.cli.sbatch_options import command_line, parse
    from corral.schemas.manifest import parse_manifest

    argv, settings = _client_settings(list(ctx.args))
    given = command_line(argv)
    if given.help:
        print(_help())
        return
    script = None
    if given.wrap is None:
        path = given.script[0] if given.script else "-"
        script = _read(path)
        if path == "-":
            given.script = ["sbatch", *given.script[1:]]
    batch = parse(script, given, os.environ, os.getcwd(), socket.gethostname())
    for warning in batch.warnings:
        err_console.print(f"[yellow]sbatch: {warning}[/]", highlight=False)
    manifest = parse_manifest(batch.manifest)
    job = client(settings.get("server"), settings.get("token")).submit(manifest)
    if settings.get("json"):
        print_json(job)
    elif batch.parsable:
        print(job.id)
    else:
        print(f"Submitted batch job {job.id}")


def _client_settings(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """``--server URL``, ``--token T`` and ``--json`` (Corral's own) taken out of the
    options before the script (``-o`` is Slurm's output file here)."""
    settings: dict[str, str] = {}
    out: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if not arg.startswith("-") or arg in ("-", "--"):
            break  # the script (- : stdin; -- : it follows): the rest is its arguments
        name, eq, value = arg.partition("=")
        if name in CLIENT_OPTIONS:
            if not eq:
                index += 1
                if index >= len(argv):
                    raise ValidationError(f"sbatch: {name} needs a value")
                value = argv[index]
            settings[CLIENT_OPTIONS[name]] = value
        elif arg == "--json":
            settings["json"] = "1"
        else:
            out.append(arg)
            if not eq and _takes_value(arg) and index + 1 < len(argv):
                index += 1
                out.append(argv[index])
        index += 1
    return out + argv[index:], settings


def _takes_value(option: str) -> bool:
    """Whether ``option`` (as written, without ``=``) consumes the next argument."""
    from corral.cli.sbatch_options import parser

    for action in parser()._actions:
        if option in action.option_strings:
            return action.nargs is None
    return len(option) == 2  # an unknown short option: leave it to the parser's error


def _read(path: str) -> str:
    try:
        if path == "-":
            if sys.stdin.isatty():
                raise ValidationError(
                    "sbatch: no batch script: corral sbatch [OPTIONS] SCRIPT [ARGS...], "
                    "the script on stdin, or --wrap 'COMMAND'"
                )
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as handle:
                data = handle.read()
    except OSError as exc:
        raise ValidationError(f"sbatch: cannot read {path}: {exc.strerror}") from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ValidationError(f"sbatch: {path}: not a text file (not UTF-8)") from None


def _help() -> str:
    from corral.cli.sbatch_options import parser

    return parser().format_help() + (
        "\n\nCorral's own: --server URL, --token TOKEN, --json (the submitted job as JSON)."
        "\nSee docs/slurm.md for what each option does in Corral and what is not supported."
    )
