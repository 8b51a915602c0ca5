"""`deerflow auth`: issue, list and revoke the bearer tokens of `auth.mode: token`."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from deerflow.cli import memory_render as render
from deerflow.cli.memory_session import handle_errors
from deerflow.cli.options import JsonOption
from deerflow.config import runtime_home
from deerflow.gateway.tokens import TokenStore, tokens_path

app = typer.Typer(
    help="Bearer tokens for `deerflow serve` with auth.mode: token.", no_args_is_help=True
)


def _store() -> TokenStore:
    return TokenStore(tokens_path(runtime_home()))


@app.command("add-token")
def add_token(
    user: Annotated[str, typer.Option("--user", "-u", help="The user id the token acts as.")],
    label: Annotated[str, typer.Option("--label", help="A note: whose device, what for.")] = "",
    json_output: JsonOption = False,
) -> None:
    """Issue a token for a user and print it once; only its hash is stored."""
    with handle_errors(json_output):
        record, token = _store().add(user, label)
    if json_output:
        render.print_json({"id": record.id, "user_id": record.user_id, "token": token})
        return
    render.stdout().print(f"token {record.id} for user {escape(record.user_id)}:")
    # Plain print: the token must be copyable as is, with no markup or wrapping.
    typer.echo(token)
    render.stderr().print("Store it now: it is not shown again.")


@app.command("list")
def list_tokens(json_output: JsonOption = False) -> None:
    """List issued tokens (id, user, label, created); never the tokens themselves."""
    with handle_errors(json_output):
        records = _store().records()
    if json_output:
        shown = [{k: v for k, v in asdict(r).items() if k != "sha256"} for r in records]
        render.print_json(shown)
        return
    if not records:
        render.stdout().print("(no tokens; add one with `deerflow auth add-token --user ID`)")
        return
    table = Table("id", "user", "label", "created")
    for record in records:
        table.add_row(record.id, escape(record.user_id), escape(record.label), record.created_at)
    render.stdout().print(table)


@app.command()
def revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id from `deerflow auth list`.")],
    json_output: JsonOption = False,
) -> None:
    """Revoke a token; a running server refuses it from the next request on."""
    with handle_errors(json_output):
        record = _store().revoke(token_id)
    if json_output:
        render.print_json({"revoked": record.id, "user_id": record.user_id})
    else:
        render.stdout().print(f"revoked {record.id} (user {escape(record.user_id)})")
