"""`POST /api/chat/{thread_id}`: one turn of the lead agent (or a custom agent), streamed as SSE.

Events: `token` `{"content": text}` for each piece of the reply, `tool` `{"name": tool}` when the
agent used a tool, `error` `{"error": code, "detail": text}` if the turn fails midway (the same
codes and texts as the HTTP errors), and `done` `{}` at the end of a turn that succeeded.

Threads belong to users: the agent's checkpointer keys a thread by user and thread id, so two
users choosing the same thread id never see each other's conversation. One turn at a time runs
on a thread (409 `thread_busy` otherwise). Agents are built on first use and kept, with their
threads, in memory for the server's lifetime.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

from fastapi import APIRouter, Path, Request
from fastapi.responses import StreamingResponse
from langchain_core.messages import AIMessageChunk, HumanMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, Field
from starlette.background import BackgroundTask

from deerflow.agents.context import AgentContext
from deerflow.agents.custom_agents import list_agents, load_agent
from deerflow.agents.lead_agent import amake_lead_agent
from deerflow.config import ConfigError
from deerflow.gateway.auth import CurrentUser
from deerflow.gateway.errors import INTERNAL_TEXT, GatewayError, error_status
from deerflow.gateway.lifecycle import GatewayState, gateway_state, ready_manager
from deerflow.gateway.memory_routes import AgentName
from deerflow.gateway.schemas import error_responses
from deerflow.models import model_entry, uses_local_model
from deerflow.models.install import local_extra_installed
from deerflow.redaction import redact_text

__all__ = ["ChatAgents", "ChatMessage", "chat_agents", "router"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/api/chat", tags=["chat"])

THREAD_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
NO_MODEL: Final = (
    "chat needs a model: configure `models:` in config.yaml, or install the offline model "
    "(`deerflow chat` installs it on first use)"
)


class ChatMessage(BaseModel):
    """What the user says in this turn."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"message": "I prefer green tea."}]}
    )

    message: str = Field(min_length=1, max_length=20_000)


@dataclass
class ChatAgents:
    """The agents built so far (by agent name) and the threads with a turn running."""

    built: dict[str | None, Any] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    busy: set[str] = field(default_factory=set)


def chat_agents(request: Request) -> ChatAgents:
    agents: ChatAgents = request.app.state.chat_agents
    return agents


async def _agent(state: GatewayState, agents: ChatAgents, agent_name: str | None) -> Any:
    """The agent for `agent_name` (None: the lead agent), built on first use.

    Raises:
        GatewayError: 404 for an agent that does not exist, 501 when no model can run, 500 when
            the agent's own config.yaml is broken.
    """
    async with agents.lock:
        if agent_name in agents.built:
            return agents.built[agent_name]
        if agent_name is not None and agent_name not in list_agents(state.home):
            known = ", ".join(list_agents(state.home)) or "none"
            raise GatewayError(404, "agent_not_found", f"no agent {agent_name!r} (agents: {known})")
        try:
            model_name = load_agent(agent_name, state.home).config.model if agent_name else None
            entry = model_entry(state.config, model_name)
            if uses_local_model(entry) and not local_extra_installed():
                raise GatewayError(501, "chat_unavailable", NO_MODEL)
            manager = state.manager if state.config.memory.enabled else None
            built = await amake_lead_agent(
                state.config, agent_name, manager=manager, home=state.home
            )
        except ConfigError as exc:
            logger.error("agent %r cannot be built: %s", agent_name, redact_text(str(exc)))
            raise GatewayError(500, "agent_unavailable", INTERNAL_TEXT) from None
        agents.built[agent_name] = built
        return built


@router.post(
    "/{thread_id}",
    summary="One turn of the lead agent on a thread, streamed as server-sent events",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "`token`, `tool`, `error` and `done` events (see the route module).",
        },
        **error_responses(400, 404, 409, 501),
    },
)
async def chat(
    request: Request,
    body: ChatMessage,
    user: CurrentUser,
    thread_id: Annotated[str, Path(pattern=THREAD_ID_PATTERN, examples=["web-3f1c"])],
    agent_name: AgentName = None,
) -> StreamingResponse:
    state, agents = gateway_state(request), chat_agents(request)
    if state.config.memory.enabled:
        await ready_manager(request)  # 503 until memory is warm, as for the memory routes
    agent = await _agent(state, agents, agent_name)
    key = f"{user}:{thread_id}"  # user ids never contain ':'
    if key in agents.busy:
        raise GatewayError(409, "thread_busy", "a turn is already running on this thread")
    agents.busy.add(key)
    return StreamingResponse(
        _turn(agent, key, body.message, user),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        # Runs however the response ends, a client gone before the first byte included.
        background=BackgroundTask(agents.busy.discard, key),
    )


async def _turn(agent: Any, key: str, message: str, user: str) -> AsyncIterator[str]:
    try:
        async for chunk, metadata in agent.astream(
            {"messages": [HumanMessage(message)]},
            config={"configurable": {"thread_id": key}},
            context=AgentContext(user_id=user),
            stream_mode="messages",
        ):
            if isinstance(chunk, AIMessageChunk) and metadata.get("langgraph_node") == "model":
                if chunk.text:
                    yield _event("token", {"content": chunk.text})
            elif isinstance(chunk, ToolMessage):
                yield _event("tool", {"name": chunk.name})
    except Exception as exc:
        yield _event("error", _error_body(exc))
        return
    yield _event("done", {})


def _error_body(exc: Exception) -> dict[str, str]:
    """The `error` event of a failed turn: the HTTP error table's code and text."""
    known = error_status(exc)
    if known is None or known.status >= 500:
        logger.error("chat turn failed: %s", redact_text(f"{type(exc).__name__}: {exc}"))
    if known is None:
        return {"error": "internal_error", "detail": INTERNAL_TEXT}
    detail = known.fixed_detail or redact_text(" ".join(str(exc).split()))
    return {"error": known.code, "detail": detail}


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
