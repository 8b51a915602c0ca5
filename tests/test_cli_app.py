"""The `deerflow` command as a whole: help on every command."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from deerflow.cli.app import app


def all_commands() -> list[tuple[str, Any]]:
    """Every command and group of the app with its full invocation, e.g. `deerflow config check`."""
    found: list[tuple[str, Any]] = []

    def walk(command: Any, path: str) -> None:
        found.append((path, command))
        for name, child in getattr(command, "commands", {}).items():
            walk(child, f"{path} {name}")

    walk(typer.main.get_command(app), "deerflow")
    return found


@pytest.mark.parametrize(("path", "command"), all_commands(), ids=[p for p, _ in all_commands()])
def test_every_command_has_help(path: str, command: Any) -> None:
    assert (command.help or "").strip(), f"{path} has no help text"
    args = [*path.split()[1:], "--help"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_the_cli_loads_the_agent_machinery_only_for_the_commands_that_run_agents() -> None:
    """LangChain's agents, LangGraph, the MCP adapters and llama.cpp take seconds to import."""
    code = (
        "import sys\n"
        "import deerflow.cli.app\n"
        "heavy = ('langchain.agents', 'langgraph', 'langchain_mcp_adapters', 'llama_cpp')\n"
        "print(sorted(n for n in sys.modules if n.startswith(tuple(h + '.' for h in heavy))"
        " or n in heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_version_prints_the_installed_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"deerflow {importlib.metadata.version('deerflow-memory')}\n"


def test_chat_help_names_the_agents_folder() -> None:
    result = CliRunner().invoke(app, ["chat", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "{home}" not in result.stdout
    assert "$DEER_FLOW_HOME/agents/NAME/" in result.stdout


def test_log_records_stay_one_line_when_stderr_is_not_a_terminal() -> None:
    """Rich's log layout would wrap a long record at 80 columns and pad it with spaces."""
    code = (
        "import logging\n"
        "from deerflow.cli.app import configure_logging\n"
        "configure_logging(logging.WARNING)\n"
        "secret = 'api_key=sk-proj-4fG7hK2mN9pQ3rS8'\n"
        "logging.getLogger('deerflow.test').warning('x' * 300 + ' ' + secret)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    (line,) = out.stderr.splitlines()
    assert line.startswith("WARNING deerflow.test: " + "x" * 300)
    assert line == line.rstrip()
    assert "4fG7hK2mN9pQ3rS8" not in line, "credentials stay masked"
