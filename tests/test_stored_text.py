"""The rules of stored text: one length limit (`MAX_TEXT_CHARS`), refused alike on every path
that writes a fact or a summary; no bidirectional overrides; byte order marks removed."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from typer.testing import CliRunner

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.manager import MAX_TEXT_CHARS, MemoryManager, checked_text
from deerflow.agents.tools.memory_core import MEMORY_TOOL_SPECS, MemoryScope, call_memory_tool
from deerflow.cli.app import app
from deerflow.gateway.app import create_app
from tests.deermem.pipeline_helpers import USER_LABELS, ScriptedModel, reply
from tests.gateway.conftest import app_config
from tests.gateway.live import LiveServer
from tests.harness.test_mcp_server import answer, session_calls, write_config

ONE_MEGABYTE = "Likes tea. " * (1024 * 1024 // 11)
TOO_LONG = f"at most {MAX_TEXT_CHARS} characters"
LONGEST = "x" * MAX_TEXT_CHARS


@pytest.fixture
def manager(storing_manager: MemoryManager) -> MemoryManager:
    return storing_manager


def test_the_limit_counts_the_stored_text() -> None:
    assert checked_text(f"  {LONGEST}\n") == LONGEST
    with pytest.raises(ValueError, match=rf"should have {TOO_LONG} \(got {MAX_TEXT_CHARS + 1}\)"):
        checked_text(LONGEST + "y")


@pytest.mark.parametrize("control", ["\u202e", "\u202a", "\u202d", "\u2066", "\u2068", "\u2069"])
def test_bidirectional_overrides_and_isolates_are_refused(
    manager: MemoryManager, control: str
) -> None:
    text = f"Prefers {control}aet{control} tea"
    named = re.escape(f"bidirectional control character U+{ord(control):04X}")
    with pytest.raises(ValueError, match=f"content: holds the {named}"):
        manager.create_fact(text, user_id="u")
    with pytest.raises(ValueError, match=f"user.topOfMind.summary: holds the {named}"):
        manager.import_memory({"user": {"topOfMind": {"summary": text}}}, user_id="u")
    assert manager.get_memory(user_id="u")["facts"] == []


def test_byte_order_marks_are_removed_and_right_to_left_marks_kept(manager: MemoryManager) -> None:
    _, fact_id = manager.create_fact("\ufeffPrefers tea\ufeff", user_id="u")
    document = manager.import_memory(
        {
            "user": {"workContext": {"summary": "\ufeffData engineer"}},
            "facts": [{"content": "Reads \u05e2\u05d1\u05e8\u05d9\u05ea\u200f daily"}],
        },
        user_id="u",
    )
    assert document["user"]["workContext"]["summary"] == "Data engineer"
    assert [f["content"] for f in document["facts"]] == [
        "Reads \u05e2\u05d1\u05e8\u05d9\u05ea\u200f daily"
    ]
    with pytest.raises(ValueError, match="nothing visible"):
        manager.create_fact("\ufeff", user_id="u")
    assert fact_id


def test_the_contract_refuses_a_1_mb_fact_and_summary(manager: MemoryManager) -> None:
    _, fact_id = manager.create_fact("Drinks tea", user_id="u")
    before = manager.get_memory(user_id="u")
    with pytest.raises(ValueError, match=f"content: should have {TOO_LONG}"):
        manager.create_fact(ONE_MEGABYTE, user_id="u")
    with pytest.raises(ValueError, match=f"content: should have {TOO_LONG}"):
        manager.update_fact(fact_id or "", content=ONE_MEGABYTE, user_id="u")
    with pytest.raises(ValueError, match=rf"facts\[0\]\.content: should have {TOO_LONG}"):
        manager.import_memory({"facts": [{"content": ONE_MEGABYTE}]}, user_id="u")
    summary = {"user": {"workContext": {"summary": ONE_MEGABYTE}}, "facts": []}
    with pytest.raises(ValueError, match=f"user.workContext.summary: should have {TOO_LONG}"):
        manager.import_memory(summary, user_id="u")
    assert manager.get_memory(user_id="u") == before
    manager.create_fact(LONGEST, user_id="u")  # the limit itself is allowed


def test_the_tools_refuse_a_1_mb_fact(tmp_path: Path) -> None:
    memory = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
    add = next(spec for spec in MEMORY_TOOL_SPECS if spec.name == "memory_add")
    result = call_memory_tool(add, memory, MemoryScope("u"), {"content": ONE_MEGABYTE})
    assert result["error"] == "invalid_input"
    assert f"content: should have {TOO_LONG}" in result["detail"]
    assert memory.get_memory(user_id="u")["facts"] == []


def test_mcp_memory_add_refuses_a_1_mb_fact(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    _, (added, listed) = asyncio.run(
        session_calls(
            config,
            "u",
            [("memory_add", {"content": ONE_MEGABYTE}), ("memory_search", {"query": "tea"})],
        )
    )
    assert added.isError
    assert f"content: should have {TOO_LONG}" in answer(added)["detail"]
    assert answer(listed)["facts"] == []


def test_the_cli_refuses_a_1_mb_fact_and_import(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    runner = CliRunner()
    added = runner.invoke(app, ["memory", "facts", "add", ONE_MEGABYTE, "-c", str(config)])
    assert added.exit_code == 2
    assert f"content: should have {TOO_LONG}" in added.output
    kept = runner.invoke(app, ["memory", "facts", "add", "Drinks tea", "--json", "-c", str(config)])
    fact_id = json.loads(kept.stdout)["fact_id"]
    edited = runner.invoke(
        app, ["memory", "facts", "edit", fact_id, "--content", ONE_MEGABYTE, "-c", str(config)]
    )
    assert edited.exit_code == 2
    assert f"content: should have {TOO_LONG}" in edited.output
    document = tmp_path / "import.json"
    document.write_text(json.dumps({"facts": [{"content": ONE_MEGABYTE}]}), encoding="utf-8")
    imported = runner.invoke(app, ["memory", "import", str(document), "--yes", "-c", str(config)])
    assert imported.exit_code == 2
    assert f"content: should have {TOO_LONG}" in imported.output
    shown = runner.invoke(app, ["memory", "show", "--json", "-c", str(config)])
    assert [fact["content"] for fact in json.loads(shown.output)["facts"]] == ["Drinks tea"]


def test_the_http_api_refuses_a_1_mb_fact_on_every_write(
    tmp_path: Path, isolated_environment: Path
) -> None:
    app = create_app(app_config(tmp_path), home=isolated_environment)
    with LiveServer(app) as server, httpx.Client(base_url=server.base_url, timeout=30) as http:
        fact_id = http.post("/api/memory/facts", json={"content": "Drinks tea"}).json()["id"]
        answers = [
            http.post("/api/memory/facts", json={"content": ONE_MEGABYTE}),
            http.patch(f"/api/memory/facts/{fact_id}", json={"content": ONE_MEGABYTE}),
            http.post("/api/memory/import", json={"facts": [{"content": ONE_MEGABYTE}]}),
        ]
        for answered in answers:
            # 422 from the request schema (facts), 400 from the contract (import)
            assert answered.status_code in (400, 422), answered.text
            assert "content: " in answered.json()["detail"]
            assert TOO_LONG in answered.json()["detail"]
        facts = http.get("/api/memory").json()["facts"]
    assert [fact["content"] for fact in facts] == ["Drinks tea"]


def test_the_extraction_pipeline_drops_a_1_mb_fact_and_summary(tmp_path: Path) -> None:
    response = reply(
        {"content": ONE_MEGABYTE},
        {"content": "Drinks green tea"},
        user={
            "workContext": {"summary": ONE_MEGABYTE, "shouldUpdate": True, "labels": USER_LABELS}
        },
    )
    model = ScriptedModel(responses=[response])
    memory = DeerMemMemoryManager.from_config(
        {"storage_path": str(tmp_path)}, host_llm_factory=lambda: model
    )
    turn = [HumanMessage("I drink green tea", id="h1"), AIMessage("Noted.", id="a1")]
    memory.add("t", turn, user_id="u")
    assert memory.shutdown_flush(10) is True
    document = memory.reload_memory(user_id="u")
    assert [fact["content"] for fact in document["facts"]] == ["Drinks green tea"]
    assert document["user"]["workContext"]["summary"] == ""
    memory.close()
