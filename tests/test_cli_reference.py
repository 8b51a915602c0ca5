"""docs/cli.md's options reference is what the `deerflow` app says: a new command or option
without its entry fails here (regenerate with `python -m scripts.cli_reference`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from scripts import cli_reference

from deerflow.cli import memory_cmd

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
HINT = "docs/cli.md is out of date: run `python -m scripts.cli_reference`"


def test_the_reference_in_docs_is_current() -> None:
    document = DOC.read_text(encoding="utf-8")
    assert cli_reference.START in document, "docs/cli.md lost its reference markers"
    assert cli_reference.render(document) == document, HINT


def test_every_command_and_option_has_an_entry() -> None:
    document = DOC.read_text(encoding="utf-8")
    root = typer.main.get_command(cli_reference.app)
    for name, command, context in cli_reference.commands(root, ("deerflow",)):
        assert f"### `{name} --help`" in document, f"{name}: no entry. {HINT}"
        for param in command.params:
            record = param.get_help_record(context)
            if record and param.param_type_name == "option":
                assert f"* `{cli_reference.one_line(record[0])}`:" in document, (
                    f"{name} {record[0]}: no entry. {HINT}"
                )


def test_an_option_added_without_its_entry_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    @memory_cmd.app.command(name="frobnicate")
    def frobnicate(
        depth: int = typer.Option(3, "--depth", help="How deep to frobnicate."),
    ) -> None:
        """Frobnicate the memory."""

    try:
        document = DOC.read_text(encoding="utf-8")
        stale = cli_reference.render(document)
        assert stale != document
        assert "* `--depth <int>`: How deep to frobnicate. [default: 3]" in stale
        monkeypatch.setattr(cli_reference, "CLI_DOC", DOC)
        assert cli_reference.main(["--check"]) == 1
    finally:
        memory_cmd.app.registered_commands.pop()
    assert cli_reference.render(document) == document
