"""Options shared by every command, output helpers, and the error boundary."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from corral.client import Client


class _LazyConsole:
    """A Rich ``Console`` made on first use: a command that prints no Rich output (``corral
    submit``, ``--version``, ``-o json``) does not import Rich (issue 21: a fast CLI).
    Attributes are the real console's; ``real`` is it, for Rich APIs that take a console."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._real: Console | None = None

    @property
    def real(self) -> Console:
        if self._real is None:
            from rich.console import Console

            # Piped output keeps whole table rows (a terminal uses its own width). No emoji
            # codes: text such as "H:M:S" in a message or a job name must print as written,
            # not as "HⓂS".
            stream = sys.stderr if self._stderr else sys.stdout
            width = None if stream.isatty() else 200
            self._real = Console(stderr=self._stderr, width=width, emoji=False)
        return self._real

    def __getattr__(self, name: str) -> Any:
        if name in ("_real", "_stderr"):  # not set yet (a copy): no recursion through real
            raise AttributeError(name)
        return getattr(self.real, name)


console = _LazyConsole(stderr=False)
err_console = _LazyConsole(stderr=True)


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
    from corral.client.client import Client

    return Client(server, token)


def print_json(value: Any) -> None:
    """Stable machine-readable output: pydantic models and lists of them."""
    sys.stdout.write(json.dumps(_plain(value), indent=2, sort_keys=False) + "\n")


def print_json_line(value: Any) -> None:
    """One JSON document on a line of its own, flushed (a stream of them: JSON lines)."""
    sys.stdout.write(json.dumps(_plain(value)) + "\n")
    sys.stdout.flush()


def _plain(value: Any) -> Any:
    from pydantic import BaseModel

    def plain(value: Any) -> Any:
        if isinstance(value, BaseModel):
            return value.model_dump(mode="json")
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return plain(value)


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
