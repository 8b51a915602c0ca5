"""Summarisation of long threads, with a memory flush before anything is dropped.

LangChain's `SummarizationMiddleware` replaces the older part of a thread by a summary. The
subclass here first hands exactly the messages it is about to replace to the memory backend's
`add_nowait`, so content compacted out of the thread still reaches memory. The flush happens
after the summary is written and before the state update that drops the messages is returned:
if summarising fails, nothing is dropped and nothing is flushed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from langchain.agents.middleware import AgentMiddleware, AgentState, SummarizationMiddleware
from langchain.agents.middleware.summarization import ContextSize, TriggerClause
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, RemoveMessage
from langgraph.runtime import Runtime

from deerflow.agents.context import RunIdentity
from deerflow.agents.memory.manager import MemoryManager
from deerflow.agents.middlewares.memory_middleware import current_identity
from deerflow.agents.middlewares.memory_writes import memory_write, thread_of
from deerflow.config.schema import SummarizationConfig

__all__ = ["MemoryFlushSummarizationMiddleware", "build_summarization", "dropped_messages"]

FLUSH: Final = "flush before summarisation"


def dropped_messages(
    messages: Sequence[AnyMessage], update: Sequence[AnyMessage]
) -> list[AnyMessage]:
    """The messages of the thread that the summarisation `update` does not keep."""
    kept = {m.id for m in update if not isinstance(m, RemoveMessage)}
    return [m for m in messages if m.id not in kept]


class MemoryFlushSummarizationMiddleware(SummarizationMiddleware[Any, Any]):
    """`SummarizationMiddleware` that flushes the messages it drops to `add_nowait` first.

    Args:
        model: The chat model whose context is managed (and that writes the summaries).
        manager: The memory backend receiving the dropped messages.
        agent_name: The agent's memory bucket.
        **kwargs: `SummarizationMiddleware`'s own (`trigger`, `keep`, …).
    """

    def __init__(
        self,
        model: BaseChatModel,
        *,
        manager: MemoryManager,
        agent_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.manager = manager
        self.agent_name = agent_name

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        update = super().before_model(state, runtime)
        if (flush := self._flush(state, update, runtime)) is not None:
            identity, thread_id, dropped = flush
            with memory_write(self.manager, identity, FLUSH):
                self.manager.add_nowait(
                    thread_id,
                    dropped,
                    agent_name=identity.agent_name or self.agent_name,
                    user_id=identity.user_id,
                )
        return update

    async def abefore_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        update = await super().abefore_model(state, runtime)
        if (flush := self._flush(state, update, runtime)) is not None:
            identity, thread_id, dropped = flush
            with memory_write(self.manager, identity, FLUSH):
                await self.manager.aadd_nowait(
                    thread_id,
                    dropped,
                    agent_name=identity.agent_name or self.agent_name,
                    user_id=identity.user_id,
                )
        return update

    def _flush(
        self, state: AgentState[Any], update: dict[str, Any] | None, runtime: Runtime[Any]
    ) -> tuple[RunIdentity, str, list[AnyMessage]] | None:
        """Who and what to flush when `update` summarises the thread; None when nothing is."""
        if update is None:
            return None
        identity = current_identity(runtime)
        thread_id = thread_of(identity, FLUSH)
        if thread_id is None:
            return None
        return identity, thread_id, dropped_messages(state["messages"], update["messages"])


def build_summarization(
    config: SummarizationConfig,
    model: BaseChatModel,
    *,
    manager: MemoryManager | None,
    agent_name: str | None,
) -> AgentMiddleware[Any, Any, Any] | None:
    """The summarisation middleware `config` asks for: flushing to `manager` when one is given.

    Returns None when `config.enabled` is false.
    """
    if not config.enabled:
        return None
    trigger: list[ContextSize | TriggerClause] = []
    if config.trigger_tokens is not None:
        trigger.append(("tokens", config.trigger_tokens))
    if config.trigger_messages is not None:
        trigger.append(("messages", config.trigger_messages))
    keep: ContextSize = ("messages", config.keep_messages)
    if manager is None:
        return SummarizationMiddleware(model, trigger=trigger, keep=keep)
    return MemoryFlushSummarizationMiddleware(
        model, manager=manager, agent_name=agent_name, trigger=trigger, keep=keep
    )
