"""What DeerMem's SQLite files (the retrieval index, the write queue) share."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["immediate_transaction"]


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
