"""Where the `<memory>` section goes in system prompts of every shape."""

from __future__ import annotations

from langchain_core.messages import SystemMessage

from deerflow.agents.middlewares.memory_injection import (
    add_to_system_message,
    render_memory_section,
)

SECTION = render_memory_section("- [preference | 0.90] Likes tea")


def test_an_agent_without_a_system_prompt_gets_the_section_as_its_prompt() -> None:
    assert add_to_system_message(None, SECTION).content == SECTION
    assert add_to_system_message(SystemMessage(""), SECTION).content == SECTION


def test_a_prompt_made_of_content_blocks_keeps_them_and_gains_one() -> None:
    cached = {"type": "text", "text": "You help.", "cache_control": {"type": "ephemeral"}}
    system = SystemMessage(content=[cached])
    merged = add_to_system_message(system, SECTION)
    assert merged.content == [cached, {"type": "text", "text": SECTION}]
    assert system.content == [cached], "the agent's own message is not changed"


def test_blank_context_renders_nothing() -> None:
    assert render_memory_section(" \n\t") == ""
    assert SECTION.endswith("<memory>\n- [preference | 0.90] Likes tea\n</memory>")
