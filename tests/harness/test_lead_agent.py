"""The lead agent: model choice, custom agents, MCP tools from a real stdio server, threads."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from deerflow.agents.context import AgentContext
from deerflow.agents.lead_agent import LEAD_PROMPT, amake_lead_agent, make_lead_agent
from deerflow.agents.mcp_tools import McpToolsError
from deerflow.agents.memory.manager import (
    MemoryManager,
    build_memory_manager,
    default_host_hooks,
)
from deerflow.agents.memory_wiring import wire_memory
from deerflow.config import AppConfig, ConfigError
from deerflow.config.loader import parse_config
from deerflow.models import create_chat_model
from deerflow.models.local import LocalChatModel
from tests.harness.scripted_model import USE, ScriptedConversationModel

PNPM = "Prefers pnpm over npm for JavaScript projects"

WEATHER_SERVER = '''
from mcp.server.fastmcp import FastMCP

server = FastMCP("weather")


@server.tool()
def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    return f"Sunny in {city}, 24 C"


@server.tool()
def memory_search(query: str) -> str:
    """A search of the team wiki that happens to share a memory tool's name."""
    return f"wiki page about {query}"


server.run()
'''
CLOCK_SERVER = '''
from mcp.server.fastmcp import FastMCP

server = FastMCP("clock")


@server.tool()
def now() -> str:
    """The current time."""
    return "12:00"


