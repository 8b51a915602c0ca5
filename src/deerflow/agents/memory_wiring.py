"""Everything memory adds to an agent, assembled in one place from `config.yaml`.

The lead agent (and any host building its own agent) calls::

    wiring = wire_memory(config, manager, agent_name=name, tools=tools, model=model)
    agent = create_agent(
        model,
        wiring.tools,
        system_prompt=prompt + ("\\n\\n" + wiring.system_prompt_section if ... else ""),
        middleware=[*other_middleware, *wiring.middleware],
        context_schema=AgentContext,
        checkpointer=saver,
    )

and invokes it with `context=AgentContext(user_id=…)` (see `deerflow.agents.context`).

* `memory.enabled: false`: summarisation only (if enabled); the given tools.
* `mode: middleware`: `MemoryMiddleware` (inject and write), then summarisation that flushes
  what it drops to memory; the given tools.
* `mode: tool`: the given tools plus the four memory tools and a system-prompt section.
  `MemoryMiddleware` stays for injection (summaries only) but writes, and the
  summarisation flushes, only when the backend sets `requires_passive_writes_in_tool_mode`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool

from deerflow.agents.memory.manager import MemoryManager
from deerflow.agents.middlewares.memory_middleware import MemoryMiddleware
from deerflow.agents.middlewares.summarization import build_summarization
from deerflow.agents.tools.memory_tools import (
    MEMORY_TOOL_NAMES,
    add_memory_tools,
    get_memory_tools,
    tool_mode_prompt_section,
)
from deerflow.config.schema import AppConfig

__all__ = ["MemoryWiring", "wire_memory"]


@dataclass(frozen=True)
class MemoryWiring:
    """What to hand `create_agent`.

    Attributes:
        middleware: In order: the memory middleware, then summarisation (either may be absent).
        tools: The given tools plus the memory tools of tool mode, name collisions resolved.
        system_prompt_section: The tool-mode guidance for the system prompt; "" otherwise.
    """

    middleware: list[AgentMiddleware[Any, Any, Any]]
    tools: list[BaseTool]
    system_prompt_section: str


def wire_memory(
    config: AppConfig,
    manager: MemoryManager | None,
    *,
    agent_name: str | None,
    tools: Sequence[BaseTool],
    model: BaseChatModel,
) -> MemoryWiring:
    """Assemble the memory middleware, the summarisation flush and the memory tools.

    Args:
        config: The application config (`memory:` and `summarization:` are read).
        manager: The memory backend; ignored (may be None) when `memory.enabled` is false.
        agent_name: The agent's memory bucket (None: the default agent).
        tools: The agent's other tools (custom and MCP); they keep their names.
        model: The agent's chat model (summarisation counts its context and writes summaries).

    Raises:
        ValueError: memory is enabled but `manager` is None; or the manager was built for another
            mode than `memory.mode`; or `mode: tool` with a backend that has no `search()`.
    """
    memory = config.memory
    if not memory.enabled:
        summarization = build_summarization(
            config.summarization, model, manager=None, agent_name=agent_name
        )
        return MemoryWiring(
            middleware=[summarization] if summarization else [],
            tools=list(tools),
            system_prompt_section="",
        )
    if manager is None:
        raise ValueError("memory.enabled is true but no memory manager was given to wire_memory")
    _check_mode(memory.mode, manager)
    tool_mode = memory.mode == "tool"
    writes = not tool_mode or type(manager).requires_passive_writes_in_tool_mode

    middleware: list[AgentMiddleware[Any, Any, Any]] = []
    if writes or memory.injection_enabled:
        middleware.append(
            MemoryMiddleware(
                manager,
                agent_name=agent_name,
                inject=memory.injection_enabled,
                write=writes,
                injection_timeout_seconds=memory.injection_timeout_seconds,
            )
        )
    summarization = build_summarization(
        config.summarization, model, manager=manager if writes else None, agent_name=agent_name
    )
    if summarization is not None:
        middleware.append(summarization)

    if not tool_mode:
        return MemoryWiring(middleware=middleware, tools=list(tools), system_prompt_section="")
    all_tools = add_memory_tools(tools, get_memory_tools(manager, agent_name=agent_name))
    # A memory tool skipped for a name collision is not ours: only count the ones we added.
    ours = [tool.name for tool in all_tools[len(tools) :] if tool.name in MEMORY_TOOL_NAMES]
    return MemoryWiring(
        middleware=middleware,
        tools=all_tools,
        system_prompt_section=tool_mode_prompt_section(ours),
    )


def _check_mode(mode: str, manager: MemoryManager) -> None:
    name = type(manager).__name__
    if mode == "tool" and not type(manager).supports_search:
        raise ValueError(
            f"memory.mode 'tool' needs a backend that implements search(), and {name} does not: "
            f"use mode 'middleware' or a backend with search()."
        )
    if manager.mode != mode:
        raise ValueError(
            f"the memory manager ({name}) was built for mode {manager.mode!r} but memory.mode is "
            f"{mode!r}: build it from the same config (build_memory_manager(config))"
        )
