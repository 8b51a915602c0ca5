"""`deerflow mcp`: a real MCP client session over stdio lists the memory tools and calls them."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from typer.testing import CliRunner

from deerflow.agents.tools.memory_core import MEMORY_TOOL_NAMES
from deerflow.cli.app import app


def write_config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        "memory:\n"
        "  manager_class: deermem\n"
        f"{extra}"
        "  backend_config:\n"
        f"    storage_path: {json.dumps(str(tmp_path / 'memory'))}\n",
        encoding="utf-8",
    )
    return config


async def session_calls(
    config: Path, user: str, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[list[Any], list[Any]]:
    """Start `python -m deerflow mcp` for `user`, list its tools, make `calls`; the answers."""
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "deerflow", "mcp", "--config", str(config), "--user", user],
        env=dict(os.environ),
        cwd=str(config.parent),
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        results = [await session.call_tool(name, arguments) for name, arguments in calls]
    return tools, results


def answer(result: Any) -> dict[str, Any]:
    (content,) = result.content
    decoded: dict[str, Any] = json.loads(content.text)
    assert decoded == result.structuredContent
    return decoded


def test_an_mcp_client_lists_the_tools_adds_a_fact_and_finds_it(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    tools, (added, found, smuggled) = asyncio.run(
        session_calls(
            config,
            "alice",
            [
                ("memory_add", {"content": "Prefers pnpm over npm", "category": "preference"}),
                ("memory_search", {"query": "pnpm"}),
                ("memory_search", {"query": "pnpm", "user_id": "bob"}),
            ],
        )
    )
    assert [tool.name for tool in tools] == list(MEMORY_TOOL_NAMES)
    search_schema = tools[0].inputSchema
    assert search_schema["required"] == ["query"]
    assert set(search_schema["properties"]) == {"query", "category", "limit"}

    assert not added.isError
    fact_id = answer(added)["fact_id"]
    assert answer(found)["facts"][0] | {"updatedAt": None} == {
        "id": fact_id,
        "content": "Prefers pnpm over npm",
        "category": "preference",
        "confidence": 0.7,
        "score": answer(found)["facts"][0]["score"],
        "updatedAt": None,
    }
    assert smuggled.isError
    assert answer(smuggled)["error"] == "invalid_input"

    _, (other,) = asyncio.run(session_calls(config, "bob", [("memory_search", {"query": "pnpm"})]))
    assert answer(other) == {"facts": [], "count": 0}, "one server, one user's memory"


def test_mcp_refuses_to_start_when_memory_is_disabled(tmp_path: Path) -> None:
    config = write_config(tmp_path, "  enabled: false\n")
    result = CliRunner().invoke(app, ["mcp", "--config", str(config)])
    assert result.exit_code == 2
    assert "memory.enabled is false in the config" in result.output


@pytest.mark.parametrize("agent", ["bad/agent", "_hidden", "x" * 65])
def test_mcp_refuses_to_start_for_an_agent_name_no_agent_can_have(
    tmp_path: Path, agent: str
) -> None:
    """Refused at start, not at each tool call of a client that cannot show why."""
    config = write_config(tmp_path, "")
    result = CliRunner().invoke(app, ["mcp", "--config", str(config), "--agent", agent])
    assert result.exit_code == 2
    assert f"agent name {agent!r}" in " ".join(result.output.split())


# The pages that show a desktop client's entry, and the heading it follows.
DESKTOP_ENTRY_PAGES = {"cli.md": "## `deerflow mcp`", "mcp.md": "# Use from an MCP client"}


def documented_desktop_entry(page: str) -> dict[str, Any]:
    """The Claude Desktop entry `page` shows, parsed."""
    text = (Path(__file__).resolve().parents[2] / "docs" / page).read_text(encoding="utf-8")
    section = text.split(DESKTOP_ENTRY_PAGES[page])[1]
    block = section.split("```json\n")[1].split("```")[0]
    entry: dict[str, Any] = json.loads(block)["mcpServers"]["deerflow-memory"]
    return entry


@pytest.mark.parametrize("page", sorted(DESKTOP_ENTRY_PAGES))
def test_the_documented_desktop_entry_keeps_memory_in_its_home_and_reports_our_version(
    tmp_path: Path, page: str
) -> None:
    entry = documented_desktop_entry(page)
    assert Path(entry["command"]).is_absolute()
    assert set(entry["env"]) == {"DEER_FLOW_HOME", "DEER_FLOW_CONFIG"}
    # The reader's paths, made real here; the client runs it from a directory of its own.
    home, config = tmp_path / "home", tmp_path / "config.yaml"
    config.write_text("memory:\n  manager_class: deermem\n", encoding="utf-8")
    elsewhere = tmp_path / "client-cwd"
    elsewhere.mkdir()
    server = StdioServerParameters(
        command=str(Path(sys.executable).with_name("deerflow")),
        args=entry["args"],
        env={"DEER_FLOW_HOME": str(home), "DEER_FLOW_CONFIG": str(config), "PATH": "/usr/bin"},
        cwd=str(elsewhere),
    )

    async def run() -> tuple[Any, Any]:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            initialized = await session.initialize()
            added = await session.call_tool("memory_add", {"content": "Prefers pnpm over npm"})
        return initialized, added

    initialized, added = asyncio.run(run())
    assert initialized.serverInfo.name == "deerflow-memory"
    assert initialized.serverInfo.version == importlib.metadata.version("deerflow-memory")
    assert not added.isError
    assert list((home / "users" / "alice").rglob("fact_*.md")), "memory is under DEER_FLOW_HOME"
    assert not (elsewhere / ".deer-flow").exists()
