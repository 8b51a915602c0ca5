"""The examples of docs/langgraph.md, executed in order with a scripted model: they run as shown."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.harness.scripted_model import ScriptedConversationModel

PAGE = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def test_the_pages_examples_run_and_the_graph_remembers_across_threads() -> None:
    ScriptedConversationModel.reset()
    scope: dict[str, Any] = {"model": ScriptedConversationModel(replies=["Noted."])}
    blocks = examples()
    assert len(blocks) == 3

    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), scope)

    memory = scope["memory"]
    assert "- I use pnpm, never npm" in ScriptedConversationModel.system_prompts()[1]
    alice = {fact["content"] for fact in memory.get_memory(user_id="alice")["facts"]}
    assert alice == {"Prefers pnpm over npm", "I use pnpm, never npm"}
    memory.close()
