"""`deerflow serve`: the HTTP gateway and the memory web page."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from deerflow.cli.memory_session import handle_errors
from deerflow.cli.options import ConfigOption
from deerflow.startup import build_checked, load_checked


def serve(
    host: Annotated[
        str | None, typer.Option("--host", help="Address to listen on (default: server.host).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", min=0, max=65535, help="Port (default: server.port; 0 picks a free one)."
        ),
    ] = None,
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="Listen on a non-loopback address even with auth.mode: none.",
        ),
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Run the memory API and web page (FastAPI on uvicorn) until Ctrl-C or SIGTERM.

    The backend is built before the server listens, so a bad memory.manager_class stops here.
    On shutdown, queued memory writes get memory.shutdown_flush_timeout_seconds to finish.
    """
    root = logging.getLogger()
    if root.level > logging.INFO:
        root.setLevel(logging.INFO)  # startup, readiness and shutdown lines are the point here
    # Deferred: the gateway's chat route loads the agent machinery, seconds of imports that the
    # other commands must not pay when the CLI starts.
    from deerflow.gateway.server import check_bind, run_server

    with handle_errors(json_output=False):
        app_config, source = load_checked(config)
        overrides = {"host": host, "port": port, "allow_remote": allow_remote or None}
        server = app_config.server.model_copy(
            update={key: value for key, value in overrides.items() if value is not None}
        )
        app_config = app_config.model_copy(update={"server": server})
        check_bind(app_config)
        memory = app_config.memory
        manager = build_checked(app_config, source) if memory.enabled else None
    # The gateway closes the manager at shutdown; uvicorn then re-raises SIGTERM/SIGINT, so
    # nothing after run_server is guaranteed to run.
    with handle_errors(json_output=False):
        started = run_server(app_config, manager=manager)
    if not started:  # uvicorn logged why, e.g. "address already in use"
        raise typer.Exit(1)
