"""Opt-in smoke test of the real offline model: `DEERFLOW_LOCAL_MODEL=1 uv run --extra local pytest
tests/harness/test_local_model_smoke.py`. It loads Gemma 3 270M through llama-cpp-python (the
`local` extra) and runs a real DeerMem extraction with it; about a minute on 2 cores.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from deerflow.agents.memory.manager import build_memory_manager
from deerflow.config import MemoryConfig
from deerflow.models.local import LocalChatModel

pytestmark = pytest.mark.skipif(
    os.environ.get("DEERFLOW_LOCAL_MODEL") != "1",
    reason="opt-in: set DEERFLOW_LOCAL_MODEL=1 (needs the `local` extra) to run the offline model",
)

CONVERSATION = [
    HumanMessage("Hi! I'm Maria, a data engineer in Lisbon."),
    AIMessage("Nice to meet you, Maria!"),
    HumanMessage("For JavaScript projects I always use pnpm, never npm."),
    AIMessage("Noted."),
]
SAID = " ".join(str(m.content) for m in CONVERSATION if isinstance(m, HumanMessage)).lower()


def test_the_offline_model_answers_in_a_stream() -> None:
    model = LocalChatModel()
    chunks = list(model.stream([SystemMessage("Answer briefly."), HumanMessage("Say hello.")]))
    assert "".join(chunk.text for chunk in chunks).strip()


def test_deermem_learns_grounded_facts_with_the_offline_model(tmp_path: Path) -> None:
    manager = build_memory_manager(
        MemoryConfig(backend_config={"storage_path": str(tmp_path)}),
        host_hooks={"host_llm_factory": LocalChatModel},
    )
    try:
        manager.add("smoke", list(CONVERSATION))
        # True only when the extraction succeeded: its grammar-constrained reply parsed.
        assert manager.shutdown_flush(240)
        facts = [fact["content"] for fact in manager.get_memory()["facts"]]
    finally:
        manager.close()

    assert facts, "the offline model extracted nothing"
    assert any("pnpm" in fact or "Maria" in fact for fact in facts), facts
    # Nothing from the prompt's example (Tomasz, a chemistry teacher in Gdansk) was kept.
    assert not any(word in " ".join(facts) for word in ("Tomasz", "Gdansk", "chemistry"))
    for fact in facts:
        assert any(word.lower().strip(".,") in SAID for word in fact.split()), fact
