"""`deerflow demo` (what `make demo` runs): two scripted chat sessions with the lead agent."""

from __future__ import annotations

from deerflow.cli.options import ConfigOption


def demo(config: ConfigOption = None) -> None:
    """Two chat sessions with the lead agent: what it learns in one, it knows in the next.

    Session one: a demo user says who they are; memory extracts what to keep and the demo lists
    it. Session two, a new conversation, starts with that memory in its system prompt. With no
    model configured the offline model runs (installed on first use).
    """
    # LangChain, LangGraph and the MCP adapters take seconds to import: only this command pays.
    from deerflow.cli.demo_session import run_demo_command

    run_demo_command(config)