server.run()
'''


@pytest.fixture(autouse=True)
def fresh_script() -> Iterator[None]:
    ScriptedConversationModel.reset()
    yield
    ScriptedConversationModel.reset()


@pytest.fixture
def servers(tmp_path: Path) -> dict[str, Any]:
    """`mcp_servers:` entries for two tiny stdio servers written for the test."""
    found = {}
    for name, source in (("weather", WEATHER_SERVER), ("clock", CLOCK_SERVER)):
        script = tmp_path / f"{name}_server.py"
        script.write_text(source, encoding="utf-8")
        found[name] = {"command": sys.executable, "args": [str(script)]}
    return found


def scripted(name: str = "scripted", **settings: Any) -> dict[str, Any]:
    """A `models:` entry for the scripted model."""
    return {"name": name, "use": USE, **settings}


def app_config(tmp_path: Path, *models: dict[str, Any], **sections: Any) -> AppConfig:
    raw = {
        "models": list(models),
        "memory": {"backend_config": {"storage_path": str(tmp_path / "store")}},
        **sections,
    }
    return parse_config(raw, {})


def manager_for(config: AppConfig) -> MemoryManager:
    """The configured backend, extracting with the default model, as the CLI builds it."""
    return build_memory_manager(config.memory, host_hooks=default_host_hooks(config))


def ask(agent: Any, text: str, *, thread: str = "t1", user: str = "alice") -> list[Any]:
    async def run() -> list[Any]:
        state = await agent.ainvoke(
            {"messages": [HumanMessage(text)]},
            config={"configurable": {"thread_id": thread}},
            context=AgentContext(user_id=user),
        )
        return list(state["messages"])

    return asyncio.run(run())


def add_agent(home: Path, name: str, config: str, soul: str | None = None) -> None:
    folder = home / "agents" / name
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(config, encoding="utf-8")
    if soul is not None:
        (folder / "SOUL.md").write_text(soul, encoding="utf-8")


def test_no_model_configured_means_the_offline_model() -> None:
    model = create_chat_model(AppConfig())

    assert isinstance(model, LocalChatModel)
    assert model.model_path is None  # the GGUF of the bundled package


def test_mcp_tools_from_the_config_are_called_by_the_agent(
    tmp_path: Path, servers: dict[str, Any]
) -> None:
    config = app_config(
        tmp_path,
        scripted(tool_calls=[{"name": "forecast", "args": {"city": "Lisbon"}}], replies=["Sunny."]),
        mcp_servers={"weather": servers["weather"]},
    )
    manager = manager_for(config)
    try:
        agent = asyncio.run(amake_lead_agent(config, manager=manager))
        messages = ask(agent, "Weather in Lisbon tomorrow?")
    finally:
        manager.close()

    tool_results = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.text for m in tool_results] == ["Sunny in Lisbon, 24 C"]
    assert messages[-1].text == "Sunny."
    # The model's second call saw the tool's answer.
    assert "Sunny in Lisbon, 24 C" in ScriptedConversationModel.chat_prompts[1][-1].text


def test_an_mcp_tool_keeps_a_memory_tools_name_and_the_memory_tool_steps_aside(
    tmp_path: Path, servers: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    config = app_config(
        tmp_path,
        scripted(tool_calls=[{"name": "memory_search", "args": {"query": "deploys"}}]),
        mcp_servers={"weather": servers["weather"]},
        memory={"mode": "tool", "backend_config": {"storage_path": str(tmp_path / "store")}},
    )
    manager = manager_for(config)
    try:
        with caplog.at_level(logging.WARNING):
            agent = asyncio.run(amake_lead_agent(config, manager=manager))
        messages = ask(agent, "What do we know about deploys?")
    finally:
        manager.close()

    assert [m.text for m in messages if isinstance(m, ToolMessage)] == ["wiki page about deploys"]
    tools = ScriptedConversationModel.bound_tools[0]
    assert tools.count("memory_search") == 1
    assert {"forecast", "memory_add", "memory_update", "memory_delete"} <= set(tools)
    assert any("memory_search" in record.getMessage() for record in caplog.records)


def test_a_custom_agent_uses_its_model_its_servers_its_soul_and_its_bucket(
    tmp_path: Path, isolated_environment: Path, servers: dict[str, Any]
) -> None:
    # Memory extraction uses the default model, which "learns" PNPM.
    facts = [{"content": PNPM, "category": "preference", "confidence": 0.9}]
    config = app_config(
        tmp_path,
        scripted(replies=["from the default model"], facts=facts),
        scripted("careful", replies=["from the careful model"]),
        mcp_servers=servers,
    )
    add_agent(
        isolated_environment,
        "coder",
        "model: careful\nmcp_servers: [clock]\n",
        soul="You are Coder. You answer in one line.\n",
    )
    manager = manager_for(config)
    try:
        agent = asyncio.run(amake_lead_agent(config, "coder", manager=manager))
        messages = ask(agent, "I use pnpm for JavaScript.")
        manager.shutdown_flush(10)
        coder = manager.get_memory(user_id="alice", agent_name="coder")["facts"]
        default_facts = manager.get_memory(user_id="alice")["facts"]
    finally:
        manager.close()

    assert messages[-1].text == "from the careful model"
    assert ScriptedConversationModel.bound_tools[0] == ["now"]
    system = ScriptedConversationModel.system_prompts()[0]
    assert system.startswith(LEAD_PROMPT)
    assert "You are Coder. You answer in one line." in system
    assert [fact["content"] for fact in coder] == [PNPM]
    assert default_facts == []


def test_threads_keep_their_history_and_are_kept_apart(tmp_path: Path) -> None:
    config = app_config(tmp_path, scripted(replies=["one", "two", "three"]))
    manager = manager_for(config)
    try:
        agent = make_lead_agent(config, manager=manager)
        ask(agent, "first", thread="a")
        history = ask(agent, "second", thread="a")
        other = ask(agent, "elsewhere", thread="b")
    finally:
        manager.close()

    assert [m.text for m in history] == ["first", "one", "second", "two"]
    assert [m.text for m in other] == ["elsewhere", "three"]


def test_sync_construction_inside_an_event_loop_points_to_the_async_one(
    tmp_path: Path, servers: dict[str, Any]
) -> None:
    config = app_config(tmp_path, scripted(), mcp_servers=servers, memory={"enabled": False})

    async def build() -> Any:
        return make_lead_agent(config)

    with pytest.raises(RuntimeError, match=r"await amake_lead_agent"):
        asyncio.run(build())


def test_a_server_that_cannot_start_is_named(tmp_path: Path) -> None:
    broken = {"command": sys.executable, "args": [str(tmp_path / "missing.py")]}
    config = app_config(
        tmp_path, scripted(), mcp_servers={"broken": broken}, memory={"enabled": False}
    )

    with pytest.raises(McpToolsError, match=r"mcp_servers\.broken: listing its tools failed"):
        make_lead_agent(config)


@pytest.mark.parametrize(
    ("agent_config", "error", "match"),
    [
        ("mcp_servers: [nowhere]\n", ValueError, r"no server named nowhere \(configured: none\)"),
        ("model: missing\n", ValueError, r"no model named 'missing' \(configured: scripted\)"),
        ("mcp_servers: clock\n", ConfigError, r"coder/config\.yaml: mcp_servers: .*list"),
        ("- not a mapping\n", ConfigError, r"the top level must be a mapping"),
    ],
)
def test_a_bad_custom_agent_is_refused_with_its_file_and_key(
    tmp_path: Path, isolated_environment: Path, agent_config: str, error: type, match: str
) -> None:
    add_agent(isolated_environment, "coder", agent_config)
    config = app_config(tmp_path, scripted(), memory={"enabled": False})

    with pytest.raises(error, match=match):
        make_lead_agent(config, "coder")


@pytest.mark.parametrize("name", ["../etc", "", "a b", "x" * 65])
def test_agent_names_are_checked_before_touching_the_disk(tmp_path: Path, name: str) -> None:
    config = app_config(tmp_path, scripted(), memory={"enabled": False})

    with pytest.raises(ValueError, match=r"agent name"):
        make_lead_agent(config, name)


def test_an_unknown_agent_lists_the_ones_there_are(
    tmp_path: Path, isolated_environment: Path
) -> None:
    add_agent(isolated_environment, "writer", "")
    config = app_config(tmp_path, scripted(), memory={"enabled": False})

    with pytest.raises(ValueError, match=r"no agent 'coder'.*\(agents: writer\)"):
        make_lead_agent(config, "coder")


def test_an_agent_with_an_underscore_remembers_across_two_threads(
    tmp_path: Path, isolated_environment: Path
) -> None:
    facts = [{"content": PNPM, "category": "preference", "confidence": 0.9}]
    config = app_config(tmp_path, scripted(replies=["Noted."], facts=facts))
    add_agent(isolated_environment, "my_agent", "description: has an underscore\n")
    manager = manager_for(config)
    try:
        agent = asyncio.run(amake_lead_agent(config, "my_agent", manager=manager))
        ask(agent, "I use pnpm for JavaScript.", thread="first")
        assert manager.shutdown_flush(10)
        ScriptedConversationModel.reset()
        ask(agent, "Which package manager do I use?", thread="second")
        stored = manager.get_memory(user_id="alice", agent_name="my_agent")["facts"]
    finally:
        manager.close()

    assert [fact["content"] for fact in stored] == [PNPM]
    assert PNPM in ScriptedConversationModel.system_prompts()[0], "thread two starts with it"


def test_configurable_agent_name_chooses_the_bucket_of_the_request(tmp_path: Path) -> None:
    facts = [{"content": PNPM, "category": "preference", "confidence": 0.9}]
    config = app_config(tmp_path, scripted(replies=["Noted."], facts=facts))
    manager = manager_for(config)
    try:
        agent = make_lead_agent(config, manager=manager)

        async def run(configurable: dict[str, Any]) -> None:
            await agent.ainvoke(
                {"messages": [HumanMessage("I use pnpm for JavaScript.")]},
                config={"configurable": configurable},
                context=AgentContext(user_id="alice"),
            )

        asyncio.run(run({"thread_id": "t1", "agent_name": "team_bot"}))
        assert manager.shutdown_flush(10)
        bucket = manager.get_memory(user_id="alice", agent_name="team_bot")["facts"]
        default_facts = manager.get_memory(user_id="alice")["facts"]
        with pytest.raises(ValueError, match=r"agent name '__default__'"):
            asyncio.run(run({"thread_id": "t2", "agent_name": "__default__"}))
    finally:
        manager.close()

    assert [fact["content"] for fact in bucket] == [PNPM]
    assert default_facts == []


def test_an_agent_name_memory_cannot_use_fails_when_the_agent_is_built(tmp_path: Path) -> None:
    config = app_config(tmp_path, scripted())
    manager = manager_for(config)
    try:
        with pytest.raises(ValueError, match=r"agent name 'a/b'"):
            wire_memory(
                config, manager, agent_name="a/b", tools=[], model=create_chat_model(config)
            )
    finally:
        manager.close()
