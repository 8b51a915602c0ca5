"""The Python snippets of the docs pages run as written, in order, one namespace per page.

A snippet that cannot run on its own (it needs your chat model, your package) is marked with
`<!-- snippet: not run (why) -->` on the line before its fence. README.md's snippets are
executed by their own test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCE = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)```", re.S)
NOT_RUN = re.compile(r"<!-- snippet: not run \(.+\) -->")


def snippets(page: Path) -> list[tuple[str, bool]]:
    """(code, runs?) of each Python fence of `page`, in order."""
    text = "\n" + page.read_text(encoding="utf-8")
    return [
        (match["code"], not match["before"].startswith("<!-- snippet:"))
        for match in FENCE.finditer(text)
    ]


PAGES = sorted(page for page in DOCS.glob("*.md") if snippets(page))


def test_pages_with_snippets_are_found() -> None:
    assert {"python.md", "backends.md"} <= {page.name for page in PAGES}


def in_empty_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models: list[dict[str, Any]] | None = None
) -> None:
    """Run from `tmp_path`, as a reader would from a fresh project, with `models` configured."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEER_FLOW_HOME", raising=False)
    monkeypatch.delenv("DEER_FLOW_CONFIG", raising=False)
    if models is not None:
        config = json.dumps({"models": models})
        (tmp_path / "config.yaml").write_text(config, encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_snippets_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_empty_directory(tmp_path, monkeypatch)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for number, (code, runs) in enumerate(snippets(page), 1):
        if runs:
            exec(compile(code, f"{page.name}, snippet {number}", "exec"), namespace)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_skipped_snippets_say_why(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for marker in re.findall(r"<!-- snippet:[^\n]*", text):
        assert NOT_RUN.fullmatch(marker), (
            f"{page.name}: {marker!r} must read <!-- snippet: not run (why) -->"
        )


def test_the_python_page_builds_a_memory_that_learns_from_the_agent_it_wires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """python.md's manager, handed to its `wire_memory` agent, extracts with the configured
    model: built from `config.memory` alone it has no model and the turn stays queued."""
    from tests.harness.scripted_model import USE, ScriptedConversationModel

    ScriptedConversationModel.reset()
    in_empty_directory(tmp_path, monkeypatch, [{"name": "scripted", "use": USE}])
    contract, _close, agent = (code for code, _ in snippets(DOCS / "python.md")[:3])
    namespace: dict[str, Any] = {
        "model": ScriptedConversationModel(replies=["Noted."]),
        "my_tools": [],
    }
    exec(compile(contract + agent, "python.md", "exec"), namespace)
    memory = namespace["memory"]
    try:
        assert memory.shutdown_flush(30), "the agent's turn was left queued, not extracted"
        read = [m.text for prompt in ScriptedConversationModel.extraction_prompts for m in prompt]
        assert any("I use pnpm, never npm." in text for text in read)
    finally:
        memory.close()


def test_the_python_page_closes_the_manager_with_nothing_left_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `add()` queued is written by the time python.md's closing snippet returns."""
    from langchain_core.messages import AIMessage, HumanMessage

    from deerflow.agents.memory.manager import build_memory_manager
    from deerflow.config import load_config
    from tests.harness.scripted_model import USE

    fact = "Deploys services with Kubernetes"
    facts = [{"content": fact, "category": "knowledge", "confidence": 0.9}]
    in_empty_directory(tmp_path, monkeypatch, [{"name": "scripted", "use": USE, "facts": facts}])
    contract, closing = (code for code, _ in snippets(DOCS / "python.md")[:2])
    namespace: dict[str, Any] = {}
    exec(compile(contract, "python.md", "exec"), namespace)
    said = [HumanMessage("I deploy our services with Kubernetes."), AIMessage("Noted.")]
    namespace["memory"].add("thread-2", said, user_id="alice")
    exec(compile(closing, "python.md", "exec"), namespace)

    reopened = build_memory_manager(load_config().memory)  # no model: it cannot extract
    try:
        facts = reopened.get_memory(user_id="alice")["facts"]
        assert fact in [f["content"] for f in facts], "the queued conversation was not written"
    finally:
        reopened.close()
