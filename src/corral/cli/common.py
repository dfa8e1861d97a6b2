"""Options shared by every command, output helpers, and the error boundary."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console

from corral.client import Client

# Piped output keeps whole table rows (a terminal uses its own width). No emoji codes:
# text such as "H:M:S" in a message or a job name must print as written, not as "HⓂS".
console = Console(width=None if sys.stdout.isatty() else 200, emoji=False)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200, emoji=False)


class Output(StrEnum):
    table = "table"
    json = "json"


ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="Server URL(s), comma-separated. Default: $CORRAL_SERVER, "
        "else the address `corral up` recorded.",
    ),
]
TokenOpt = Annotated[str | None, typer.Option("--token", help="API token. Default: $CORRAL_TOKEN.")]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table or json")]


def client(server: str | None, token: str | None) -> Client:
    return Client(server, token)


def print_json(value: Any) -> None:
    """Stable machine-readable output: pydantic models and lists of them."""
    sys.stdout.write(json.dumps(_plain(value), indent=2, sort_keys=False) + "\n")


def print_json_line(value: Any) -> None:
    """One JSON document on a line of its own, flushed (a stream of them: JSON lines)."""
    sys.stdout.write(json.dumps(_plain(value)) + "\n")
    sys.stdout.flush()


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def ago(at: float | None) -> str:
    from corral.core.units import format_duration

    return "-" if at is None else format_duration(time.time() - at)


def parse_pairs(values: Iterable[str], what: str) -> dict[str, str]:
    """``["K=V", ...]`` to a dict; a clear error for a missing ``=``."""
    from corral.errors import ValidationError

    result = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValidationError(f"{what}: expected KEY=VALUE, got {item!r}")
        result[key] = value
    return result
