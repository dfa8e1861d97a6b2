"""``corral pools`` and ``corral node notice``: node pools and spot termination notices."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from corral.cli.common import Output, OutputOpt, ServerOpt, TokenOpt, client, console, print_json
from corral.core.units import format_duration, parse_duration
from corral.errors import ValidationError

if TYPE_CHECKING:
    from rich.table import Table

    from corral.schemas.api import PoolOut

app = typer.Typer()
node_app = typer.Typer(help="Act on one node (spot termination notices).", no_args_is_help=True)


@app.command()
def pools(
    server: ServerOpt = None, token: TokenOpt = None, output: OutputOpt = Output.table
) -> None:
    """Node pools: nodes, desired, min, max, provisioning in flight and cost per hour."""
    found = client(server, token).pools()
    if output is Output.json:
        print_json({"pools": found})
    elif not found:
        console.print("no node pools (declare them under pools: in the cluster file)")
    else:
        console.print(pools_table(found, time.time()))


@node_app.command()
def notice(
    node: Annotated[str, typer.Argument(metavar="NODE")],
    deadline: Annotated[
        str, typer.Option("--deadline", help="when the node goes away, e.g. 2m (spot: 30s-2m)")
    ] = "2m",
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A spot termination notice: drain NODE (with the rest of its pool unit), preempt its
    jobs so that they end before the deadline (they checkpoint and are requeued), then
    let the node leave."""
    try:
        seconds = parse_duration(deadline)
    except ValueError as exc:
        raise ValidationError(f"--deadline: {exc}") from None
    result = client(server, token).notice(node, seconds)
    if output is Output.json:
        print_json(result)
    else:
        console.print(
            f"notice given: {', '.join(result.nodes)} leave(s) in {format_duration(seconds)}"
        )


def pools_table(pools: list[PoolOut], now: float) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in (
        "POOL",
        "PROVIDER",
        "UNIT",
        "NODES",
        "DESIRED",
        "MIN",
        "MAX",
        "PROVISIONING",
        "DRAINING",
        "COST/H",
        "STATUS",
    ):
        table.add_column(col, no_wrap=col != "STATUS")
    for pool in pools:
        ready = pool.ready * pool.hosts_per_unit
        status = "spot" if pool.spot else ""
        if pool.retry_at is not None:
            wait = format_duration(max(0.0, pool.retry_at - now))
            status = f"{pool.failures} failure(s): retrying in {wait}"
        table.add_row(
            pool.name,
            pool.provider,
            pool.unit,
            str(ready),
            str(pool.desired),
            str(pool.min),
            str(pool.max),
            str(pool.provisioning),
            str(pool.draining),
            f"{pool.cost_now:,.2f}",
            Text(status or "-"),
        )
    return table
