"""`deerflow chat`: talk to the lead agent (or a custom agent) in the terminal."""

from __future__ import annotations

from typing import Annotated, Final

import typer

from deerflow.cli.options import AgentOption, ConfigOption, UserOption

DEFAULT_USER: Final = "default"
ThreadOption = Annotated[
    str | None,
    typer.Option("--thread", "-t", help="Thread id to use (default: a new one)."),
]


def chat(
    config: ConfigOption = None,
    agent: AgentOption = None,
    user: UserOption = DEFAULT_USER,
    thread: ThreadOption = None,
) -> None:
    """Chat with the lead agent, or with a custom agent from $DEER_FLOW_HOME/agents/NAME/
    (the runtime home defaults to ./.deer-flow).

    Type a message and press Enter; replies stream as they come. Commands: /memory,
    /forget FACT_ID, /new, /quit. On exit, what the conversation taught is saved to memory.
    """
    # LangChain, LangGraph and the MCP adapters take seconds to import: only this command pays.
    from deerflow.cli.chat_session import run_chat

    run_chat(config, agent=agent, user=user, thread=thread)
