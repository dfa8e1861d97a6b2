"""``--watch``: a listing shown again every few seconds until Ctrl-C.

On a terminal the table is redrawn in place (Rich ``Live``); piped, each refresh is
printed after the last one; with ``-o json``, each refresh is one JSON document on a line
of its own (as ``corral events -f -o json`` prints events). Ctrl-C ends it as it ends
every command (``cli.main``: exit status 130)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from itertools import chain
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from corral.cli.common import Output, console, err_console, print_json_line
from corral.errors import ConnectionFailedError

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

T = TypeVar("T")

WatchOpt = Annotated[
    bool,
    typer.Option(
        "--watch",
        "-w",
        help="show it again every --interval seconds until Ctrl-C (with -o json: one JSON "
        "document per refresh, a line each)",
    ),
]
IntervalOpt = Annotated[
    float, typer.Option("--interval", min=0.1, help="seconds between refreshes of --watch")
]


def watch(
    fetch: Callable[[], T],
    draw: Callable[[T], RenderableType],
    dump: Callable[[T], Any],
    interval: float,
    output: Output,
) -> None:
    """Show ``draw(fetch())`` (``dump(fetch())`` with -o json) every ``interval`` seconds
    until Ctrl-C. An error of the first fetch ends it; a server that cannot be reached
    later is said and asked again at the next refresh."""
    first = fetch()
    later = _refreshes(fetch, interval)
    if output is Output.json or not console.is_terminal:
        for found in chain([first], later):
            if isinstance(found, ConnectionFailedError):
                err_console.print(f"[bold red]error:[/] {found.message}", highlight=False)
            elif output is Output.json:
                print_json_line(dump(found))
            else:
                console.print(_header(interval), draw(found), "")
        return
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    shown = draw(first)
    with Live(Group(_header(interval), shown), console=console.real, auto_refresh=False) as live:
        for found in later:
            if isinstance(found, ConnectionFailedError):
                failed = Text(f"error: {found.message}", style="red")
                live.update(Group(_header(interval), shown, failed), refresh=True)
            else:
                shown = draw(found)
                live.update(Group(_header(interval), shown), refresh=True)


def _refreshes(fetch: Callable[[], T], interval: float) -> Iterator[T | ConnectionFailedError]:
    """``fetch()`` every ``interval`` seconds, forever; a failure to connect as a value."""
    while True:
        time.sleep(interval)
        try:
            yield fetch()
        except ConnectionFailedError as exc:
            yield exc


def _header(interval: float) -> Text:
    from rich.text import Text

    at = datetime.now().strftime("%H:%M:%S")
    return Text(f"every {interval:g}s, at {at} (Ctrl-C to stop)", style="dim")
