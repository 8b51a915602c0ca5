"""The terminal chat behind `deerflow chat`: one `ChatSession` reads lines and runs turns.

Replies stream as they are generated. Memory is read on the first turn of each thread and
written after each turn; on exit the queued writes are flushed with a progress line, so what the
conversation taught is stored before the command returns. Slash commands are in `COMMANDS`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.markup import escape

from deerflow.agents.lead_agent import amake_lead_agent
from deerflow.agents.memory.manager import (
    FactNotFoundError,
    MemoryManager,
    MemoryManagerError,
)
from deerflow.cli import memory_render as render
from deerflow.cli.agent_session import (
    flush_memory,
    harness_errors,
    new_thread_id,
    prepare_model,
    stream_turn,
)
from deerflow.cli.console import stdout
from deerflow.cli.ids import resolve_fact_id
from deerflow.config import AppConfig
from deerflow.startup import build_checked, load_checked

__all__ = ["COMMANDS", "ChatSession", "run_chat"]

COMMANDS: Final = {
    "/memory": "show what is remembered about you (this agent's bucket)",
    "/forget FACT_ID": "delete one remembered fact (its id, or a unique prefix of it)",
    "/new": "start a new thread (memory is read again on its first turn)",
    "/quit": "save memory and leave (also Ctrl-D)",
}


class ChatSession:
    """One terminal conversation: the agent, whose it is, and the current thread."""

    def __init__(
        self,
        agent: Any,
        manager: MemoryManager | None,
        *,
        user_id: str,
        agent_name: str | None,
        thread_id: str,
        console: Console,
    ) -> None:
        self.agent = agent
        self.manager = manager
        self.user_id = user_id
        self.agent_name = agent_name
        self.thread_id = thread_id
        self.console = console

    async def run(self) -> None:
        """Read lines until `/quit` or end of input; each is a turn or a slash command."""
        while True:
            try:
                line = self.console.input("[bold cyan]you>[/] ")
            except (EOFError, KeyboardInterrupt):
                self.console.print()
                return
            text = line.strip()
            if not text:
                continue
            if text.startswith("/"):
                if not self.command(text):
                    return
                continue
            await self.turn(text)

    async def turn(self, text: str) -> None:
        self.console.print("[bold green]agent>[/] ", end="")
        try:
            await stream_turn(
                self.agent,
                text,
                thread_id=self.thread_id,
                user_id=self.user_id,
                write=lambda piece: self.console.print(escape(piece), end="", highlight=False),
            )
        except Exception as exc:
            # The session goes on: a failed turn (the model's API, a fatal memory read) is shown
            # and the user decides what to do next.
            detail = escape(f"{type(exc).__name__}: {exc}")
            self.console.print(f"\n[red]this turn failed: {detail}[/]")
            return
        self.console.print()

    def command(self, text: str) -> bool:
        """Run a slash command; False means leave."""
        name, _, argument = text.partition(" ")
        argument = argument.strip()
        if name in ("/quit", "/exit"):
            return False
        if name == "/new":
            self.thread_id = new_thread_id()
            self.console.print(f"new thread {self.thread_id}", highlight=False)
        elif name == "/memory":
            self.show_memory()
        elif name == "/forget":
            self.forget(argument)
        else:
            self.console.print("commands:")
            for usage, meaning in COMMANDS.items():
                self.console.print(f"  {usage:<16} {meaning}", highlight=False)
        return True

    def show_memory(self) -> None:
        if self.manager is None:
            self.console.print("memory is off (memory.enabled: false)")
            return
        try:
            document = self.manager.get_memory(user_id=self.user_id, agent_name=self.agent_name)
        except MemoryManagerError as exc:
            self.console.print(f"[red]{escape(str(exc))}[/]")
            return
        view = render.document_view(document, user=self.user_id, agent=self.agent_name)
        self.console.print(view)

    def forget(self, fact_id: str) -> None:
        if not fact_id:
            self.console.print("usage: /forget FACT_ID (ids are shown by /memory)")
            return
        if self.manager is None:
            self.console.print("memory is off (memory.enabled: false)")
            return
        try:
            fact_id = resolve_fact_id(
                self.manager, fact_id, user_id=self.user_id, agent_name=self.agent_name
            )
            self.manager.delete_fact(fact_id, user_id=self.user_id, agent_name=self.agent_name)
        except FactNotFoundError:
            self.console.print(f"[red]no fact {escape(fact_id)} in this memory[/]")
        except (MemoryManagerError, ValueError) as exc:
            self.console.print(f"[red]{escape(str(exc))}[/]")
        else:
            self.console.print(f"forgot {escape(fact_id)}")


def run_chat(config: Path | None, *, agent: str | None, user: str, thread: str | None) -> None:
    """The whole `deerflow chat` command: set up, converse, flush memory, close."""
    console = stdout()
    with harness_errors():
        # Everything that can be wrong in the configuration is found before the offline
        # model's install, which takes minutes.
        app_config, source = load_checked(config)
        manager = build_checked(app_config, source) if app_config.memory.enabled else None
        try:
            entry = prepare_model(app_config, agent, console)
        except BaseException:
            if manager is not None:
                manager.close()
            raise
    console.print(
        f"DeerFlow chat: agent {agent or 'lead'}, model {entry.name}, user {user}. "
        f"Commands: {', '.join(usage.split()[0] for usage in COMMANDS)}.",
        highlight=False,
    )
    try:
        with harness_errors():
            asyncio.run(_session(app_config, manager, agent, user, thread, console))
    finally:
        if manager is not None:
            flush_memory(manager, app_config.memory.shutdown_flush_timeout_seconds, console)
            manager.close()


async def _session(
    config: AppConfig,
    manager: MemoryManager | None,
    agent_name: str | None,
    user_id: str,
    thread_id: str | None,
    console: Console,
) -> None:
    agent = await amake_lead_agent(config, agent_name, manager=manager)
    session = ChatSession(
        agent,
        manager,
        user_id=user_id,
        agent_name=agent_name,
        thread_id=thread_id or new_thread_id(),
        console=console,
    )
    console.print(f"thread {session.thread_id}", highlight=False)
    await session.run()
