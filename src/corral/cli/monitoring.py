"""Monitoring commands: usage (accounting), events (history and live), telemetry."""

from __future__ import annotations

import csv
import sys
import time
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from corral.cli.common import (
    Output,
    OutputOpt,
    ServerOpt,
    TokenOpt,
    client,
    console,
    print_json,
)
from corral.core.units import format_duration, format_size, parse_duration
from corral.errors import ValidationError

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from corral.schemas.api import EventItem, TelemetrySample, UsageRow

app = typer.Typer()

TIME_HELP = (
    "a time: 24h or 7d (that long ago), 2026-11-30 or 2026-11-30T08:00 (local), or epoch seconds"
)


class TableJsonCsv(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


def parse_time(text: str, now: float, what: str) -> float:
    """Epoch seconds from a duration ago (``24h``), an ISO 8601 date or time (local time
    unless it has an offset), or epoch seconds; ``ValidationError`` otherwise."""
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return now - parse_duration(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise ValidationError(f"{what}: expected {TIME_HELP}; got {text!r}") from None


USAGE_COLUMNS = (
    "key",
    "jobs",
    "gpu_hours_allocated",
    "gpu_hours_used",
    "avg_wait",
    "max_wait",
    "preemptions",
    "cpu_seconds",
    "peak_memory",
)


@app.command()
def usage(
    by: Annotated[str, typer.Option("--by", help="queue, user or job")] = "queue",
    since: Annotated[str | None, typer.Option(help=f"window start: {TIME_HELP}")] = None,
    until: Annotated[str | None, typer.Option(help="window end (default: now)")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: Annotated[
        TableJsonCsv, typer.Option("--output", "-o", help="table, json or csv")
    ] = TableJsonCsv.table,
) -> None:
    """GPU-hours allocated and used, waits, preemptions, CPU time and peak memory per
    queue, user or job."""
    if by not in ("queue", "user", "job"):
        raise ValidationError(f"--by: expected queue, user or job, got {by!r}")
    now = time.time()
    start = parse_time(since, now, "--since") if since else None
    end = parse_time(until, now, "--until") if until else None
    report = client(server, token).usage(by, start, end)
    if output is TableJsonCsv.json:
        print_json(report)
    elif output is TableJsonCsv.csv:
        extra = ("queue", "user", "name") if by == "job" else ()
        writer = csv.writer(sys.stdout)
        writer.writerow([by if c == "key" else c for c in (*USAGE_COLUMNS, *extra)])
        for row in report.rows:
            values = row.model_dump()
            writer.writerow(
                ["" if values[c] is None else values[c] for c in (*USAGE_COLUMNS, *extra)]
            )
    elif not report.rows:
        console.print("no usage in this window")
    else:
        console.print(usage_table(report.rows, by))


def usage_table(rows: list[UsageRow], by: str) -> Table:
    from rich.table import Table
    from rich.text import Text

    from corral.cli.render import cpu_time

    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in (
        by.upper(),
        "JOBS",
        "GPU-H ALLOC",
        "GPU-H USED",
        "USED %",
        "AVG WAIT",
        "MAX WAIT",
        "PREEMPT",
        "CPU TIME",
        "PEAK MEM",
    ):
        table.add_column(col, no_wrap=True, justify="left" if col == by.upper() else "right")
    for r in rows:
        label = r.key if by != "job" else f"{r.key} {r.name or ''}".strip()
        share = r.gpu_hours_used / r.gpu_hours_allocated if r.gpu_hours_allocated else None
        table.add_row(
            Text(label),
            str(r.jobs),
            f"{r.gpu_hours_allocated:.2f}",
            f"{r.gpu_hours_used:.2f}",
            "-" if share is None else f"{share:.0%}",
            "-" if r.avg_wait is None else format_duration(r.avg_wait),
            "-" if r.max_wait is None else format_duration(r.max_wait),
            str(r.preemptions),
            cpu_time(r.cpu_seconds),
            format_size(r.peak_memory),
        )
    return table


def event_line(event: EventItem) -> Text:
    from rich.text import Text

    from corral.cli.render import state_text, when

    line = Text(f"{event.id:>6}  {when(event.at)}  {event.entity} {event.entity_id}")
    if event.entity == "job":
        line.append(f" #{event.attempt}")
    line.append("  ")
    line.append_text(state_text(event.from_state or "-"))
    line.append(" -> ")
    line.append_text(state_text(event.to_state))
    line.append(f"  {event.reason}")
    return line


@app.command()
def events(
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new events as they happen")
    ] = False,
    since_id: Annotated[int | None, typer.Option("--since-id", help="events after this id")] = None,
    limit: Annotated[int, typer.Option(help="how many (without -f)")] = 50,
    job: Annotated[int | None, typer.Option("--job", help="only this job's events")] = None,
    node: Annotated[str | None, typer.Option("--node", help="only this node's events")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Job and node transitions: the latest --limit ones (or the first --limit after
    --since-id), saying when more match; with -f a live stream (JSON lines with -o json)."""
    if job is not None and node is not None:
        raise ValidationError("--job and --node: pick one")
    entity, entity_id = (
        ("job", str(job)) if job is not None else ("node", node) if node else (None, None)
    )
    c = client(server, token)
    page = c.event_page(since_id, limit, entity, entity_id)
    found = page.events
    if not follow:
        if output is Output.json:
            print_json(page)
            return
        for event in found:
            console.print(event_line(event), highlight=False)
        if page.has_more and since_id is None:
            console.print(f"... older events not shown; raise --limit (now {limit})")
        elif page.has_more:
            console.print(f"... more events follow; read on with --since-id {found[-1].id}")
        return
    last = since_id if since_id is not None else (found[-1].id if found else 0)
    for event in [] if since_id is not None else found:
        _emit(event, output)
    for event in c.stream_events(last):
        if entity and (event.entity != entity or event.entity_id != entity_id):
            continue
        _emit(event, output)


def _emit(event: EventItem, output: Output) -> None:
    if output is Output.json:
        sys.stdout.write(event.model_dump_json() + "\n")
        sys.stdout.flush()
    else:
        console.print(event_line(event), highlight=False)


@app.command()
def telemetry(
    target: Annotated[str, typer.Argument(metavar="NODE|JOB", help="a node name or a job id")],
    since: Annotated[str | None, typer.Option(help=f"from: {TIME_HELP}")] = "5m",
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Recent GPU readings of a node or a job (the latest per GPU; all with -o json)."""
    now = time.time()
    start = parse_time(since, now, "--since") if since else 0.0
    c = client(server, token)
    samples = (
        c.job_telemetry(int(target), start) if target.isdigit() else c.node_telemetry(target, start)
    )
    if output is Output.json:
        print_json({"samples": samples})
        return
    from rich.table import Table

    from corral.cli.render import when

    latest: dict[tuple[str, int], TelemetrySample] = {}
    for s in samples:
        latest[(s.node, s.gpu)] = s
    if not latest:
        console.print(f"no telemetry for {target} since {when(start)}")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("NODE", "GPU", "UTIL", "MEMORY", "TEMP", "POWER", "ECC", "XID", "JOB", "AGE"):
        table.add_column(col, no_wrap=True)
    for (node, gpu), s in sorted(latest.items()):
        table.add_row(
            node,
            str(gpu),
            f"{s.utilization:.0f}%",
            f"{format_size(s.memory_used)}/{format_size(s.memory_total)}",
            "-" if s.temperature is None else f"{s.temperature:.0f}C",
            "-" if s.power is None else f"{s.power:.0f}W",
            str(s.ecc_errors),
            str(s.xid_errors),
            "-" if s.job_id is None else ",".join(str(j) for j in s.job_ids),
            format_duration(max(0.0, now - s.at)),
        )
    console.print(table)
