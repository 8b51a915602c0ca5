"""`MemoryMiddleware`: persistent memory for any LangChain v1 agent.

What it does, per run of the agent:

* **Injection.** On the first turn of a thread it calls the backend's `get_context` once (bounded
  by `injection_timeout_seconds`, with the user's current message as `query` when the backend
  takes one), wraps the text in `<memory>…</memory>` framed as data about the user, and freezes
  that section in the agent state (`memory_context`). Every model call of the thread gets the
  same section appended to its system prompt, byte for byte, so prompt caches hit and a
  checkpointed thread resumes with exactly what it started with (without a checkpointer there is
  no thread state, so every run is a first turn). A failed or timed-out read ends the turn with
  `MemoryReadError` when the backend's read policy is fatal; otherwise it is logged and the
  thread runs without memory.
* **Writing.** After the run it hands the thread's messages to `add` (`aadd` under
  `ainvoke`/`astream`); filtering and extraction are the backend's job. A failed write is logged
  and the turn succeeds, unless the backend's write policy is `raise`.

Identity comes from the runtime (see `deerflow.agents.context`)::

    agent = create_agent(model, tools, middleware=[MemoryMiddleware(manager)],
                         context_schema=AgentContext, checkpointer=saver)
    agent.invoke({"messages": [...]},
                 config={"configurable": {"thread_id": t}},
                 context=AgentContext(user_id=u))

The user id is `context.user_id` (`default` without a context); the thread id is
`context.thread_id`, else `configurable.thread_id`; the trace id is `context.trace_id`, else the
one bound by `deerflow.tracing`. A run without a thread id is not written (a warning says so).
Every hook has a sync and an async form, so the agent works under `invoke` and `ainvoke` alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Final, NotRequired

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.middleware.types import ModelCallResult, PrivateStateAttr
from langgraph.config import get_config
from langgraph.runtime import Runtime

from deerflow.agents.context import RunIdentity, checked_agent_name, run_identity
from deerflow.agents.memory.manager import MemoryManager
from deerflow.agents.middlewares.memory_injection import (
    add_to_system_message,
    aread_memory_section,
    latest_user_text,
    read_memory_section,
)
from deerflow.agents.middlewares.memory_writes import memory_write, thread_of

__all__ = ["MEMORY_STATE_KEY", "MemoryMiddleware", "MemoryState", "current_identity"]

MEMORY_STATE_KEY: Final = "memory_context"


class MemoryState(AgentState[Any]):
    """The agent state plus the thread's frozen memory section ("" when nothing was injected)."""

    # Private: never taken from the caller's input, so a request cannot plant its own "memory".
    memory_context: NotRequired[Annotated[str, PrivateStateAttr]]


def current_identity(runtime: Runtime[Any]) -> RunIdentity:
    """The identity of the running agent, from its runtime context and `configurable`."""
    # The Runtime carries no config; LangGraph's context variable does.
    return run_identity(runtime.context, get_config().get("configurable"))


class MemoryMiddleware(AgentMiddleware[MemoryState, Any, Any]):
    """Injects the thread's memory into the system prompt and writes each run to the backend.

    Args:
        manager: The memory backend.
        agent_name: The agent's memory bucket (None: the default bucket); a request's
            `configurable.agent_name` takes precedence, as in DeerFlow.
        inject: Read and inject memory on a thread's first turn.
        write: Hand each run's messages to `add`.
        injection_timeout_seconds: How long the first turn waits for `get_context`.
    """

    state_schema = MemoryState

    def __init__(
        self,
        manager: MemoryManager,
        *,
        agent_name: str | None = None,
        inject: bool = True,
        write: bool = True,
        injection_timeout_seconds: float = 5.0,
    ) -> None:
        super().__init__()
        if injection_timeout_seconds <= 0:
            raise ValueError(
                f"injection_timeout_seconds: must be > 0, got {injection_timeout_seconds!r}"
            )
        self.manager = manager
        # Checked now: an agent whose memory cannot work fails when it is built, not per turn.
        self.agent_name = None if agent_name is None else checked_agent_name(agent_name)
        self.inject = inject
        self.write = write
        self.injection_timeout_seconds = injection_timeout_seconds
        self.tools = []

    # -- injection: once per thread, then frozen in the state ----------------------------------

    def before_agent(self, state: MemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        if not self._first_turn(state):
            return None
        identity = current_identity(runtime)
        section = read_memory_section(
            self.manager,
            identity,
            agent_name=identity.agent_name or self.agent_name,
            query=latest_user_text(state["messages"]),
            timeout=self.injection_timeout_seconds,
        )
        return {MEMORY_STATE_KEY: section}

    async def abefore_agent(
        self, state: MemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        if not self._first_turn(state):
            return None
        identity = current_identity(runtime)
        section = await aread_memory_section(
            self.manager,
            identity,
            agent_name=identity.agent_name or self.agent_name,
            query=latest_user_text(state["messages"]),
            timeout=self.injection_timeout_seconds,
        )
        return {MEMORY_STATE_KEY: section}

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._with_memory(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return await handler(self._with_memory(request))

    # -- writing: the thread after each run ----------------------------------------------------

    def after_agent(self, state: MemoryState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        identity = current_identity(runtime)
        thread_id = self._thread_to_write(state, identity)
        if thread_id is not None:
            with memory_write(self.manager, identity, "add"):
                self.manager.add(
                    thread_id,
                    list(state["messages"]),
                    agent_name=identity.agent_name or self.agent_name,
                    user_id=identity.user_id,
                    trace_id=identity.trace_id,
                )
        return None

    async def aafter_agent(
        self, state: MemoryState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        identity = current_identity(runtime)
        thread_id = self._thread_to_write(state, identity)
        if thread_id is not None:
            with memory_write(self.manager, identity, "add"):
                await self.manager.aadd(
                    thread_id,
                    list(state["messages"]),
                    agent_name=identity.agent_name or self.agent_name,
                    user_id=identity.user_id,
                    trace_id=identity.trace_id,
                )
        return None

    # -- helpers -------------------------------------------------------------------------------

    def _first_turn(self, state: MemoryState) -> bool:
        return self.inject and MEMORY_STATE_KEY not in state

    def _with_memory(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        section = request.state.get(MEMORY_STATE_KEY) if self.inject else None
        if not isinstance(section, str) or not section:
            return request
        return request.override(
            system_message=add_to_system_message(request.system_message, section)
        )

    def _thread_to_write(self, state: MemoryState, identity: RunIdentity) -> str | None:
        if not self.write or not state["messages"]:
            return None
        return thread_of(identity, "add")
