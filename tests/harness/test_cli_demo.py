"""`deerflow demo` end to end: the real lead agent and DeerMem, with a scripted model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from deerflow.cli.app import app
from deerflow.cli.demo_session import SESSION_ONE, SESSION_TWO
from deerflow.models import install
from tests.harness.scripted_model import USE, ScriptedConversationModel

REPO_ROOT = Path(__file__).resolve().parents[2]
FACTS = [
    {"content": "Name is Maria", "category": "identity", "confidence": 1.0},
    {"content": "Works as a data engineer in Lisbon", "category": "context", "confidence": 0.9},
    {
        "content": "Prefers pnpm over npm for JavaScript projects",
        "category": "preference",
        "confidence": 0.9,
    },
]


@pytest.fixture(autouse=True)
def fresh_script() -> Iterator[None]:
    ScriptedConversationModel.reset()
    yield
    ScriptedConversationModel.reset()


def demo_with(tmp_path: Path, **model: Any) -> Result:
    """`deerflow demo` with examples/demo.yaml plus a scripted model under `models:`."""
    document = yaml.safe_load((REPO_ROOT / "examples" / "demo.yaml").read_text(encoding="utf-8"))
    document["models"] = [{"name": "scripted", "use": USE, **model}]
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return CliRunner().invoke(app, ["demo", "-c", str(path)], env={"COLUMNS": "200"})


def test_the_demo_shows_what_session_one_taught_and_that_session_two_starts_with_it(
    tmp_path: Path,
) -> None:
    replies = ["Nice to meet you, Maria!", "Noted.", "Use pnpm, as you prefer."]

    result = demo_with(tmp_path, replies=replies, facts=FACTS)

    assert result.exit_code == 0, result.output
    out = result.output
    for text in (*SESSION_ONE, *SESSION_TWO, *replies):
        assert text in out
    learned = out.index("What memory learned from session one")
    block = out.index("the memory block session two's system prompt started with")
    for fact in FACTS:
        assert fact["content"] in out[learned:block]
    assert "Session one taught memory 3 fact(s); session two started with 3 of them" in out
    # What the panel shows is what the model was given: session two's first system prompt.
    session_two_prompt = ScriptedConversationModel.system_prompts()[len(SESSION_ONE)]
    assert all(fact["content"] in session_two_prompt for fact in FACTS)
    first_prompt = ScriptedConversationModel.system_prompts()[0]
    assert "<memory>" not in first_prompt, "session one starts with nothing"


def test_running_the_demo_again_starts_from_a_clean_memory(tmp_path: Path) -> None:
    demo_with(tmp_path, facts=FACTS)
    ScriptedConversationModel.reset()

    result = demo_with(tmp_path, facts=FACTS[:1])

    assert result.exit_code == 0, result.output
    assert "Session one taught memory 1 fact(s)" in result.output
    # Only session one was extracted: nothing queued by the first run came back.
    [prompt] = ScriptedConversationModel.extraction_prompts
    conversation = prompt[-1].text
    assert SESSION_ONE[0] in conversation
    assert SESSION_TWO[0] not in conversation


def test_a_model_that_learns_nothing_fails_the_demo_plainly(tmp_path: Path) -> None:
    result = demo_with(tmp_path, facts=[])

    assert result.exit_code == 1
    assert "Nothing was learned" in result.output
    assert "Session one taught memory 0 fact(s)" in result.output


def test_the_demo_refuses_a_config_with_memory_off(tmp_path: Path) -> None:
    path = tmp_path / "off.yaml"
    path.write_text(f"models: [{{name: s, use: '{USE}'}}]\nmemory: {{enabled: false}}\n")

    result = CliRunner().invoke(app, ["demo", "-c", str(path)])

    assert result.exit_code == 2
    assert "memory.enabled is false" in result.output


def test_the_demo_stops_clearly_on_a_backend_that_cannot_show_memory(tmp_path: Path) -> None:
    path = tmp_path / "noop.yaml"
    path.write_text(f"models: [{{name: s, use: '{USE}'}}]\nmemory: {{manager_class: noop}}\n")

    result = CliRunner().invoke(app, ["demo", "-c", str(path)], env={"COLUMNS": "200"})

    assert result.exit_code == 5
    assert "does not support 'get_memory'" in result.output


@pytest.mark.parametrize("command", ["chat", "demo"])
@pytest.mark.parametrize(
    ("memory", "key"),
    [
        ({"manager_class": "no_such_backend"}, "memory.manager_class"),
        ({"backend_config": {"max_fact": 10, "strict": True}}, "memory.backend_config.max_fact"),
    ],
)
def test_a_bad_backend_is_reported_before_any_install(
    tmp_path: Path,
    isolated_environment: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    memory: dict[str, Any],
    key: str,
) -> None:
    """No `models:`, so the offline model would be installed (minutes): the config goes first."""
    attempts: list[str] = []

    def no_install() -> Any:
        attempts.append("install")
        raise AssertionError("the install must not start")

    monkeypatch.setattr(install, "local_extra_installed", lambda: False)
    monkeypatch.setattr(install, "install_command", no_install)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"memory": memory}), encoding="utf-8")

    result = CliRunner().invoke(app, [command, "-c", str(config)], input="/quit\n")

    assert result.exit_code == 2, result.output
    assert f"{config}: {key}" in " ".join(result.output.split())
    assert attempts == []
    assert "installing" not in result.output
