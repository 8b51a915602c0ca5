"""Scripted chat models and small backends for the harness tests, and a way to run a turn."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal, Self

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from deerflow.agents.context import AgentContext
from deerflow.agents.memory.manager import MemoryManager, MemoryMode
from deerflow.agents.memory_wiring import MemoryWiring

How = Literal["invoke", "ainvoke", "astream"]
HOW: tuple[How, ...] = ("invoke", "ainvoke", "astream")


class ScriptedChatModel(GenericFakeChatModel):
    """Replies from a script, in order, and records every prompt it is given."""

    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    @classmethod
    def replying(cls, *replies: AIMessage | str) -> Self:
        return cls(messages=iter(replies))

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Self:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self.prompts.append(list(messages))
        return super()._generate(messages, *args, **kwargs)

    def system_prompts(self) -> list[str]:
        """The system prompt of every call, in order ("" for a call without one)."""
        return [str(p[0].content) if p and p[0].type == "system" else "" for p in self.prompts]


def tool_call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(
        "", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]
    )


def build_agent(
    model: ScriptedChatModel, wiring: MemoryWiring, *, checkpointer: bool = True
) -> Any:
    """An agent as a host builds it: prompt "You help.", the wiring, and a checkpointer."""
    prompt = "You help."
    system = (
        f"{prompt}\n\n{wiring.system_prompt_section}" if wiring.system_prompt_section else prompt
    )
    return create_agent(
        model,
        wiring.tools,
        system_prompt=system,
        middleware=wiring.middleware,
        context_schema=AgentContext,
        checkpointer=InMemorySaver() if checkpointer else None,
    )


def run_turn(
    agent: Any, text: str, *, thread: str, user: str, how: How, agent_name: str | None = None
) -> list[BaseMessage]:
    """One turn of `thread` for `user`, the way a host would run it (`agent_name`: the request's
    `configurable.agent_name`); the thread's messages after."""
    payload = {"messages": [HumanMessage(text)]}
    configurable = {"thread_id": thread} | (
        {} if agent_name is None else {"agent_name": agent_name}
    )
    config = {"configurable": configurable}
    context = AgentContext(user_id=user)
    if how == "invoke":
        agent.invoke(payload, config=config, context=context)
    elif how == "ainvoke":
        asyncio.run(agent.ainvoke(payload, config=config, context=context))
    else:

        async def stream() -> None:
            async for _ in agent.astream(payload, config=config, context=context):
                pass

        asyncio.run(stream())
    return list(agent.get_state(config).values["messages"])


class RecordingManager(MemoryManager):
    """Remembers every write it is handed; `get_context` answers `context_text`."""

    supports_search: ClassVar[bool] = False
    calls: list[tuple[str, str, list[Any], dict[str, Any]]] = Field(default_factory=list)
    context_text: str = ""

    @classmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **host_hooks: Any
    ) -> Self:
        return cls(backend_config=backend_config, mode=mode)

    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        self._record(
            "add", thread_id, messages, agent_name=agent_name, user_id=user_id, trace_id=trace_id
        )

    def add_nowait(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
    ) -> None:
        self._record("add_nowait", thread_id, messages, agent_name=agent_name, user_id=user_id)

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        self._record("get_context", thread_id or "", [], user_id=user_id, query=query)
        return self.context_text

    def writes(self, kind: str) -> list[tuple[str, list[Any], dict[str, Any]]]:
        return [(thread, messages, kw) for k, thread, messages, kw in self.calls if k == kind]

    def _record(self, kind: str, thread_id: str, messages: list[Any], **kwargs: Any) -> None:
        self.calls.append((kind, thread_id, list(messages), kwargs))


class HangingManager(RecordingManager):
    """`get_context` blocks until `RELEASE` is set: a backend whose reads hang."""

    RELEASE: ClassVar[threading.Event] = threading.Event()

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        HangingManager.RELEASE.wait(30)
        return "- [preference | 0.90] Too late to matter"


def released() -> Iterator[None]:
    """Fixture body: let hanging reads finish once the test is over."""
    HangingManager.RELEASE.clear()
    yield
    HangingManager.RELEASE.set()
