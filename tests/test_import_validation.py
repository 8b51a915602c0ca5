"""A mistyped import document is refused, naming the field, and changes nothing: through the
contract (DeerMem and the in-memory reference), the HTTP API and `deerflow memory import`."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from deerflow.agents.memory.manager import MemoryManager
from deerflow.cli.app import app
from deerflow.gateway.app import create_app
from tests.gateway.conftest import app_config
from tests.gateway.live import LiveServer

# (document, what the error names). Every one of these used to import as "no summaries, no facts"
# or to be accepted with a field silently ignored.
MISTYPED: list[tuple[Any, str]] = [
    ({"user": []}, "user: must be an object (got [])"),
    ({"user": ""}, "user: must be an object (got '')"),
    ({"user": False}, "user: must be an object (got False)"),
    ({"user": None}, "user: must be an object (got None)"),
    ({"user": 0}, "user: must be an object"),
    ({"history": 0}, "history: must be an object (got 0)"),
    ({"history": []}, "history: must be an object"),
    ({"history": "Moved to Porto"}, "history: must be an object"),
    ({"facts": "Drinks tea"}, "facts: must be a list"),
    ({"facts": {}}, "facts: must be a list"),
    ({"facts": None}, "facts: must be a list"),
    ({"facts": 0}, "facts: must be a list"),
    ({"facts": ["Drinks tea"]}, "facts[0]: must be an object"),
    ({"facts": [None]}, "facts[0]: must be an object"),
    ({"facts": [], "revision": "five"}, "revision: must be a whole number (got 'five')"),
    ({"facts": [], "revision": True}, "revision: must be a whole number"),
    ({"facts": [], "revision": 2.5}, "revision: must be a whole number"),
    ({"facts": [], "revision": -1}, "revision: "),
    ({"facts": [], "version": 2}, "version: must be text"),
    ({"facts": [], "lastUpdated": []}, "lastUpdated: must be text"),
    ({"facts": [], "userId": 7}, "userId: must be text"),
    ({"user": {"workContext": 3}}, "user.workContext: must be an object"),
    ({"user": {"workContext": {"summary": 3}}}, "user.workContext.summary: must be text"),
    ({"user": {"topOfMind": {"summary": None}}}, "user.topOfMind.summary: must be text"),
    ({"history": {"recentMonths": {"summary": False}}}, "history.recentMonths.summary: must be"),
    ({"user": {"workcontext": {"summary": "Dev"}}}, "user.workcontext: "),
    ({"user": {"recentMonths": {"summary": "Dev"}}}, "user.recentMonths: "),
    ({"Facts": []}, "unknown key 'Facts'"),
    ({"facts": [], "summary": "x"}, "unknown key 'summary'"),
    ({"version": "2.0"}, "none of user, history and facts"),
    ({}, "none of user, history and facts"),
    ({"facts": [{"content": 5}]}, "facts[0].content: must be non-empty text"),
    ({"facts": [{"content": ""}]}, "facts[0].content: "),
    ({"facts": [{"content": "Tea", "confidence": "high"}]}, "facts[0].confidence: "),
    ({"facts": [{"content": "Tea", "category": 3}]}, "facts[0].category: "),
]
NOT_OBJECTS: list[Any] = [[], "memory", 3, None]


def existing_memory(manager: MemoryManager) -> None:
    manager.import_memory(
        {
            "user": {"workContext": {"summary": "Data engineer in Porto"}},
            "history": {"recentMonths": {"summary": "Moved teams"}},
            "facts": [{"content": "Drinks green tea"}, {"content": "Uses pnpm"}],
        },
        user_id="u",
    )


def files(root: Path) -> dict[str, str]:
    """Every stored file's digest (the search index is derived data and may be rebuilt; the
    write queue's files are the running processes', not memory)."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
        and ".sqlite" not in path.name
        and "index" not in path.parts
        and ".queue" not in path.parts
    }


@pytest.fixture
def manager(storing_manager: MemoryManager) -> MemoryManager:
    existing_memory(storing_manager)
    return storing_manager


def test_the_contract_refuses_every_mistyped_import(manager: MemoryManager, tmp_path: Path) -> None:
    before = (manager.export_memory(user_id="u"), manager.get_history(user_id="u"))
    stored = files(tmp_path)
    for document, named in [*MISTYPED, *((value, "JSON object") for value in NOT_OBJECTS)]:
        with pytest.raises(ValueError, match=re.escape(named)):
            manager.import_memory(document, user_id="u")
    assert (manager.export_memory(user_id="u"), manager.get_history(user_id="u")) == before
    assert files(tmp_path) == stored


def test_an_export_still_imports_and_a_section_may_be_its_text(manager: MemoryManager) -> None:
    exported = json.loads(json.dumps(manager.export_memory(user_id="u")))
    manager.import_memory(exported, user_id="u")
    document = manager.import_memory(
        {"user": {"topOfMind": "Launching v2"}, "facts": [], "revision": 0}, user_id="u"
    )
    assert document["user"]["topOfMind"]["summary"] == "Launching v2"
    assert document["user"]["workContext"]["summary"] == ""
    assert document["facts"] == []


def test_the_http_api_answers_400_naming_the_field(
    tmp_path: Path, isolated_environment: Path
) -> None:
    app = create_app(app_config(tmp_path), home=isolated_environment)
    with LiveServer(app) as server, httpx.Client(base_url=server.base_url) as http:
        existing = http.post("/api/memory/import", json={"facts": [{"content": "Drinks tea"}]})
        assert existing.status_code == 200
        stored = files(tmp_path / "store")
        for document, named in [*MISTYPED, *((value, "JSON object") for value in NOT_OBJECTS)]:
            answered = http.post(
                "/api/memory/import",
                content=json.dumps(document),
                headers={"Content-Type": "application/json"},
            )
            assert answered.status_code == 400, (document, answered.text)
            assert answered.json()["error"] == "invalid_input"
            assert named in answered.json()["detail"], (document, answered.text)
        assert [f["content"] for f in http.get("/api/memory").json()["facts"]] == ["Drinks tea"]
    assert files(tmp_path / "store") == stored


def test_the_cli_exits_2_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"memory:\n  backend_config:\n    storage_path: {json.dumps(str(tmp_path / 'store'))}\n",
        encoding="utf-8",
    )
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(app, ["memory", *args, "-c", str(config)], env={"COLUMNS": "300"})

    assert run("facts", "add", "Drinks tea").exit_code == 0
    stored = files(tmp_path / "store")
    for number, (document, named) in enumerate(MISTYPED):
        path = tmp_path / f"import-{number}.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        result = run("import", str(path), "--yes")
        assert result.exit_code == 2, (document, result.output)
        assert named in " ".join(result.output.split()), (document, result.output)
        assert "imported" not in result.output
    assert files(tmp_path / "store") == stored
