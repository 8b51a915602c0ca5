"""Token counts of context lines in PostgreSQL, shared by every replica (`engine.TokenStore`).

The twin of `core/token_cache.py`: one row per line, keyed by the same digest (`line_key`),
holding the line's cl100k counts alone and followed by one and by two newlines. A count never
changes, so replicas that count the same line at once both insert it and the second insert is
skipped (`ON CONFLICT DO NOTHING`), never an error.

Derived data, like the files engine's cache: a statement that fails (the database restarting, a
lost connection) is logged and the line is counted by the encoding instead; the next call tries
the database again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

import psycopg

from deerflow.agents.memory.backends.deermem.deermem.core.token_cache import (
    LineCounts,
    line_key,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.schema import migrate_pool

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["MIGRATIONS", "PostgresTokenStore"]

logger = logging.getLogger(__name__)

MIGRATIONS: Final = (
    (
        "CREATE TABLE token_counts (digest bytea PRIMARY KEY, alone integer NOT NULL,"
        " newline integer NOT NULL, blank integer NOT NULL)",
    ),
)


class PostgresTokenStore:
    """The `token_counts` table of the pool's schema. Thread-safe (one pool connection per
    call)."""

    def __init__(self, pool: ConnectionPool) -> None:
        """Create or upgrade the table.

        Raises:
            psycopg.Error: the database refused the migration.
            MemoryCorruptionError: a newer DeerFlow Memory migrated the table.
        """
        self._pool = pool
        migrate_pool(pool, "tokens", MIGRATIONS)

    def get(self, line: str) -> LineCounts | None:
        """The stored counts of `line`, or None when unknown (or the database failed)."""
        try:
            with self._pool.connection() as conn:
                row = conn.execute(
                    "SELECT alone, newline, blank FROM token_counts WHERE digest = %s",
                    (line_key(line),),
                ).fetchone()
        except psycopg.Error:
            logger.warning("token counts: reading failed; counting with the encoding instead")
            return None
        return None if row is None else (int(row[0]), int(row[1]), int(row[2]))

    def put(self, counts: Mapping[str, LineCounts]) -> None:
        """Store counts made by the real encoding (lines already stored are left as they are)."""
        rows = [(line_key(line), *values) for line, values in counts.items()]
        if not rows:
            return
        try:
            with self._pool.connection() as conn, conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO token_counts (digest, alone, newline, blank)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT (digest) DO NOTHING",
                    rows,
                )
        except psycopg.Error:
            logger.warning(
                "token counts: storing %d lines failed; they are counted again later", len(rows)
            )

    def close(self) -> None:
        """Nothing to release: the pool belongs to the engine."""
