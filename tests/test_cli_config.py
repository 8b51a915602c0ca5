"""`deerflow config check`: validates, shows the resolved config, never shows a secret."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deerflow.cli.app import app

SECRET = "sk-proj-0123456789abcdefghij"
CONFIG = """
models:
  - name: default
    use: langchain_core.language_models.fake_chat_models:FakeListChatModel
    api_key: $OPENAI_API_KEY
memory:
  manager_class: noop
  backend_config:
    storage_path: data
    model:
      api_key: $OPENAI_API_KEY
    nested:
      - password: literal-password-1
"""


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return path


def test_check_prints_resolved_config_without_secrets(
    config_file: Path, isolated_environment: Path
) -> None:
    wide = {"COLUMNS": "250"}
    result = CliRunner().invoke(app, ["config", "check", "--config", str(config_file)], env=wide)
    assert result.exit_code == 0, result.output
    assert "valid" in result.output
    assert "NoopMemoryManager" in result.output
    assert str(isolated_environment / "data") in result.output, "storage_path resolved under home"
    assert SECRET not in result.output
    assert "literal-password-1" not in result.output


def test_check_json_is_machine_readable(config_file: Path, isolated_environment: Path) -> None:
    result = CliRunner().invoke(app, ["config", "check", "--json", "-c", str(config_file)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["valid"] is True
    memory = report["config"]["memory"]
    assert memory["backend_config"]["storage_path"] == str(isolated_environment / "data")
    assert memory["backend_config"]["model"]["api_key"] == "***"
    assert report["config"]["models"][0]["api_key"] == "***"
    assert memory["shutdown_flush_timeout_seconds"] == 30, "defaults are shown resolved"
    assert SECRET not in result.output


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("memory:\n  mode: sometimes\n", "memory.mode"),
        ("memory:\n  manager_class: no-such-backend\n", "Refusing to fall back"),
        (
            "memory:\n  manager_class: noop\n  backend_config:\n    api_key: $UNSET_VAR\n",
            "UNSET_VAR",
        ),
    ],
)
def test_invalid_config_exits_1_with_the_reason(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(app, ["config", "check", "-c", str(path)])
    assert result.exit_code == 1
    # Rich wraps at the terminal width, and the list of known backends grows with each folder.
    assert expected in " ".join(result.output.split())
    as_json = CliRunner().invoke(app, ["config", "check", "--json", "-c", str(path)])
    assert as_json.exit_code == 1
    assert json.loads(as_json.output)["valid"] is False


def test_tool_mode_with_a_backend_without_search_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "tool.yaml"
    path.write_text(
        "memory:\n  mode: tool\n  manager_class: deerflow.agents.memory.base:MemoryManager\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["config", "check", "-c", str(path)])
    assert result.exit_code == 1
    assert "tool" in result.output
    assert "search()" in result.output


def test_secrets_stay_out_of_logs_in_a_real_process(config_file: Path, tmp_path: Path) -> None:
    """The installed console script, verbose logging on: neither stdout nor stderr holds the key."""
    config_file.write_text(CONFIG + "typo_key: 1\n", encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, "-m", "deerflow", "-v", "config", "check", "-c", str(config_file)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    assert "typo_key" in completed.stderr, "the unknown-key warning reached the log"
    assert SECRET not in completed.stdout + completed.stderr
    assert "literal-password-1" not in completed.stdout + completed.stderr


def test_piped_output_is_neither_wrapped_nor_padded(tmp_path: Path) -> None:
    """Written to a file (not a terminal), a long value and a long error each stay one line."""
    storage = "a-storage-folder-" + "with-a-long-name-" * 8
    valid, invalid = tmp_path / "valid.yaml", tmp_path / "invalid.yaml"
    valid.write_text(f"memory:\n  backend_config:\n    storage_path: {storage}\n", "utf-8")
    invalid.write_text(
        f"memory:\n  backend_config:\n    storage_path: {storage}\n    max_facts: 2\n", "utf-8"
    )
    command = [sys.executable, "-m", "deerflow", "config", "check", "-c"]
    shown = subprocess.run(
        [*command, str(valid)], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout
    refused = subprocess.run(
        [*command, str(invalid)], capture_output=True, text=True, check=False, cwd=tmp_path
    )

    assert refused.returncode == 1
    assert any(storage in line for line in shown.splitlines()), "the path on one line"
    assert [line for line in refused.stderr.splitlines() if "max_facts" in line] == [
        line for line in refused.stderr.splitlines() if str(invalid) in line
    ], "the error names file and key on one line"
    assert not [line for line in shown.splitlines() if line != line.rstrip()]
