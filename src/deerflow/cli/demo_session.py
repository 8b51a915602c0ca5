"""The demo behind `deerflow demo` (what `make demo` runs): two scripted chat sessions.

Session one: the demo user tells the agent a few things about themselves. Memory then extracts
what is worth keeping (the configured backend, DeerMem by default, with the configured model, else
the offline one). Session two is a new conversation: the demo shows the memory block its system
prompt started with, and the agent's answer to a question that needs it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Final

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from deerflow.agents.lead_agent import amake_lead_agent
from deerflow.agents.memory.manager import (
    MemoryManager,
    MemoryUnsupportedError,
)
from deerflow.cli.agent_session import (
    SystemPromptRecorder,
    flush_memory,
    harness_errors,
    prepare_model,
    stream_turn,
)
from deerflow.config import AppConfig
from deerflow.startup import build_checked, load_checked

__all__ = ["DEMO_USER", "SESSION_ONE", "SESSION_TWO", "run_demo_command"]

DEMO_USER: Final = "demo-user"
SESSION_ONE: Final = (
    "Hi! I'm Maria, a data engineer in Lisbon.",
    "I prefer pnpm over npm for my JavaScript projects.",
)
SESSION_TWO: Final = ("I'm starting a new web app. Which package manager should I use?",)
_MEMORY_OPEN: Final = "<memory>"
_MEMORY_CLOSE: Final = "</memory>"


def run_demo_command(config: Path | None) -> None:
    """The whole `deerflow demo` command; exits with 1 when nothing was learned."""
    console = Console(highlight=False)
    with harness_errors():
        # The configuration and the backend are checked before the offline model's install,
        # which takes minutes.
        app_config, source = load_checked(config)
        if not app_config.memory.enabled:
            raise ValueError("the demo shows memory at work, but memory.enabled is false")
        manager = build_checked(app_config, source)
        try:
            entry = prepare_model(app_config, None, console)
        except BaseException:
            manager.close()
            raise
    console.print(
        Panel.fit(
            f"model [bold]{escape(entry.name)}[/] ({escape(entry.use)}), memory backend "
            f"[bold]{escape(app_config.memory.manager_class)}[/], user {DEMO_USER}",
            title="DeerFlow demo",
        )
    )
    try:
        with harness_errors():
            learned = asyncio.run(run_demo(app_config, manager, console))
    finally:
        manager.close()
    if not learned:
        raise typer.Exit(1)


async def run_demo(config: AppConfig, manager: MemoryManager, console: Console) -> bool:
    """The two sessions; True when something was learned and session two started with it."""
    # Every run starts from nothing: an earlier run's memory and queued writes go.
    manager.cancel_pending(user_id=DEMO_USER)
    try:
        manager.clear_memory(user_id=DEMO_USER)
    except MemoryUnsupportedError:
        console.print("(this backend cannot clear memory: earlier demo runs may show up too)")
    agent = await amake_lead_agent(config, manager=manager)
    timeout = config.memory.shutdown_flush_timeout_seconds

    console.rule("Session one: the user introduces themselves")
    for text in SESSION_ONE:
        await _turn(agent, text, "demo-session-1", console)
    await asyncio.to_thread(flush_memory, manager, timeout, console)

    console.rule("What memory learned from session one")
    document = manager.get_memory(user_id=DEMO_USER)
    facts = document.get("facts") or []
    if facts:
        console.print(_facts_table(facts))
    else:
        console.print(
            "[red]Nothing was learned: the extraction stored no facts (run with -v to see why).[/]"
        )
    for part in ("user", "history"):
        for name, section in (document.get(part) or {}).items():
            summary = section.get("summary") if isinstance(section, dict) else None
            if summary:
                console.print(f"[bold]{part}.{name}[/]: {escape(summary)}")

    console.rule("Session two: a new conversation")
    recorder = SystemPromptRecorder()
    for text in SESSION_TWO:
        await _turn(agent, text, "demo-session-2", console, recorder)
    block = _memory_block(recorder.system_prompts[0] if recorder.system_prompts else "")
    console.print(
        Panel(
            escape(block or "(no memory block)"),
            title="the memory block session two's system prompt started with",
        )
    )
    # Session two is there to show reading; learning from it again would only delay the exit.
    manager.cancel_pending(user_id=DEMO_USER)
    remembered = [fact for fact in facts if fact["content"] in block]
    console.rule("In short")
    console.print(
        f"Session one taught memory {len(facts)} fact(s); session two started with "
        f"{len(remembered)} of them in its system prompt, without being told again."
    )
    return bool(facts) and bool(remembered)


async def _turn(
    agent: Any,
    text: str,
    thread_id: str,
    console: Console,
    recorder: SystemPromptRecorder | None = None,
) -> None:
    console.print(f"[bold cyan]you>[/] {escape(text)}")
    console.print("[bold green]agent>[/] ", end="")
    await stream_turn(
        agent,
        text,
        thread_id=thread_id,
        user_id=DEMO_USER,
        write=lambda piece: console.print(escape(piece), end=""),
        callbacks=[recorder] if recorder else [],
    )
    console.print()


def _memory_block(system_prompt: str) -> str:
    start = system_prompt.find(_MEMORY_OPEN)
    end = system_prompt.find(_MEMORY_CLOSE, start)
    if start == -1 or end == -1:
        return ""
    return system_prompt[start : end + len(_MEMORY_CLOSE)]


def _facts_table(facts: list[dict[str, Any]]) -> Table:
    table = Table("fact", "category", "confidence", "id")
    for fact in facts:
        table.add_row(
            escape(fact["content"]), fact["category"], f"{fact['confidence']:.2f}", fact["id"]
        )
    return table
