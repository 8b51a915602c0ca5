"""`deerflow mcp`: serve the four memory tools over stdio to an MCP client."""

from __future__ import annotations

import anyio
import typer

from deerflow.agents.context import checked_agent_name
from deerflow.agents.tools.memory_core import MemoryScope
from deerflow.cli.memory_session import handle_errors
from deerflow.cli.options import AgentOption, ConfigOption, UserOption
from deerflow.startup import build_checked, load_checked

DEFAULT_USER = "default"


def mcp(
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
) -> None:
    """Serve memory_search, memory_add, memory_update and memory_delete over stdio (MCP).

    One process serves one user's memory (and one agent bucket): an MCP client cannot reach
    anyone else's. Point the client at the command, for example
    `{"command": "deerflow", "args": ["mcp", "--user", "alice"]}`. Logs go to stderr.
    """
    with handle_errors(json_output=False):
        app_config, source = load_checked(config)
        if not app_config.memory.enabled:
            raise ValueError("memory.enabled is false in the config: there is no memory to serve")
        if agent is not None:  # an MCP client shows a refused start better than failing calls
            checked_agent_name(agent)
        manager = build_checked(app_config, source)
    # The MCP SDK takes over a second to import; only this command pays for it.
    from deerflow.mcp_server import serve_stdio

    try:
        anyio.run(serve_stdio, manager, MemoryScope(user_id=user, agent_name=agent))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        manager.shutdown_flush(app_config.memory.shutdown_flush_timeout_seconds)
        manager.close()
