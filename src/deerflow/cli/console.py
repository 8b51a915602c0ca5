"""The Rich consoles and the log handler of every command, set up in one place.

At a terminal, output fits the window. Piped or redirected, it is for files, `grep` and scripts:
lines are never wrapped at a width (Rich would assume 80 columns), so a message or a table row
stays one line however long it is, and no line ends in the spaces that pad table cells.
"""

from __future__ import annotations

import logging
import re
from typing import IO, Final, cast

from rich.console import Console
from rich.logging import RichHandler

from deerflow.redaction import RedactingFilter, RedactingFormatter

__all__ = ["log_handler", "stderr", "stdout"]

# The width of output that is not a terminal: wider than any line memory holds (a fact is at
# most 10,000 characters), so nothing wraps. Tables and text are as wide as their content.
UNLIMITED: Final = 1_000_000
PLAIN_LOG_FORMAT: Final = "%(levelname)s %(name)s: %(message)s"


def stdout() -> Console:
    return _console(stderr=False)


def stderr() -> Console:
    return _console(stderr=True)


def _console(*, stderr: bool) -> Console:
    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console.width = UNLIMITED
        console.file = cast(IO[str], _TrimmedLines(console.file))  # all Rich calls of a file
    return console


class _TrimmedLines:
    """A text stream that drops the spaces at the end of each line written through it.

    Rich writes a whole rendering in one `write`, so a line and its end arrive together.
    """

    _TRAILING: Final = re.compile(r" +(?=\n)")

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(self._TRAILING.sub("", text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False


def log_handler() -> logging.Handler:
    """A handler for stderr with credentials masked: Rich at a terminal, one plain line per
    record otherwise (Rich's log layout fills the whole width)."""
    console = stderr()
    handler: logging.Handler
    if console.is_terminal:
        handler = RichHandler(console=console, show_path=False, rich_tracebacks=False)
        handler.setFormatter(RedactingFormatter("%(message)s"))
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(RedactingFormatter(PLAIN_LOG_FORMAT))
    handler.addFilter(RedactingFilter())
    return handler
