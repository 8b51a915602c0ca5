"""`wire_memory`: what each configuration adds to an agent, and what it refuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.tools import tool

from deerflow.agents.memory.manager import build_memory_manager
from deerflow.agents.memory_wiring import wire_memory
from deerflow.agents.middlewares.memory_middleware import MemoryMiddleware
from deerflow.agents.middlewares.summarization import MemoryFlushSummarizationMiddleware
from deerflow.config import AppConfig, MemoryConfig
from tests.harness.fakes import RecordingManager, ScriptedChatModel, build_agent, run_turn

NO_SEARCH = re.escape(
    "memory.mode 'tool' needs a backend that implements search(), and RecordingManager does not"
)


@tool
def lookup(query: str) -> str:
    """A custom tool."""
    return query


def test_memory_disabled_registers_neither_tools_nor_memory_middleware() -> None:
    manager = RecordingManager(context_text="- remembered")
    model = ScriptedChatModel.replying("ok")
    config = AppConfig(memory=MemoryConfig(enabled=False, mode="tool"))
    wiring = wire_memory(config, manager, agent_name=None, tools=[lookup], model=model)
    assert wiring.tools == [lookup]
    assert wiring.system_prompt_section == ""
    (summarization,) = wiring.middleware
    assert type(summarization) is SummarizationMiddleware, "summarisation stays, without a flush"

    run_turn(build_agent(model, wiring), "Hello", thread="t", user="alice", how="invoke")
    assert manager.calls == [], "memory is neither read nor written"
    assert model.system_prompts() == ["You help."]


def test_memory_disabled_needs_no_manager() -> None:
    config = AppConfig(memory=MemoryConfig(enabled=False))
    wiring = wire_memory(
        config, None, agent_name=None, tools=[], model=ScriptedChatModel.replying()
    )
    assert not any(isinstance(m, MemoryMiddleware) for m in wiring.middleware)


def test_middleware_mode_adds_the_memory_middleware_then_the_flushing_summarisation() -> None:
    wiring = wire_memory(
        AppConfig(), RecordingManager(), agent_name="a", tools=[lookup],
        model=ScriptedChatModel.replying(),
    )  # fmt: skip
    memory, summarization = wiring.middleware
    assert isinstance(memory, MemoryMiddleware)
    assert (memory.inject, memory.write, memory.agent_name) == (True, True, "a")
    assert isinstance(summarization, MemoryFlushSummarizationMiddleware)
    assert wiring.tools == [lookup]
    assert wiring.system_prompt_section == ""


def test_tool_mode_with_a_backend_without_search_refuses_to_start(tmp_path: Path) -> None:
    config = MemoryConfig(mode="tool", manager_class="tests.harness.fakes:RecordingManager")
    with pytest.raises(ValueError, match=NO_SEARCH):
        build_memory_manager(config, home=tmp_path)
    built_for_middleware = RecordingManager()
    with pytest.raises(ValueError, match=NO_SEARCH):
        wire_memory(
            AppConfig(memory=config), built_for_middleware, agent_name=None, tools=[],
            model=ScriptedChatModel.replying(),
        )  # fmt: skip


def test_a_manager_built_for_another_mode_is_refused() -> None:
    class Searching(RecordingManager):
        supports_search = True

        def search(self, query: str, top_k: int = 5, **kwargs: object) -> list[dict[str, object]]:
            return []

    refused = (
        r"built for mode 'middleware' but memory\.mode is 'tool'"
        r".*\(build_memory_manager\(config\)\)"
    )
    with pytest.raises(ValueError, match=refused):
        wire_memory(
            AppConfig(memory=MemoryConfig(mode="tool")), Searching(), agent_name=None, tools=[],
            model=ScriptedChatModel.replying(),
        )  # fmt: skip


def test_enabled_memory_without_a_manager_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"memory\.enabled is true but no memory manager was given"
    ):
        wire_memory(
            AppConfig(), None, agent_name=None, tools=[], model=ScriptedChatModel.replying()
        )


def test_a_bad_injection_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="injection_timeout_seconds: must be > 0"):
        MemoryMiddleware(RecordingManager(), injection_timeout_seconds=0)
