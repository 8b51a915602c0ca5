"""Tools from the MCP servers of `mcp_servers:` (through langchain-mcp-adapters).

Each tool call opens its own session to its server (for stdio: starts the server, calls, stops
it), so an agent holds no connection between turns and nothing is left running when it is
dropped. MCP tools are asynchronous only: run an agent that has them with `ainvoke`/`astream`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient

from deerflow.config.schema import AppConfig

__all__ = ["McpToolsError", "load_mcp_tools", "select_servers"]


class McpToolsError(RuntimeError):
    """An MCP server could not be reached or listed its tools wrongly; the message names it."""


def select_servers(config: AppConfig, names: Sequence[str] | None) -> list[str]:
    """The servers to use: `names` (checked against `mcp_servers:`), or all of them.

    Raises:
        ValueError: a name that `mcp_servers:` does not define.
    """
    if names is None:
        return list(config.mcp_servers)
    unknown = [name for name in names if name not in config.mcp_servers]
    if unknown:
        known = ", ".join(config.mcp_servers) or "none"
        raise ValueError(f"mcp_servers: no server named {', '.join(unknown)} (configured: {known})")
    return list(dict.fromkeys(names))


async def load_mcp_tools(config: AppConfig, names: Sequence[str] | None = None) -> list[BaseTool]:
    """The tools of the selected servers (see `select_servers`), server by server.

    Raises:
        ValueError: an unknown server name.
        McpToolsError: a server failed to start or to list its tools.
    """
    tools: list[BaseTool] = []
    for name in select_servers(config, names):
        connection = cast(Any, config.mcp_servers[name].connection())
        client = MultiServerMCPClient({name: connection})
        try:
            tools.extend(await client.get_tools(server_name=name))
        except Exception as exc:
            raise McpToolsError(
                f"mcp_servers.{name}: listing its tools failed: {_describe(exc)}"
            ) from exc
    return tools


def _describe(exc: BaseException) -> str:
    # A failing stdio server surfaces as a task group's exception group: name the first cause.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
