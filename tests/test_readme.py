"""Every Python and shell snippet of README.md runs, as a reader would run it.

The Python snippets run in a child process in an empty directory whose config.yaml names a
scripted model (it extracts one fact), so the library path is shown to learn with the configured
model, twice in a row. The shell snippets run line by line with the installed `deerflow`; the
few that cannot run unattended are listed in `SKIPPED` with the test that covers them instead.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
import yaml

from tests.harness.scripted_model import USE

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
README: Final = REPO_ROOT / "README.md"
FACT: Final = "Prefers pnpm over npm for JavaScript projects"
DEERFLOW: Final = f"{sys.executable} -m deerflow"

# Shell lines the test does not run, by their start, and why.
SKIPPED: Final = {
    "make demo": "installs the offline model (minutes); tests/harness/test_cli_demo.py runs it",
    "make test": "the whole suite, of which this test is a part",
    "uv run deerflow demo": "the offline model again; tests/harness/test_cli_demo.py",
    "uv run deerflow chat": "interactive; tests/harness/test_cli_chat.py drives it",
    "uv run deerflow serve": "runs until stopped; tests/gateway/test_lifecycle.py starts it",
}
# What a reader fills in for a placeholder, as a function of the commands run so far.
CHANGE_ID: Final = "CHANGE_ID"


def snippets(language: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEER_FLOW_", "LANGFUSE_"))}
    return {**env, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=child_env(), capture_output=True, text=True, check=False, timeout=300
    )


def test_the_readme_has_the_snippets_this_test_runs() -> None:
    assert len(snippets("python")) == 2
    assert len(snippets("sh")) >= 2


def test_the_python_snippets_learn_with_the_configured_model_and_can_run_again(
    tmp_path: Path,
) -> None:
    facts = [{"content": FACT, "category": "preference", "confidence": 0.9}]
    model = {"name": "scripted", "use": USE, "replies": ["Noted."], "facts": facts}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"models": [model]}), encoding="utf-8")
    library, agent = snippets("python")
    # The second snippet's placeholders: the reader's own chat model and tools.
    placeholders = (
        "from tests.harness.scripted_model import ScriptedConversationModel\n"
        "model = ScriptedConversationModel(replies=['Noted.'])\n"
        "my_tools = []\n"
    )
    script = tmp_path / "readme_snippets.py"
    script.write_text(library + placeholders + agent, encoding="utf-8")

    first = run([sys.executable, str(script)], tmp_path)
    assert first.returncode == 0, first.stderr
    assert FACT in first.stdout, "search found the fact the configured model extracted"
    second = run([sys.executable, str(script)], tmp_path)
    assert second.returncode == 0, second.stderr
    shown = run([*DEERFLOW.split(), "memory", "show", "--user", "alice", "--json"], tmp_path)
    contents = [fact["content"] for fact in json.loads(shown.stdout)["facts"]]
    assert contents == [FACT], "two runs store the fact once"


def test_the_shell_snippets_run(tmp_path: Path) -> None:
    ran = []
    for block in snippets("sh"):
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            if not command or any(command.startswith(skip) for skip in SKIPPED):
                continue
            if CHANGE_ID in command:
                history = run([*DEERFLOW.split(), "memory", "history", "--json"], tmp_path)
                command = command.replace(CHANGE_ID, json.loads(history.stdout)[0]["change_id"])
            command = command.replace("uv run deerflow", DEERFLOW)
            if " memory revert " in command:
                command += " --yes"  # a reader at a terminal confirms; the test has no terminal
            completed = run(["bash", "-c", command], tmp_path)
            assert completed.returncode == 0, f"{line}\n{completed.stdout}\n{completed.stderr}"
            ran.append(command)
    assert any("memory facts add" in command for command in ran)
    assert any("memory revert" in command for command in ran)


@pytest.mark.parametrize("start", sorted(SKIPPED))
def test_each_skipped_line_is_still_in_the_readme(start: str) -> None:
    """A skip that matches nothing any more would hide a new command from this test."""
    lines = [line.strip() for block in snippets("sh") for line in block.splitlines()]
    assert any(line.startswith(start) for line in lines), start
