"""Tool mode: the four memory tools in a real agent, scoped by the runtime, yielding their names."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool

from deerflow.agents.memory.manager import MemoryManager, build_memory_manager
from deerflow.agents.memory.tools import get_memory_tools
from deerflow.agents.memory_wiring import wire_memory
from deerflow.agents.middlewares.memory_middleware import MemoryMiddleware
from deerflow.agents.tools.memory_core import MEMORY_TOOL_NAMES
from deerflow.config import AppConfig, MemoryConfig, SummarizationConfig
from tests.harness.fakes import (
    HOW,
    How,
    RecordingManager,
    ScriptedChatModel,
    build_agent,
    run_turn,
    tool_call,
)

MISSING = "fact_0123456789abcdef0123456789abcdef"


def tool_config(**memory: Any) -> AppConfig:
    return AppConfig(
        memory=MemoryConfig(mode="tool", **memory),
        summarization=SummarizationConfig(enabled=False),
    )


@pytest.fixture
def deermem(tmp_path: Path) -> Iterator[MemoryManager]:
    memory = MemoryConfig(mode="tool", backend_config={"storage_path": str(tmp_path / "mem")})
    manager = build_memory_manager(memory)
    yield manager
    manager.close()


def results(messages: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(str(m.content)) for m in messages if isinstance(m, ToolMessage)]


@pytest.mark.parametrize("how", HOW)
def test_a_requests_agent_name_picks_the_tools_bucket(deermem: MemoryManager, how: How) -> None:
    """As in middleware mode, `configurable.agent_name` takes precedence over the built agent's."""
    model = ScriptedChatModel.replying(
        tool_call("memory_add", {"content": "Reviews Go code", "category": "context"}, "1"),
        "Noted.",
        tool_call("memory_search", {"query": "Go code"}, "2"),
        "Nothing.",
    )
    wiring = wire_memory(tool_config(), deermem, agent_name=None, tools=[], model=model)
    agent = build_agent(model, wiring)

    run_turn(agent, "I review Go.", thread="t1", user="alice", how=how, agent_name="reviewer")
    other = run_turn(agent, "What do I review?", thread="t2", user="alice", how=how)

    reviewer = deermem.reload_memory(user_id="alice", agent_name="reviewer")["facts"]
    assert [f["content"] for f in reviewer] == ["Reviews Go code"]
    assert deermem.reload_memory(user_id="alice")["facts"] == []
    assert results(other) == [{"facts": [], "count": 0}], "the default bucket does not see it"


@pytest.mark.parametrize("how", HOW)
def test_the_model_adds_a_fact_and_finds_it_again(deermem: MemoryManager, how: How) -> None:
    model = ScriptedChatModel.replying(
        tool_call(
            "memory_add", {"content": "Prefers pnpm over npm", "category": "preference"}, "1"
        ),
        tool_call("memory_search", {"query": "pnpm"}, "2"),
        "You prefer pnpm.",
        tool_call("memory_search", {"query": "pnpm"}, "3"),
        "I know nothing about that.",
        "Hello again.",
    )
    wiring = wire_memory(tool_config(), deermem, agent_name=None, tools=[], model=model)
    agent = build_agent(model, wiring)

    messages = run_turn(agent, "Remember that I use pnpm.", thread="t", user="alice", how=how)
    added, found = results(messages)
    assert added["status"] == "added"
    assert found["count"] == 1
    assert found["facts"][0]["id"] == added["fact_id"]
    assert found["facts"][0]["content"] == "Prefers pnpm over npm"
    assert found["facts"][0]["category"] == "preference"
    assert messages[-1].content == "You prefer pnpm."

    bob = run_turn(agent, "What do I use?", thread="b", user="bob", how=how)
    assert results(bob) == [{"facts": [], "count": 0}], "another user's tools see nothing"

    run_turn(agent, "Hello", thread="t2", user="alice", how=how)
    assert "Prefers pnpm" not in model.system_prompts()[-1], "tool mode injects no facts"


