"""`deerflow chat`, driven with scripted input and a scripted model configured under `models:`."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from deerflow.agents.memory.manager import MemoryManager, build_memory_manager
from deerflow.cli.app import app
from deerflow.config import load_config
from tests.harness.scripted_model import USE, ScriptedConversationModel

PNPM = "Prefers pnpm over npm for JavaScript projects"
WIDE = {"COLUMNS": "200"}


def write_config(path: Path, store: Path, **model: Any) -> Path:
    entry = {"name": "scripted", "use": USE, "replies": ["Noted: pnpm it is."], **model}
    document = {
        "models": [entry],
        "memory": {"backend_config": {"storage_path": str(store)}},
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def fresh_script() -> Iterator[None]:
    ScriptedConversationModel.reset()
    yield
    ScriptedConversationModel.reset()


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    facts = [{"content": PNPM, "category": "preference", "confidence": 0.9}]
    return write_config(tmp_path / "config.yaml", tmp_path / "store", facts=facts)


@pytest.fixture
def library(config_file: Path) -> Iterator[MemoryManager]:
    """A manager of its own on the chat's storage: how the tests see what the chat did."""
    manager = build_memory_manager(load_config(config_file).memory)
    yield manager
    manager.close()


def chat(config_file: Path, *lines: str, args: tuple[str, ...] = ()) -> Result:
    text = "".join(f"{line}\n" for line in lines)
    return CliRunner().invoke(app, ["chat", "-c", str(config_file), *args], input=text, env=WIDE)


def test_a_turn_streams_the_reply_and_exit_saves_what_was_learned(
    config_file: Path, library: MemoryManager
) -> None:
    result = chat(config_file, "I always use pnpm for JavaScript, never npm.", "/quit")

    assert result.exit_code == 0, result.output
    assert "agent> Noted: pnpm it is." in result.output
    assert "Saving memory (waiting up to 30 s)..." in result.output
    assert "Memory saved." in result.output
    facts = library.get_memory()["facts"]
    assert [fact["content"] for fact in facts] == [PNPM]
    # The extraction read the conversation the user typed.
    conversation = ScriptedConversationModel.extraction_prompts[0][-1].text
    assert "I always use pnpm for JavaScript, never npm." in conversation


def test_the_next_chat_starts_with_the_memory_and_can_show_and_forget_it(
    tmp_path: Path, config_file: Path, library: MemoryManager
) -> None:
    chat(config_file, "I always use pnpm for JavaScript, never npm.")  # ends at end of input
    fact_id = library.get_memory()["facts"][0]["id"]
    ScriptedConversationModel.reset()
    write_config(config_file, tmp_path / "store")  # this time the model learns nothing

    result = chat(config_file, "Which package manager?", "/memory", f"/forget {fact_id}", "/quit")

    assert result.exit_code == 0, result.output
    first_prompt = ScriptedConversationModel.system_prompts()[0]
    assert "<memory>" in first_prompt
    assert PNPM in first_prompt
    assert PNPM in result.output  # /memory shows it
    assert f"forgot {fact_id}" in result.output
    assert library.reload_memory()["facts"] == []


def test_forget_takes_a_unique_prefix_of_the_id_as_memory_facts_rm_does(
    config_file: Path, library: MemoryManager
) -> None:
    _, fact_id = library.create_fact(PNPM, "preference", 0.9)
    assert fact_id is not None

    result = chat(config_file, f"/forget {fact_id[5:13]}", "/quit")

    assert result.exit_code == 0, result.output
    assert f"forgot {fact_id}" in result.output
    assert library.reload_memory()["facts"] == []


def test_memory_is_per_user(config_file: Path) -> None:
    chat(config_file, "I always use pnpm for JavaScript, never npm.", args=("--user", "alice"))
    ScriptedConversationModel.reset()

    chat(config_file, "Which package manager?", args=("--user", "bob"))

    assert PNPM not in ScriptedConversationModel.system_prompts()[0]


def test_new_starts_a_thread_that_reads_memory_again(
    config_file: Path, library: MemoryManager
) -> None:
    library.create_fact(PNPM, "preference", 0.9)

    result = chat(config_file, "Hello", "/new", "Hello again", "/quit", args=("-t", "first"))

    assert result.exit_code == 0, result.output
    assert "thread first" in result.output
    assert "new thread thread-" in result.output
    prompts = ScriptedConversationModel.system_prompts()
    assert len(prompts) == 2
    assert all(PNPM in prompt for prompt in prompts)


def test_slash_command_mistakes_are_answered_not_fatal(config_file: Path) -> None:
    missing = "fact_" + "0" * 32
    result = chat(
        config_file, "/forget", "/forget nonsense", f"/forget {missing}", "/what", "/quit"
    )

    assert result.exit_code == 0, result.output
    assert "usage: /forget FACT_ID" in result.output
    assert "'nonsense' is not a fact id" in result.output
    assert f"no fact {missing} in this memory" in result.output
    assert "/memory" in result.output
    assert "/new" in result.output
    assert ScriptedConversationModel.chat_prompts == []


def test_a_custom_agent_has_its_soul_and_its_own_memory_bucket(
    tmp_path: Path, config_file: Path, library: MemoryManager
) -> None:
    agent_dir = tmp_path / "home" / "agents" / "coder"
    agent_dir.mkdir(parents=True)
    (agent_dir / "config.yaml").write_text("description: writes code\n", encoding="utf-8")
    (agent_dir / "SOUL.md").write_text("You are Coder, terse and exact.\n", encoding="utf-8")

    result = chat(config_file, "I always use pnpm.", "/quit", args=("--agent", "coder"))

    assert result.exit_code == 0, result.output
    assert "You are Coder, terse and exact." in ScriptedConversationModel.system_prompts()[0]
    assert [f["content"] for f in library.get_memory(agent_name="coder")["facts"]] == [PNPM]
    assert library.get_memory()["facts"] == []


def test_an_unknown_agent_is_refused_by_name(config_file: Path) -> None:
    result = chat(config_file, "/quit", args=("--agent", "nobody"))

    assert result.exit_code == 2
    assert "no agent 'nobody'" in result.output


def test_an_mcp_server_that_cannot_start_ends_the_chat_with_its_name(tmp_path: Path) -> None:
    path = write_config(tmp_path / "config.yaml", tmp_path / "store")
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["mcp_servers"] = {"files": {"command": sys.executable, "args": ["missing.py"]}}
    path.write_text(yaml.safe_dump(document), encoding="utf-8")

    result = chat(path, "hello")

    assert result.exit_code == 1
    assert "mcp_servers.files: listing its tools failed" in result.output


def test_a_long_error_stays_one_line_when_output_is_not_a_terminal(config_file: Path) -> None:
    """Piped or captured (not a terminal), a message is never wrapped at 80 columns."""
    missing = "fact_" + "0123456789abcdef" * 2
    result = CliRunner().invoke(
        app,
        ["chat", "-c", str(config_file)],
        input=f"/forget {missing}\n/forget {missing}-{'x' * 100}\n/quit\n",
        env={"COLUMNS": "80"},
    )

    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if missing in line]
    assert len(lines) == 2, lines
    assert any(len(line) > 120 for line in lines), "the long one kept whole"
