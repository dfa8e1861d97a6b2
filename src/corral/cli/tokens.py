"""Token commands: create, list, revoke."""

from __future__ import annotations

from typing import Annotated

import typer

from corral.cli.common import Output, OutputOpt, ServerOpt, TokenOpt, client, console, print_json

app = typer.Typer(
    help="API tokens: admins create them; users list and revoke their own.", no_args_is_help=True
)


@app.command()
def create(
    user: Annotated[str, typer.Option(help="who the token is for")],
    role: Annotated[
        str, typer.Option(help="admin, user, or join (what agents register nodes with)")
    ] = "user",
    unix_user: Annotated[
        str | None,
        typer.Option(
            "--unix-user", help="the Unix account the user's jobs run as (default: --user)"
        ),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Create a token; the secret is shown once."""
    created = client(server, token).create_token(user, role, unix_user)
    if output is Output.json:
        print_json(
            {
                "token": created.token,
                "id": created.id,
                "user": created.user,
                "role": created.role,
                "unix_user": created.unix_user,
            }
        )
    else:
        account = f", jobs run as {created.unix_user}" if created.unix_user else ""
        console.print(f"token {created.id} for {created.user} ({created.role}{account}):")
        print(created.token)


@app.command("list")
def list_tokens(
    server: ServerOpt = None, token: TokenOpt = None, output: OutputOpt = Output.table
) -> None:
    """Tokens (secrets are never shown again)."""
    found = client(server, token).tokens()
    if output is Output.json:
        print_json({"tokens": found})
        return
    from corral.cli.render import tokens_table

    console.print(tokens_table(found))


@app.command()
def revoke(
    token_id: Annotated[int, typer.Argument(metavar="ID")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Revoke a token."""
    revoked = client(server, token).revoke_token(token_id)
    print_json(revoked) if output is Output.json else console.print(f"token {token_id} revoked")
