"""What DeerMem's SQLite files (the retrieval index, the write queue) share."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

__all__ = ["apply_migrations", "immediate_transaction", "read_transaction"]


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