def test_arguments_cannot_choose_the_user_and_bad_ones_come_back_as_errors(
    deermem: MemoryManager,
) -> None:
    deermem.create_fact("Bob's secret plan", "context", 0.9, user_id="bob")
    model = ScriptedChatModel.replying(
        tool_call("memory_search", {"query": "plan", "user_id": "bob"}, "1"),
        tool_call("memory_add", {"content": "x", "confidence": 7}, "2"),
        tool_call("memory_update", {"fact_id": MISSING, "content": "y"}, "3"),
        tool_call("memory_delete", {"fact_id": MISSING}, "4"),
        tool_call("memory_update", {"fact_id": MISSING}, "5"),
        tool_call("memory_search", {"query": "plan"}, "6"),
        "done",
    )
    wiring = wire_memory(tool_config(), deermem, agent_name=None, tools=[], model=model)
    messages = run_turn(build_agent(model, wiring), "Hi", thread="t", user="alice", how="invoke")
    smuggled, bad_confidence, update, delete, empty_update, search = results(messages)
    assert smuggled == {
        "error": "invalid_input",
        "detail": "user_id: Extra inputs are not permitted (got 'bob')",
    }
    assert bad_confidence["error"] == "invalid_input"
    assert "confidence" in bad_confidence["detail"]
    assert update["error"] == delete["error"] == "fact_not_found"
    assert empty_update["error"] == "invalid_input"
    assert search == {"facts": [], "count": 0}
    assert messages[-1].content == "done", "no tool error ended the turn"


def test_an_existing_tool_keeps_a_reserved_name_and_the_memory_tool_steps_aside(
    deermem: MemoryManager, caplog: pytest.LogCaptureFixture
) -> None:
    @tool
    def memory_search(query: str) -> str:
        """The team wiki's own search."""
        return f"wiki results for {query}"

    with caplog.at_level(logging.WARNING):
        wiring = wire_memory(
            tool_config(),
            deermem,
            agent_name=None,
            tools=[memory_search],
            model=ScriptedChatModel.replying(),
        )
    assert wiring.tools[0] is memory_search
    assert [t.name for t in wiring.tools] == [
        "memory_search", "memory_add", "memory_update", "memory_delete",
    ]  # fmt: skip
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "the tool 'memory_search' (StructuredTool from" in warning
    assert "the memory tool 'memory_search' is not registered" in warning
    assert "memory_add" in wiring.system_prompt_section
    assert "memory_search" not in wiring.system_prompt_section, "the prompt names only our tools"

    model = ScriptedChatModel.replying(tool_call("memory_search", {"query": "deploy"}, "1"), "ok")
    agent = build_agent(model, wire_memory(
        tool_config(), deermem, agent_name=None, tools=[memory_search], model=model
    ))  # fmt: skip
    messages = run_turn(agent, "How do we deploy?", thread="t", user="alice", how="invoke")
    assert [m.content for m in messages if isinstance(m, ToolMessage)] == [
        "wiki results for deploy"
    ]


def test_tool_mode_prompt_and_tools_of_a_backend_without_passive_writes(
    deermem: MemoryManager,
) -> None:
    wiring = wire_memory(
        tool_config(), deermem, agent_name=None, tools=[], model=ScriptedChatModel.replying()
    )
    assert [t.name for t in wiring.tools] == list(MEMORY_TOOL_NAMES)
    section = wiring.system_prompt_section
    assert section.startswith("<memory_tools>")
    for guidance in ("search before assuming", "only durable facts", "rather than adding",
                     "clearly wrong"):  # fmt: skip
        assert guidance in section
    (middleware,) = wiring.middleware
    assert isinstance(middleware, MemoryMiddleware)
    assert (middleware.inject, middleware.write) == (True, False), "injection stays, writes go"


def test_a_backend_that_keeps_passive_writes_is_still_written_in_tool_mode() -> None:
    class Passive(RecordingManager):
        requires_passive_writes_in_tool_mode = True
        supports_search = True

        def search(self, query: str, top_k: int = 5, **kwargs: Any) -> list[dict[str, Any]]:
            return []

    manager = Passive(mode="tool")
    model = ScriptedChatModel.replying("ok")
    agent = build_agent(model, wire_memory(
        tool_config(), manager, agent_name=None, tools=[], model=model
    ))  # fmt: skip
    run_turn(agent, "Hello", thread="t", user="alice", how="invoke")
    assert len(manager.writes("add")) == 1


def test_get_memory_tools_defaults_to_the_process_manager(tmp_path: Path) -> None:
    tools = get_memory_tools()
    assert [t.name for t in tools] == list(MEMORY_TOOL_NAMES)
    schema = tools[0].tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    assert set(schema["properties"]) == {"query", "category", "limit"}
    assert schema["required"] == ["query"]
