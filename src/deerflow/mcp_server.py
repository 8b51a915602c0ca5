"""The four memory tools served to MCP clients over stdio (`deerflow mcp`).

One server process serves one scope: the user and agent bucket it was started for. The tools,
their argument schemas and their JSON results are the same as in tool mode
(`deerflow.agents.tools.memory_core`); a tool that fails answers `{"error": …}` with
`isError` set, and the process keeps serving.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from deerflow.agents.memory.manager import MemoryManager
from deerflow.agents.tools.memory_core import MEMORY_TOOL_SPECS, MemoryScope, call_memory_tool
from deerflow.version import package_version

__all__ = ["SERVER_NAME", "build_mcp_server", "serve_stdio"]

SERVER_NAME: Final = "deerflow-memory"


def build_mcp_server(manager: MemoryManager, scope: MemoryScope) -> Server[Any, Any]:
    """An MCP server whose tools reach `manager` in `scope` only."""
    server: Server[Any, Any] = Server(
        SERVER_NAME,
        # The client shows it as the server's version (serverInfo.version), not the SDK's.
        version=package_version(),
        instructions=(
            f"Long-term memory about the user {scope.user_id!r}: search it before assuming "
            "something is unknown; add only durable facts; update rather than duplicate."
        ),
    )
    specs = {spec.name: spec for spec in MEMORY_TOOL_SPECS}
    listed = [
        types.Tool(
            name=spec.name,
            description=spec.description,
            inputSchema=spec.args_schema.model_json_schema(),
        )
        for spec in MEMORY_TOOL_SPECS
    ]

    @server.list_tools()  # type: ignore[no-untyped-call,untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        return listed

    # The core validates the arguments itself, so errors read the same as in tool mode.
    @server.call_tool(validate_input=False)  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        spec = specs.get(name)
        if spec is None:
            result: dict[str, Any] = {
                "error": "unknown_tool",
                "detail": f"no tool {name!r}; tools: {', '.join(specs)}",
            }
        else:
            result = await asyncio.to_thread(call_memory_tool, spec, manager, scope, arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
            structuredContent=result,
            isError="error" in result,
        )

    return server


async def serve_stdio(manager: MemoryManager, scope: MemoryScope) -> None:
    """Serve the memory tools on stdin/stdout until the client closes the stream."""
    server = build_mcp_server(manager, scope)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
