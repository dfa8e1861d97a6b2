"""Credentials and accountability: login, whoami, the audit log, node credentials."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from corral.cli.common import Output, OutputOpt, ServerOpt, TokenOpt, client, console, print_json
from corral.client.config import (
    CA_FILE,
    SERVER_FILE,
    TOKEN_FILE,
    corral_home,
    resolve_servers,
    resolve_token,
    store,
)
from corral.errors import ValidationError

app = typer.Typer()

CaCertOpt = Annotated[
    Path | None,
    typer.Option("--ca-cert", help="CA certificate of an HTTPS server (default: system CAs)"),
]


@app.command()
def login(server: ServerOpt = None, token: TokenOpt = None, ca_cert: CaCertOpt = None) -> None:
    """Check a token against the server (whoami), then store both in $CORRAL_HOME (0600)."""
    from corral.client.client import Client

    secret = resolve_token(token)
    if not secret:
        raise ValidationError("no token: pass --token (an admin creates one: corral token create)")
    if ca_cert is not None and not ca_cert.is_file():
        raise ValidationError(f"--ca-cert: no such file {ca_cert}")
    servers = resolve_servers(server)
    with Client(servers, secret, ca_cert=ca_cert) as c:
        who = c.whoami()
    if who.role not in ("admin", "user"):
        raise ValidationError(f"a {who.role} token cannot log in; use a user or admin token")
    store(SERVER_FILE, ",".join(servers))
    store(TOKEN_FILE, secret)
    if ca_cert is not None:
        store(CA_FILE, ca_cert.read_text())
    console.print(
        f"logged in to {', '.join(servers)} as {who.user} ({who.role}); saved in {corral_home()}",
        highlight=False,
    )


@app.command()
def whoami(
    server: ServerOpt = None, token: TokenOpt = None, output: OutputOpt = Output.table
) -> None:
    """Who the current token belongs to."""
    who = client(server, token).whoami()
    if output is Output.json:
        print_json(who)
    else:
        node = f" node {who.node}" if who.node else ""
        console.print(f"{who.user} ({who.role}, token {who.token_id}){node}", highlight=False)


@app.command()
def audit(
    user: Annotated[str | None, typer.Option(help="only this user's calls")] = None,
    since: Annotated[
        str | None,
        typer.Option(help="only calls since: a duration ago (1h, 30m), an ISO time or Unix time"),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="the newest N calls")] = 100,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """State-changing API calls: who, what, when, outcome (admins); the newest --limit,
    saying when older ones are left out (-o json: has_more)."""
    page = client(server, token).audit_page(user, parse_since(since), limit)
    if output is Output.json:
        print_json({"entries": page.entries, "has_more": page.has_more})
        return
    from corral.cli.render import audit_table

    console.print(audit_table(page.entries))
    if page.has_more:
        console.print(f"... older calls not shown; raise --limit (now {limit}) or use --since")


@app.command("reset-node")
def reset_node(
    node: Annotated[str, typer.Argument(metavar="NODE")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Free a node's name for a reinstalled host (admins): the next agent to register it
    gets a new node credential; the node's running tasks are lost (requeued or failed)."""
    result = client(server, token).reset_node(node)
    if output is Output.json:
        print_json(result)
    else:
        console.print(
            f"node {node} reset: {result.state} until an agent registers the name again",
            highlight=False,
        )


def parse_since(value: str | None, now: float | None = None) -> float | None:
    """``--since``: a duration ago (``90s``, ``1h``), an ISO 8601 time, or Unix seconds."""
    if value is None:
        return None
    from corral.core.units import parse_duration

    now = time.time() if now is None else now
    try:
        return float(value) if float(value) > 1e8 else now - float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        pass
    try:
        return now - parse_duration(value)
    except (ValueError, ValidationError):
        raise ValidationError(
            f"--since: expected a duration (1h), an ISO time or Unix seconds, got {value!r}"
        ) from None
