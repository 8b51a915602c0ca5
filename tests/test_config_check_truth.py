"""`deerflow config check` tells the truth: what it refuses names the file and the key, and what
it calls valid starts `serve` (a real uvicorn on loopback), `chat` (a scripted model), `memory
show` and `mcp` (a real MCP client over stdio)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from deerflow.cli.app import app
from tests.gateway.serve_process import serve_process
from tests.harness.scripted_model import USE, ScriptedConversationModel
from tests.harness.test_mcp_server import session_calls
from tests.test_deerflow_blocks import DEERMEM_BLOCK

WIDE = {"COLUMNS": "300"}
SCRIPTED = {"name": "scripted", "use": USE, "replies": ["Noted."]}


def write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def deermem(**backend_config: Any) -> dict[str, Any]:
    return {"models": [SCRIPTED], "memory": {"backend_config": backend_config}}


def check(config: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["config", "check", "-c", str(config), *extra], env=WIDE)


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("max_facts below DeerFlow's minimum", deermem(max_facts=5), "memory.backend_config.max_facts"),
    ("max_facts above the ceiling", deermem(max_facts=20_000), "memory.backend_config.max_facts"),
    (
        "a confidence threshold above 1",
        deermem(fact_confidence_threshold=2),
        "memory.backend_config.fact_confidence_threshold",
    ),
    ("a typo under strict", deermem(max_fact=10, strict=True), "memory.backend_config.max_fact"),
    (
        "OpenViking in tool mode",
        {"models": [SCRIPTED], "memory": {"manager_class": "openviking", "mode": "tool"}},
        "memory.mode",
    ),
    (
        "an unimportable model class",
        {"models": [{"name": "m", "use": "langchain_ollama:ChatOllama"}]},
        "models[0].use",
    ),
    ("a storage path that is a file", deermem(storage_path="FILE"), "storage_path"),
    (
        "a storage path under a file",
        deermem(storage_path="FILE/memory"),
        "memory.backend_config.storage_path",
    ),
]


@pytest.fixture
def no_ollama(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes `import langchain_ollama` fail, installed or not.
    monkeypatch.setitem(sys.modules, "langchain_ollama", None)


@pytest.mark.parametrize(("label", "document", "key"), INVALID, ids=[row[0] for row in INVALID])
def test_each_invalid_config_is_refused_naming_the_file_and_the_key(
    tmp_path: Path,
    isolated_environment: Path,
    no_ollama: None,
    monkeypatch: pytest.MonkeyPatch,
    label: str,
    document: dict[str, Any],
    key: str,
) -> None:
    monkeypatch.setenv("OPENVIKING_API_KEY", "ov-test-key")
    (tmp_path / "FILE").write_text("not a directory", encoding="utf-8")
    backend_config = document.get("memory", {}).get("backend_config", {})
    if "storage_path" in backend_config:
        backend_config["storage_path"] = str(tmp_path / backend_config["storage_path"])
    config = write(tmp_path / "my-config.yaml", document)

    result = check(config)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if key in line]
    assert lines, result.output
    assert all(line.startswith(f"{config}: ") for line in lines), lines

    # The memory commands start through the same code, and fail the same way.
    shown = CliRunner().invoke(app, ["memory", "show", "-c", str(config)], env=WIDE)
    assert shown.exit_code == 2, shown.output
    assert any(f"{config}: " in line and key in line for line in shown.output.splitlines())


def test_several_problems_are_listed_one_per_line(
    tmp_path: Path, isolated_environment: Path
) -> None:
    config = write(tmp_path / "two.yaml", deermem(max_facts=5, fact_confidence_threshold=2))
    result = check(config)
    assert result.exit_code == 1
    problems = [line for line in result.output.splitlines() if line.startswith(f"{config}: ")]
    assert len(problems) == 2, result.output
    shown = CliRunner().invoke(app, ["memory", "show", "-c", str(config)], env=WIDE)
    assert shown.exit_code == 2
    assert "invalid configuration:" in shown.output
    named = [line for line in shown.output.splitlines() if line.startswith(f"{config}: ")]
    assert len(named) == 2, shown.output


def test_an_unimportable_provider_names_the_extra_to_install(
    tmp_path: Path, isolated_environment: Path, no_ollama: None
) -> None:
    config = write(
        tmp_path / "config.yaml", {"models": [{"name": "m", "use": "langchain_ollama:ChatOllama"}]}
    )
    result = check(config, "--json")
    assert result.exit_code == 1
    assert "uv sync --extra ollama" in result.output
    assert "deerflow-memory[ollama]" in result.output


VALID: list[tuple[str, dict[str, Any] | str]] = [
    ("the defaults with a model", deermem()),
    ("DeerFlow's DeerMem block", DEERMEM_BLOCK),
    ("max_facts 1000 and a typo, not strict", deermem(max_facts=1000, max_fact=10)),
    ("tool mode", {"models": [SCRIPTED], "memory": {"mode": "tool"}}),
]


@pytest.mark.parametrize(("label", "document"), VALID, ids=[row[0] for row in VALID])
def test_each_config_check_calls_valid_starts_serve_chat_memory_show_and_mcp(
    tmp_path: Path,
    isolated_environment: Path,
    monkeypatch: pytest.MonkeyPatch,
    label: str,
    document: dict[str, Any] | str,
) -> None:
    config = tmp_path / "config.yaml"
    if isinstance(document, str):
        config.write_text(document + yaml.safe_dump({"models": [SCRIPTED]}), encoding="utf-8")
    else:
        write(config, document)
    result = check(config)
    assert result.exit_code == 0, result.output

    shown = CliRunner().invoke(app, ["memory", "show", "-c", str(config)], env=WIDE)
    assert shown.exit_code == 0, shown.output

    ScriptedConversationModel.reset()
    chatted = CliRunner().invoke(
        app, ["chat", "-c", str(config)], input="Hello there.\n/quit\n", env=WIDE
    )
    assert chatted.exit_code == 0, chatted.output
    assert "agent> Noted." in chatted.output

    with serve_process("--config", str(config), home=isolated_environment) as server:
        assert httpx.get(server.base_url + "/api/memory").status_code == 200
        server.terminate()

    # The child process imports the scripted model from this repository's tests package.
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    tools, (found,) = asyncio.run(
        session_calls(config, "alice", [("memory_search", {"query": "pnpm"})])
    )
    assert len(tools) == 4
    assert not found.isError


def test_config_example_yaml_runs_with_the_openai_extra_and_a_key(
    isolated_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("langchain_openai", reason="the openai extra is not installed")
    example = Path(__file__).resolve().parents[1] / "config.example.yaml"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
    assert check(example).exit_code == 0
    monkeypatch.setitem(sys.modules, "langchain_openai", None)
    refused = check(example)
    assert refused.exit_code == 1
    assert "models[0].use" in refused.output
    assert "uv sync --extra openai" in refused.output
