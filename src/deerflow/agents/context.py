"""Who a run is for: the runtime context a host passes to every agent invocation.

The chat, the gateway and library users call an agent built with the memory wiring like this::

    agent.invoke(
        {"messages": [...]},
        config={"configurable": {"thread_id": thread_id}},
        context=AgentContext(user_id=user_id),
    )

`user_id` scopes memory (a run, a hook or a tool can only reach that user's memory); the thread
id comes from `context.thread_id` when set, else from LangGraph's `configurable.thread_id`.
`configurable.agent_name`, when given, chooses the memory bucket of the run (as in DeerFlow).
A plain mapping with the same keys works as `context` too; no context means the user `default`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from deerflow.tracing import current_trace_id

__all__ = [
    "AGENT_NAME",
    "DEFAULT_USER_ID",
    "AgentContext",
    "RunIdentity",
    "checked_agent_name",
    "run_identity",
]

DEFAULT_USER_ID: Final = "default"
# The one rule for an agent's name: a custom agent's folder and its memory bucket alike, so every
# agent that can exist has memory (DeerMem accepts every name of this form).
AGENT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def checked_agent_name(name: str) -> str:
    """Return `name` when it is a valid agent name.

    Raises:
        ValueError: `name` is not 1-64 letters, digits, `_` or `-` starting with a letter or digit.
    """
    if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
        raise ValueError(
            f"agent name {name!r}: use 1-64 letters, digits, '_' or '-', starting with a letter "
            "or digit"
        )
    return name


@dataclass(frozen=True, slots=True)
class AgentContext:
    """The runtime context of one agent run (pass it as `context=` to `invoke`/`stream`).

    Attributes:
        user_id: Whose memory the run reads and writes; `default` without authentication.
        thread_id: The conversation; None reads `configurable.thread_id` instead.
        trace_id: Correlates the run's memory writes with the host's tracing.
    """

    user_id: str = DEFAULT_USER_ID
    thread_id: str | None = None
    trace_id: str | None = None

    def __post_init__(self) -> None:
        _check_text("user_id", self.user_id, optional=False)
        _check_text("thread_id", self.thread_id, optional=True)
        _check_text("trace_id", self.trace_id, optional=True)


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """The user, thread and trace that memory calls of the current run are made for."""

    user_id: str
    thread_id: str | None
    trace_id: str | None
    agent_name: str | None = None  # `configurable.agent_name`: the bucket the request asks for


def run_identity(context: Any, configurable: Mapping[str, Any] | None = None) -> RunIdentity:
    """Resolve the identity of a run from its runtime `context` and `configurable`.

    `context` may be an `AgentContext`, any object with the same attributes, a mapping with the
    same keys, or None. The trace id falls back to the one bound by `deerflow.tracing`.

    Raises:
        ValueError: a present `user_id`, `thread_id` or `trace_id` is not non-empty text, or
            `configurable.agent_name` is not a valid agent name.
    """
    user_id = _field(context, "user_id")
    thread_id = _field(context, "thread_id")
    if thread_id is None and configurable is not None:
        thread_id = configurable.get("thread_id")
    trace_id = _field(context, "trace_id")
    agent_name = None if configurable is None else configurable.get("agent_name")
    identity = RunIdentity(
        user_id=DEFAULT_USER_ID if user_id is None else user_id,
        thread_id=None if thread_id is None else str(thread_id),
        trace_id=current_trace_id() if trace_id is None else trace_id,
        agent_name=None if agent_name is None else checked_agent_name(agent_name),
    )
    _check_text("user_id", identity.user_id, optional=False)
    _check_text("thread_id", identity.thread_id, optional=True)
    _check_text("trace_id", identity.trace_id, optional=True)
    return identity


def _field(context: Any, name: str) -> Any:
    if context is None:
        return None
    if isinstance(context, Mapping):
        return context.get(name)
    return getattr(context, name, None)


def _check_text(name: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"runtime context {name}: must be non-empty text, got {value!r}")
