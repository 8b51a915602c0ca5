"""The `deerflow` command as a whole: help on every command, and the demo's tour."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from deerflow.cli.app import app

REPO_ROOT = Path(__file__).resolve().parents[1]


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


def test_demo_tours_the_configured_backend() -> None:
    result = CliRunner().invoke(
        app, ["demo", "-c", str(REPO_ROOT / "examples" / "demo.yaml")], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "DeerMemMemoryManager" in result.output
    assert "[preference | 0.90] Prefers pnpm over npm for JavaScript projects" in result.output
    assert "(nothing remembered for someone-else)" in result.output
    assert "after revert: Prefers pnpm over npm for JavaScript projects" in result.output


def test_demo_stops_clearly_on_a_backend_without_fact_operations(tmp_path: Path) -> None:
    config = tmp_path / "noop.yaml"
    config.write_text("memory:\n  manager_class: noop\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["demo", "-c", str(config)], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "Memory backend 'NoopMemoryManager' does not support 'clear_memory'." in result.output
