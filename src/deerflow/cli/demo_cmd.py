"""`deerflow demo`: a short, scripted tour of the memory contract through the configured backend."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from deerflow.agents.memory.manager import (
    MemoryManager,
    MemoryUnsupportedError,
    build_memory_manager,
    default_host_hooks,
)
from deerflow.cli.options import ConfigOption
from deerflow.config import load_config

DEMO_USER = "demo-user"
DEMO_FACTS = (
    ("Prefers pnpm over npm for JavaScript projects", "preference", 0.9),
    ("Works as a data engineer on a Kafka pipeline", "context", 0.8),
    ("Use uv, not pip, in this user's Python projects", "correction", 0.95),
)


def demo(config: ConfigOption = None) -> None:
    """Store a few facts for a demo user, search them, and show what an agent would be given."""
    console = Console()
    app_config = load_config(config)
    manager = build_memory_manager(app_config.memory, host_hooks=default_host_hooks(app_config))
    console.print(
        Panel.fit(
            f"backend [bold]{type(manager).__name__}[/] "
            f"({app_config.memory.manager_class}), storage "
            f"{manager.backend_config.get('storage_path')}",
            title="DeerFlow Memory demo",
        )
    )
    try:
        run_tour(manager, console)
    except MemoryUnsupportedError as exc:
        console.print(f"[yellow]{exc}[/] The tour stops here for this backend.")
        raise typer.Exit(1) from None
    finally:
        manager.shutdown_flush(app_config.memory.shutdown_flush_timeout_seconds)
        manager.close()


def run_tour(manager: MemoryManager, console: Console) -> None:
    """The demo's steps, in the order a person would try them."""
    manager.clear_memory(user_id=DEMO_USER)
    console.rule("1. The agent learns three facts about the user")
    for content, category, confidence in DEMO_FACTS:
        _, fact_id = manager.create_fact(content, category, confidence, user_id=DEMO_USER)
        console.print(escape(f"stored {fact_id}: [{category}] {content}"))

    console.rule("2. A later conversation searches for what matters to it")
    results = manager.search("JavaScript projects", top_k=3, user_id=DEMO_USER)
    console.print(_facts_table(results))

    console.rule("3. What the next conversation starts with (injected into the system prompt)")
    context = manager.get_context(DEMO_USER, query="set up a new JavaScript project")
    console.print(Panel(escape(context or "(nothing)"), title="<memory>"))

    console.rule("4. Another user sees none of it")
    other = manager.get_context("someone-else")
    console.print(other or "(nothing remembered for someone-else)")

    console.rule("5. A deleted fact comes back with one undo")
    doomed = results[0]
    manager.delete_fact(doomed["id"], user_id=DEMO_USER)
    change = manager.get_history(user_id=DEMO_USER, limit=1)[0]
    console.print(escape(f"deleted {doomed['id']} (change {change['change_id']})"))
    manager.revert_change(change["change_id"], user_id=DEMO_USER)
    restored = manager.search(doomed["content"], top_k=1, user_id=DEMO_USER)
    console.print(escape(f"after revert: {restored[0]['content'] if restored else '(missing!)'}"))


def _facts_table(facts: list[dict[str, Any]]) -> Table:
    table = Table("id", "category", "confidence", "content")
    for fact in facts:
        confidence = f"{fact['confidence']:.2f}"
        table.add_row(fact["id"], fact["category"], confidence, escape(fact["content"]))
    return table
