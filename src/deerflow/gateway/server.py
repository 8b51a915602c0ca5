"""Run the gateway under uvicorn, refusing to expose memory without auth by accident."""

from __future__ import annotations

import logging

import uvicorn

from deerflow.agents.memory.manager import MemoryManager
from deerflow.config import AppConfig
from deerflow.gateway.app import create_app
from deerflow.gateway.auth import is_loopback_host

__all__ = ["check_bind", "run_server"]

logger = logging.getLogger(__name__)


def check_bind(config: AppConfig) -> None:
    """Refuse a non-loopback `server.host` under `auth.mode: none` without `allow_remote`.

    Raises:
        ValueError: saying what to do instead.
    """
    server = config.server
    if config.auth.mode == "none" and not server.allow_remote and not is_loopback_host(server.host):
        raise ValueError(
            f"server.host: refusing to listen on {server.host!r} with auth.mode: none, because "
            "anyone who reaches it could read and change all memory. Set auth.mode: token and "
            "issue tokens with `deerflow auth add-token --user ID`, or pass --allow-remote "
            "(server.allow_remote: true) when something in front of the server authenticates."
        )


def run_server(config: AppConfig, *, manager: MemoryManager | None) -> bool:
    """Serve until SIGINT/SIGTERM; False when the server could not start.

    Logging is left to the caller (`log_config=None`), so uvicorn's records pass through the
    caller's redacting handler like every other record.
    """
    check_bind(config)
    if config.auth.mode == "none" and not is_loopback_host(config.server.host):
        logger.warning("listening on %s without auth (allow_remote is set)", config.server.host)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config, manager=manager),
            host=config.server.host,
            port=config.server.port,
            log_config=None,
        )
    )
    try:
        server.run()
    except SystemExit:  # uvicorn exits the process when it cannot listen, e.g. a port in use
        if server.started:
            raise
        return False  # it logged why and has shut the app (and so the memory) down
    return server.started
