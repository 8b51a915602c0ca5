"""Versioned schema migrations of the PostgreSQL engine, applied once under an advisory lock.

Each part of the engine (the documents and facts, the search index, the queue, ...) owns its
tables and its list of migrations, recorded by part in `schema_versions`, so that the parts
evolve independently. Replicas starting together take turns on one advisory lock: the first
applies what is missing, the others find it done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from deerflow.agents.memory.manager import MemoryCorruptionError

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["Migrations", "migrate", "migrate_pool"]

Migrations = Sequence[Sequence[str]]
"""`migrations[i]` holds the statements that take a part from version i to i + 1."""

# pg_advisory_xact_lock key of schema changes: "deermem" read as a number, stable everywhere.
_LOCK_KEY: Final = int.from_bytes(b"deermem", "big")


def migrate(
    conn: Connection[tuple[object, ...]], schema: str, part: str, migrations: Migrations
) -> int:
    """Bring `part`'s tables in `schema` to the newest version; return that version.

    Raises:
        MemoryCorruptionError: the database holds a newer version of `part` than this code
            knows (a newer DeerFlow Memory migrated it): refused rather than misread.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".schema_versions'
            " (part text PRIMARY KEY, version integer NOT NULL)"
        )
        row = conn.execute(
            f'SELECT version FROM "{schema}".schema_versions WHERE part = %s', (part,)
        ).fetchone()
        version = 0 if row is None else int(str(row[0]))
        if version > len(migrations):
            raise MemoryCorruptionError(
                f"schema {schema}: {part} is at version {version}, newer than this version of "
                f"DeerFlow Memory knows ({len(migrations)}); upgrade it"
            )
        conn.execute(f'SET LOCAL search_path = "{schema}", public')
        for statements in migrations[version:]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(
            f'INSERT INTO "{schema}".schema_versions (part, version) VALUES (%s, %s)'
            " ON CONFLICT (part) DO UPDATE SET version = excluded.version",
            (part, len(migrations)),
        )
    return len(migrations)


def migrate_pool(pool: ConnectionPool, part: str, migrations: Migrations) -> int:
    """`migrate` `part` in the schema that the pool's connections search first (`open_pool`
    sets it), for the parts that are handed only the pool."""
    with pool.connection() as conn:
        row = conn.execute("SHOW search_path").fetchone()
        schema = str(row[0] if row else "").split(",")[0].strip().strip('"')
        return migrate(conn, schema, part, migrations)
