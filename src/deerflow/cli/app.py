"""The `deerflow` command: one sub-command group per area, each a thin skin over the library."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from deerflow.cli import (
    auth_cmd,
    chat_cmd,
    config_cmd,
    console,
    demo_cmd,
    mcp_cmd,
    memory_cmd,
    serve_cmd,
)
from deerflow.version import package_version

app = typer.Typer(
    name="deerflow",
    help="DeerFlow Memory: persistent, structured memory for LangChain agents.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(config_cmd.app, name="config")
app.add_typer(memory_cmd.app, name="memory")
app.add_typer(auth_cmd.app, name="auth")
app.command(name="chat")(chat_cmd.chat)
app.command(name="demo")(demo_cmd.demo)
app.command(name="mcp")(mcp_cmd.mcp)
app.command(name="serve")(serve_cmd.serve)


def _print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"deerflow {package_version()}")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug detail.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    configure_logging(logging.DEBUG if verbose else logging.WARNING)


def configure_logging(level: int) -> None:
    """Log to stderr, with credentials masked in every record (`console.log_handler`)."""
    logging.basicConfig(level=level, handlers=[console.log_handler()], force=True)


def main() -> None:
    """Entry point of the `deerflow` console script."""
    app()
