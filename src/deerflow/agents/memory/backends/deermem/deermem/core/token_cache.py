"""cl100k token counts of injected lines, kept on disk so a new process can skip the tokenizer.

Building the cl100k encoding takes ~0.1 s, most of a cold start's first `get_context`. The count
of a string never changes, so counts made by the real encoding are stored in a small SQLite file
beside the retrieval index, keyed by a digest of the line, and a process whose lines are all
known formats the injected text without loading the encoding at all (`TokenCounter` uses this).

A row holds a line's counts alone, followed by one newline and by two: the injected text uses
every line in one of those forms (inside a section, at its end, or last), and which one changes
as memory changes.

Derived data, like the index: an unreadable file is recreated empty, and a failed write only
means the line is counted again later.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from deerflow.agents.memory.backends.deermem.deermem.core.sqlite import (
    DerivedDatabase,
    immediate_transaction,
)

__all__ = ["LineCounts", "TokenCache", "line_key"]

LineCounts = tuple[int, int, int]
"""Tokens of a line alone, followed by "\\n", and followed by "\\n\\n"."""

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        "CREATE TABLE cl100k_lines (digest BLOB PRIMARY KEY, alone INTEGER NOT NULL,"
        " newline INTEGER NOT NULL, blank INTEGER NOT NULL) WITHOUT ROWID",
    ),
)


def line_key(line: str) -> bytes:
    """The table key of `line`: 16 bytes of BLAKE2b (lone surrogates in stored text included)."""
    return hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class TokenCache:
    """The line-count table in one SQLite file, opened on first use. Thread-safe.

    After an error (other than a corrupt file, which is recreated) the cache logs one warning and
    stays off for the life of the object: lines are then counted by the encoding, as without it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = DerivedDatabase(
            path, MIGRATIONS, "token count cache", "counting with the encoding instead"
        )

    def get(self, line: str) -> LineCounts | None:
        """The stored counts of `line`, or None when unknown."""
        row = self._db.run(
            lambda conn: conn.execute(
                "SELECT alone, newline, blank FROM cl100k_lines WHERE digest = ?",
                (line_key(line),),
            ).fetchone()
        )
        return None if row is None else (row[0], row[1], row[2])

    def put(self, counts: Mapping[str, LineCounts]) -> None:
        """Store counts made by the real encoding (lines already stored are left as they are)."""
        rows = [(line_key(line), *values) for line, values in counts.items()]
        if not rows:
            return

        def insert(conn: sqlite3.Connection) -> None:
            with immediate_transaction(conn):
                conn.executemany(
                    "INSERT OR IGNORE INTO cl100k_lines (digest, alone, newline, blank)"
                    " VALUES (?, ?, ?, ?)",
                    rows,
                )

        self._db.run(insert)

    def close(self) -> None:
        self._db.close()
