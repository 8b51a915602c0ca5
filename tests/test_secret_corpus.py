"""The secret detector on the committed corpora, and every DeerMem write path refusing secrets:
create, update, import and the extraction pipeline (the figures are in docs/deermem.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from benchmarks.secret_scrub import main as measure
from langchain_core.messages import AIMessage, HumanMessage

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.manager import find_secret
from deerflow.redaction import REDACTED, redact_text
from tests.deermem.pipeline_helpers import USER_LABELS, ScriptedModel, reply
from tests.secret_corpus import BENIGN, SECRETS


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[DeerMemMemoryManager]:
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
    yield manager
    manager.close()


def test_the_corpora_are_what_the_docs_describe() -> None:
    assert len(SECRETS) == 50
    assert len(BENIGN) >= 200
    assert len(set(SECRETS)) == len(SECRETS)
    assert len(set(BENIGN)) == len(BENIGN)


def test_at_least_48_of_50_secrets_are_refused() -> None:
    missed = [text for text in SECRETS if find_secret(text) is None]
    assert len(missed) <= 2, missed


def test_at_most_1_percent_of_the_benign_facts_are_refused() -> None:
    flagged = {text: find_secret(text) for text in BENIGN if find_secret(text) is not None}
    assert len(flagged) <= len(BENIGN) // 100, flagged


def test_create_update_and_import_refuse_the_secrets(memory: DeerMemMemoryManager) -> None:
    _, fact_id = memory.create_fact("Drinks green tea", user_id="u")
    writes = {
        "create": lambda text: memory.create_fact(text, user_id="u"),
        "update": lambda text: memory.update_fact(fact_id or "", content=text, user_id="u"),
        "import": lambda text: memory.import_memory({"facts": [{"content": text}]}, user_id="u"),
        "summary": lambda text: memory.import_memory({"user": {"topOfMind": text}}, user_id="u"),
    }
    errors: dict[str, list[str]] = {name: [] for name in writes}
    for text in SECRETS:
        for name, write in writes.items():
            try:
                write(text)
            except ValueError as exc:
                errors[name].append(str(exc))
    for name, refusals in errors.items():
        assert len(refusals) >= 48, name
        assert all("secrets are never stored in memory" in error for error in refusals)
    assert [f["content"] for f in memory.get_memory(user_id="u")["facts"]] == ["Drinks green tea"]


def test_the_benign_facts_import(memory: DeerMemMemoryManager) -> None:
    facts = [{"content": text} for text in BENIGN[:100]]
    document = memory.import_memory({"facts": facts}, user_id="u")
    assert len(document["facts"]) == 100


def test_the_extraction_pipeline_stores_none_of_the_secrets(tmp_path: Path) -> None:
    ScriptedModel.prompts.clear()
    summaries = {"topOfMind": {"summary": SECRETS[32], "shouldUpdate": True, "labels": USER_LABELS}}
    response = reply(*({"content": text} for text in SECRETS), user=summaries)
    model = ScriptedModel(responses=[response])
    metrics: list[dict[str, Any]] = []
    memory = DeerMemMemoryManager.from_config(
        {"storage_path": str(tmp_path), "max_facts": 100},
        host_llm_factory=lambda: model,
        extraction_callback=metrics.append,
    )
    memory.add("t", [HumanMessage("hello", id="h1"), AIMessage("hi", id="a1")], user_id="u")
    assert memory.shutdown_flush(10) is True
    document = memory.reload_memory(user_id="u")
    memory.close()
    assert len(document["facts"]) <= 2, [f["content"] for f in document["facts"]]
    assert document["user"]["topOfMind"]["summary"] == ""
    (run,) = metrics
    assert run["facts_extracted"] == len(SECRETS), "every proposal reached the secret check"
    assert run["rejected_secret"] >= 48 + 1


def test_redaction_masks_every_secret_of_the_corpus() -> None:
    leaked = [text for text in SECRETS if redact_text(text) == text]
    assert len(leaked) <= 2, leaked
    assert redact_text("the door code is 135790") == f"the door code is {REDACTED}"


def test_the_benchmark_reports_every_corpus(capsys: pytest.CaptureFixture[str]) -> None:
    measure(["--first", "10"])
    out = capsys.readouterr().out
    assert f"of {len(SECRETS):5}" in out
    assert f"of {len(BENIGN):5}" in out
