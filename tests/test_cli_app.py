"""The `deerflow` command as a whole: help on every command."""

from __future__ import annotations

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
