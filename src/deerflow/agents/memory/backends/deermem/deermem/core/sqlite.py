"""What DeerMem's SQLite files (the retrieval index, the write queue, the caches) share."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final, TypeVar

__all__ = ["DerivedDatabase", "apply_migrations", "immediate_transaction", "read_transaction"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_BUSY_TIMEOUT_S: Final = 1.0  # a cache that waits longer for another writer is turned off


@contextmanager
def immediate_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction; IMMEDIATE takes the write lock up front, so no upgrade fails.

    The connection must be in autocommit mode (`isolation_level=None`) and held by one thread.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One read transaction: every statement in it sees the same snapshot of the file (WAL),
    whatever other connections commit meanwhile. Same connection rules as above."""
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        if conn.in_transaction:  # an error may have ended it already
            conn.execute("COMMIT")  # nothing was written: this only ends the snapshot


def apply_migrations(conn: sqlite3.Connection, migrations: Sequence[Sequence[str]]) -> None:
    """Bring the schema up to date: `migrations[i]` takes it from version i to i + 1.

    Applied versions are recorded in a `migrations` table; run it inside a write transaction.
    """
    conn.execute("CREATE TABLE IF NOT EXISTS migrations (version INTEGER PRIMARY KEY)")
    (version,) = conn.execute("SELECT coalesce(max(version), 0) FROM migrations").fetchone()
    for number, statements in enumerate(migrations[version:], start=version + 1):
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO migrations (version) VALUES (?)", (number,))


class DerivedDatabase:
    """A SQLite file of derived data, a cache whose callers can do without it. Thread-safe.

    Opened on first use (WAL, `synchronous=NORMAL`: a row lost in a crash is derived again).
    A file that is not a readable database is recreated empty; after any other error the
    database logs one warning and stays off for the life of the object.
    """

    def __init__(
        self, path: Path, migrations: Sequence[Sequence[str]], name: str, without: str
    ) -> None:
        """`name` and `without` word the warnings: "{name} {path} failed; {without}"."""
        self.path = path
        self._migrations = migrations
        self._name = name
        self._without = without
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._off = False

    def run(self, action: Callable[[sqlite3.Connection], _T]) -> _T | None:
        """`action(connection)`, or None when the database is off or the action fails."""
        with self._lock:
            if self._conn is None and not self._off:
                try:
                    self._conn = self._open()
                except (sqlite3.Error, OSError):
                    self._turn_off()
            if self._conn is None:
                return None
            try:
                return action(self._conn)
            except sqlite3.Error:
                self._turn_off()
                return None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _turn_off(self) -> None:
        logger.warning("%s %s failed; %s", self._name, self.path, self._without, exc_info=True)
        self._off = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:
            if exc.sqlite_errorcode not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
                raise
        logger.warning("%s %s unreadable; recreating it", self._name, self.path)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        return self._connect()

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            with immediate_transaction(conn):
                apply_migrations(conn, self._migrations)
        except BaseException:
            conn.close()
            raise
        return conn
