"""What every `deerflow memory` command shares: the manager's lifetime, errors, confirmation.

`memory_session` builds the configured manager once and closes it; `handle_errors` turns library
errors into exit codes by type, from the one table `ERROR_EXITS`; `confirm` guards destructive
commands and refuses, rather than waits, when nobody can answer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final, NamedTuple

import typer
from rich.markup import escape

from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactEvictedError,
    FactNotFoundError,
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManager,
    MemoryManagerError,
    MemoryUnsupportedError,
)
from deerflow.cli import memory_render as render
from deerflow.cli.ids import AmbiguousIdError
from deerflow.config import ConfigError
from deerflow.redaction import redact_text
from deerflow.startup import build_checked, load_checked

__all__ = [
    "ERROR_EXITS",
    "ConfirmationRefused",
    "ErrorExit",
    "UsersExistError",
    "confirm",
    "error_exit",
    "handle_errors",
    "memory_session",
    "stdin_is_interactive",
]


# -- errors, in one place ------------------------------------------------------------------------


class ConfirmationRefused(Exception):
    """A destructive command was not confirmed."""


class UsersExistError(Exception):
    """Users to write already have a memory at the destination (`memory copy`)."""


class ErrorExit(NamedTuple):
    exit_code: int
    code: str  # the `error` value of the `--json` error object
    prefix: str | None  # put before the message on stderr; None: the message says it already


# First match wins, so subclasses come before their bases.
ERROR_EXITS: Final[tuple[tuple[type[Exception], ErrorExit], ...]] = (
    (ConfirmationRefused, ErrorExit(1, "not_confirmed", None)),
    (UsersExistError, ErrorExit(2, "users_exist", None)),
    (FactNotFoundError, ErrorExit(3, "fact_not_found", None)),
    (DuplicateFactError, ErrorExit(4, "duplicate_fact", "duplicate")),
    (FactEvictedError, ErrorExit(4, "fact_evicted", "evicted")),
    (MemoryConflictError, ErrorExit(4, "conflict", "conflict")),
    (MemoryUnsupportedError, ErrorExit(5, "unsupported", None)),
    (MemoryCorruptionError, ErrorExit(6, "corruption", "stored memory is corrupt")),
    (AmbiguousIdError, ErrorExit(2, "ambiguous_id", None)),
    (MemoryManagerError, ErrorExit(1, "memory_error", "memory error")),
    (ConfigError, ErrorExit(2, "invalid_config", "invalid configuration")),
    (ValueError, ErrorExit(2, "invalid_input", "invalid input")),
    (OSError, ErrorExit(1, "os_error", "error")),
)


def error_exit(exc: Exception) -> ErrorExit | None:
    """How the CLI reports `exc`, decided by its type; None for errors it does not handle."""
    return next((exit_ for kind, exit_ in ERROR_EXITS if isinstance(exc, kind)), None)


@contextmanager
def handle_errors(json_output: bool) -> Iterator[None]:
    """Turn a known error into its exit code and one line (stderr), or a JSON object (stdout)."""
    try:
        yield
    except Exception as exc:
        exit_ = error_exit(exc)
        if exit_ is None:
            raise
        # One problem per line (a config error lists each key on its own), spaces tidied.
        lines = [" ".join(line.split()) for line in redact_text(str(exc)).splitlines()]
        detail = "\n".join(line for line in lines if line)
        if json_output:
            render.print_json({"error": exit_.code, "detail": detail})
        else:
            separator = ":\n" if "\n" in detail else ": "
            text = f"{exit_.prefix}{separator}{detail}" if exit_.prefix else detail
            render.stderr().print(f"[red]{escape(text)}[/]")
        raise typer.Exit(exit_.exit_code) from None


@contextmanager
def memory_session(config: Path | None, *, json_output: bool) -> Iterator[MemoryManager]:
    """The configured manager, built once and closed at the end, with errors mapped by type."""
    with handle_errors(json_output):
        manager = build_checked(*load_checked(config))
        try:
            yield manager
        finally:
            manager.close()


def stdin_is_interactive() -> bool:
    """Whether a person can answer a prompt (tests replace this)."""
    return sys.stdin.isatty()


def confirm(question: str, *, yes: bool) -> None:
    """Ask before a destructive change; without a terminal, refuse instead of waiting.

    Raises:
        ConfirmationRefused: not confirmed, or nobody to ask and no `--yes`.
    """
    if yes:
        return
    if not stdin_is_interactive():
        raise ConfirmationRefused("not confirmed: no terminal to ask; pass --yes to go ahead")
    if not typer.confirm(question, default=False, err=True):
        raise ConfirmationRefused("not confirmed: nothing changed")
