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
import logging
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from deerflow.agents.memory.backends.deermem.deermem.core.sqlite import (
    apply_migrations,
    immediate_transaction,
)

__all__ = ["LineCounts", "TokenCache", "line_key"]

logger = logging.getLogger(__name__)

LineCounts = tuple[int, int, int]
"""Tokens of a line alone, followed by "\\n", and followed by "\\n\\n"."""

_BUSY_TIMEOUT_S: Final = 1.0  # a write that waits longer turns the cache off
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
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._off = False

    def get(self, line: str) -> LineCounts | None:
        """The stored counts of `line`, or None when unknown."""
        with self._lock:
            conn = self._usable()
            if conn is None:
                return None
            try:
                row = conn.execute(
                    "SELECT alone, newline, blank FROM cl100k_lines WHERE digest = ?",
                    (line_key(line),),
                ).fetchone()
            except sqlite3.Error:
                self._turn_off()
                return None
        return None if row is None else (row[0], row[1], row[2])

    def put(self, counts: Mapping[str, LineCounts]) -> None:
        """Store counts made by the real encoding (lines already stored are left as they are)."""
        rows = [(line_key(line), *values) for line, values in counts.items()]
        with self._lock:
            conn = self._usable()
            if conn is None or not rows:
                return
            try:
                with immediate_transaction(conn):
                    conn.executemany(
                        "INSERT OR IGNORE INTO cl100k_lines (digest, alone, newline, blank)"
                        " VALUES (?, ?, ?, ?)",
                        rows,
                    )
            except sqlite3.Error:
                self._turn_off()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _usable(self) -> sqlite3.Connection | None:
        """The connection, opened on first use; None once the cache is off. Hold the lock."""
        if self._conn is None and not self._off:
            try:
                self._conn = _open(self.path)
            except (sqlite3.Error, OSError):
                self._turn_off()
        return self._conn

    def _turn_off(self) -> None:
        logger.warning(
            "token count cache %s failed; counting with the encoding instead",
            self.path,
            exc_info=True,
        )
        self._off = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _open(path: Path) -> sqlite3.Connection:
    """Open the file, recreating it when it is not a readable database."""
    try:
        return _connect(path)
    except sqlite3.DatabaseError as exc:
        if exc.sqlite_errorcode not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            raise
    logger.warning("token count cache %s unreadable; recreating it", path)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return _connect(path)


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # derived data: a lost row is counted again
        with immediate_transaction(conn):
            apply_migrations(conn, MIGRATIONS)
    except BaseException:
        conn.close()
        raise
    return conn
