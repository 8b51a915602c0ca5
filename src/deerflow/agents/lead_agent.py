"""The lead agent: the configured model, its tools, memory and summarisation.

    agent = make_lead_agent(config)                      # or: await amake_lead_agent(config)
    agent.invoke({"messages": [HumanMessage("hi")]},
                 config={"configurable": {"thread_id": "t1"}},
                 context=AgentContext(user_id="alice"))

The model is the custom agent's `model`, else the first of `models:`, else the offline model
(`deerflow.models.model_entry`). Tools are the given ones plus those of the MCP servers of
`mcp_servers:` (a custom agent may pick a subset); memory and summarisation come from
`wire_memory`. Threads live in the checkpointer (in memory unless one is given). A custom agent
(`{home}/agents/{name}/`) adds its `SOUL.md` to the system prompt and keeps its memory in its own
bucket, named after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from langchain.agents import create_agent
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.state import CompiledStateGraph

from deerflow.agents.context import AgentContext
from deerflow.agents.custom_agents import CustomAgent, load_agent
from deerflow.agents.mcp_tools import load_mcp_tools, select_servers
from deerflow.agents.memory.manager import MemoryManager, get_memory_manager
from deerflow.agents.memory_wiring import wire_memory
from deerflow.config import AppConfig, runtime_home
from deerflow.models import create_chat_model

__all__ = ["LEAD_PROMPT", "amake_lead_agent", "lead_system_prompt", "make_lead_agent"]

LEAD_PROMPT: Final = (
    "You are DeerFlow, a helpful assistant. Answer clearly and briefly, in the user's language. "
    "Use your tools when they help."
)
T = TypeVar("T")


def lead_system_prompt(agent: CustomAgent | None, memory_section: str) -> str:
    """The system prompt: the lead prompt, the custom agent's SOUL.md, the memory tools' guide."""
    parts = [LEAD_PROMPT, agent.soul if agent else "", memory_section]
    return "\n\n".join(part for part in parts if part)


def make_lead_agent(
    config: AppConfig,
    agent_name: str | None = None,
    *,
    manager: MemoryManager | None = None,
    tools: Sequence[BaseTool] = (),
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    home: Path | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """Build the lead agent, or the custom agent `agent_name`.

    Args:
        config: The application config.
        agent_name: A custom agent under `{home}/agents/`; None: the lead agent itself.
        manager: The memory backend; None: the process's (`get_memory_manager`), when memory is on.
        tools: Tools of the host's own, given to the agent beside the MCP tools.
        checkpointer: Where threads are kept; None: in memory, for this agent's lifetime.
        home: The runtime home; None: `$DEER_FLOW_HOME`, else `./.deer-flow`.

    Raises:
        ValueError: an unknown agent, model or MCP server name, or a memory setup `wire_memory`
            refuses; RuntimeError when called inside a running event loop with MCP servers to
            load (use `amake_lead_agent` there).
        deerflow.config.ConfigError: the custom agent's `config.yaml` is invalid.
        deerflow.agents.mcp_tools.McpToolsError: an MCP server failed to list its tools.
    """
    agent = _custom_agent(agent_name, home)
    servers = _servers(config, agent)
    mcp_tools = _run(load_mcp_tools(config, servers)) if servers else []
    return _assemble(config, agent, manager, [*tools, *mcp_tools], checkpointer)


async def amake_lead_agent(
    config: AppConfig,
    agent_name: str | None = None,
    *,
    manager: MemoryManager | None = None,
    tools: Sequence[BaseTool] = (),
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    home: Path | None = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """`make_lead_agent` for code running in an event loop (the MCP servers are listed async)."""
    agent = _custom_agent(agent_name, home)
    servers = _servers(config, agent)
    mcp_tools = await load_mcp_tools(config, servers) if servers else []
    return _assemble(config, agent, manager, [*tools, *mcp_tools], checkpointer)


def _custom_agent(agent_name: str | None, home: Path | None) -> CustomAgent | None:
    return None if agent_name is None else load_agent(agent_name, home or runtime_home())


def _servers(config: AppConfig, agent: CustomAgent | None) -> list[str]:
    return select_servers(config, agent.config.mcp_servers if agent else None)


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    coroutine.close()
    raise RuntimeError(
        "make_lead_agent lists MCP tools with asyncio.run, which cannot run inside an event "
        "loop: await amake_lead_agent(...) instead"
    )


def _assemble(
    config: AppConfig,
    agent: CustomAgent | None,
    manager: MemoryManager | None,
    tools: list[BaseTool],
    checkpointer: BaseCheckpointSaver[Any] | None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    agent_name = agent.name if agent else None
    model = create_chat_model(config, agent.config.model if agent else None)
    if manager is None and config.memory.enabled:
        manager = get_memory_manager(config)
    wiring = wire_memory(config, manager, agent_name=agent_name, tools=tools, model=model)
    return create_agent(
        model,
        wiring.tools,
        system_prompt=lead_system_prompt(agent, wiring.system_prompt_section),
        middleware=wiring.middleware,
        context_schema=AgentContext,
        checkpointer=checkpointer or InMemorySaver(),
        name=agent_name or "lead_agent",
    )
