"""Access heat of facts in PostgreSQL (`engine.UsageStore`, the `hybrid-v1` eviction input).

The twin of the files engine's sidecars (`usage.FactUsage`): one row per (user, bucket, fact)
with the fact's heat, count and last access, at most `usage.MAX_ENTRIES` per bucket (the
coldest go). Unlike the sidecar, an access is counted by one `INSERT … ON CONFLICT DO UPDATE`
that decays the stored heat to the access time and adds 1 inside the database, so replicas
counting the same fact at once never lose an increment.

Usage data is not memory: recording it never fails a search (a failing statement is logged),
while reading it for an eviction decision fails loudly with the write that asked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Final

import psycopg

from deerflow.agents.memory.backends.deermem.deermem.postgres.schema import migrate_pool
from deerflow.agents.memory.backends.deermem.deermem.usage import MAX_ENTRIES, UsageEntry

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

__all__ = ["MIGRATIONS", "PostgresUsage"]

logger = logging.getLogger(__name__)

MIGRATIONS: Final = (
    (
        "CREATE TABLE fact_usage (user_id text NOT NULL, bucket text NOT NULL,"
        " fact_id text NOT NULL, heat double precision NOT NULL CHECK (heat >= 0),"
        " count integer NOT NULL CHECK (count >= 0), last_accessed timestamptz NOT NULL,"
        " PRIMARY KEY (user_id, bucket, fact_id))",
    ),
)

# `usage.decayed_heat` in SQL: heat * 2^(-days since the last access / half-life).
_DECAYED: Final = (
    "{table}.heat * power(2.0, -greatest(extract(epoch FROM {now} - {table}.last_accessed), 0)"
    " / 86400.0 / %(half_life)s)"
)
_RECORD: Final = (
    "INSERT INTO fact_usage AS u (user_id, bucket, fact_id, heat, count, last_accessed)"
    " SELECT %(user)s, %(bucket)s, hit, 1, 1, %(now)s FROM unnest(%(ids)s::text[]) AS hit"
    " ON CONFLICT (user_id, bucket, fact_id) DO UPDATE SET"
    f" heat = {_DECAYED.format(table='u', now='excluded.last_accessed')} + 1,"
    " count = u.count + 1, last_accessed = greatest(u.last_accessed, excluded.last_accessed)"
    " RETURNING xmax = 0"  # true for a row inserted, not updated
)
# The bucket's entries beyond MAX_ENTRIES: never one just hit, then the coldest at now.
_TRIM: Final = (
    "DELETE FROM fact_usage WHERE user_id = %(user)s AND bucket = %(bucket)s AND fact_id IN"
    " (SELECT fact_id FROM fact_usage AS u WHERE user_id = %(user)s AND bucket = %(bucket)s"
    " AND fact_id <> ALL(%(ids)s::text[])"
    f" ORDER BY {_DECAYED.format(table='u', now='%(now)s')} DESC, fact_id"
    " OFFSET %(keep)s)"
)


class PostgresUsage:
    """The `fact_usage` table of the pool's schema. Thread-safe (one pool connection per call)."""

    def __init__(self, pool: ConnectionPool) -> None:
        """Create or upgrade the table.

        Raises:
            psycopg.Error: the database refused the migration.
            MemoryCorruptionError: a newer DeerFlow Memory migrated the table.
        """
        self._pool = pool
        migrate_pool(pool, "usage", MIGRATIONS)

    def load(self, user_id: str, bucket: str) -> dict[str, UsageEntry]:
        """The bucket's entries.

        Raises:
            psycopg.Error: the database failed.
        """
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT fact_id, heat, count, last_accessed FROM fact_usage"
                " WHERE user_id = %s AND bucket = %s",
                (user_id, bucket),
            ).fetchall()
        return {str(fact_id): UsageEntry(heat, count, last) for fact_id, heat, count, last in rows}

    def record(
        self,
        user_id: str,
        bucket: str,
        fact_ids: Iterable[str],
        now: datetime,
        half_life_days: float,
    ) -> None:
        """Count one access of each of `fact_ids`, atomically; a failure is logged only."""
        # Sorted: concurrent transactions lock the rows in one order, so they never deadlock.
        ids = sorted(set(fact_ids))
        if not ids:
            return
        values = {
            "user": user_id,
            "bucket": bucket,
            "ids": ids,
            "now": now,
            "half_life": half_life_days,
            "keep": max(0, MAX_ENTRIES - len(ids)),
        }
        try:
            with self._pool.connection() as conn, conn.cursor() as cursor:
                cursor.execute(_RECORD, values)
                if any(inserted for (inserted,) in cursor.fetchall()):
                    cursor.execute(_TRIM, values)
        except psycopg.Error:
            logger.warning("could not record fact usage of %s/%s", user_id, bucket, exc_info=True)
