"""Fact files' parsed records kept on disk, so that a new process reads a bucket without
parsing every file again.

A process's first read of a bucket parses each fact file (about 50 us a file: 25-30 ms of a
cold start's first `get_context` at 500 facts). Each parsed record is kept in a small SQLite
file beside the retrieval index, with the file's signature as it was before it was read:
inode, size, modification and change times. A later process takes a kept record only while
`os.stat` of the file still gives that signature, and parses every other file, so an edit made
by hand (which changes the change time, whatever it does to the rest) is always read.

A file changed within `RACY_SECONDS` of being kept is not kept: a second change within the same
tick of the filesystem's clock could leave its signature as it was.

Derived data, like the index: an unreadable file is recreated empty, and a failed read or write
only means files are parsed. `FileMemoryStorage.reload` never uses it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

from deerflow.agents.memory.backends.deermem.deermem.core.sqlite import (
    DerivedDatabase,
    immediate_transaction,
)

__all__ = ["KeptRecord", "RecordCache", "signature"]

RACY_SECONDS: Final = 2.0
# Part of each row: rows of another format are ignored. Change it with what `parse_fact` returns.
FORMAT: Final = 2  # 2: content split at \n only (other line breaks kept)
MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        "CREATE TABLE buckets (user_key TEXT NOT NULL, bucket TEXT NOT NULL,"
        " format INTEGER NOT NULL, records BLOB NOT NULL, PRIMARY KEY (user_key, bucket))"
        " WITHOUT ROWID",
    ),
)

Signature = tuple[int, int, int, int]
_SCALARS: Final = frozenset({str, int, bool, type(None)})


class KeptRecord(NamedTuple):
    signature: Signature
    record: dict[str, Any]


def signature(status: os.stat_result) -> Signature:
    return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


class RecordCache:
    """Kept records of each bucket, by the fact file's path below the bucket's `facts/` folder.
    Thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = DerivedDatabase(path, MIGRATIONS, "fact record cache", "parsing fact files")

    def get(self, user_key: str, bucket: str) -> dict[str, KeptRecord]:
        """The bucket's kept records ({} when none are kept)."""
        row = self._db.run(
            lambda conn: conn.execute(
                "SELECT records FROM buckets WHERE user_key = ? AND bucket = ? AND format = ?",
                (user_key, bucket, FORMAT),
            ).fetchone()
        )
        if row is None:
            return {}
        try:
            return {
                name: KeptRecord(tuple(kept_signature), record)
                for name, (kept_signature, record) in json.loads(row[0]).items()
                if type(record) is dict
            }
        except (ValueError, TypeError, AttributeError):
            return {}  # not what `put` writes: the files are parsed, and the row written anew

    def put(self, user_key: str, bucket: str, records: Mapping[str, KeptRecord]) -> None:
        """Keep the bucket's records (replacing what was kept), but for files changed in the
        last `RACY_SECONDS` and records JSON would not give back as they are."""
        recent = time.time_ns() - int(RACY_SECONDS * 1e9)
        data = json.dumps(
            {
                name: kept
                for name, kept in records.items()
                if max(kept.signature[2], kept.signature[3]) < recent and _plain(kept.record)
            },
            ensure_ascii=False,
            check_circular=False,  # records are trees
            allow_nan=False,
        ).encode("utf-8")

        def replace(conn: sqlite3.Connection) -> None:
            with immediate_transaction(conn):
                conn.execute(
                    "INSERT OR REPLACE INTO buckets (user_key, bucket, format, records)"
                    " VALUES (?, ?, ?, ?)",
                    (user_key, bucket, FORMAT, data),
                )

        self._db.run(replace)

    def close(self) -> None:
        self._db.close()


def _plain(value: Any) -> bool:
    """Whether JSON gives `value` back equal and of the same types (YAML written by hand may
    hold sets, bytes, tuples or keys that are not strings). Loops, not `all()`: half the time."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is float:
        return bool(value - value == 0)  # not NaN or an infinity
    if kind is dict:
        for key, item in value.items():  # noqa: SIM110 (the loop is the point)
            if type(key) is not str or not _plain(item):
                return False
        return True
    if kind is list:
        for item in value:  # noqa: SIM110
            if not _plain(item):
                return False
        return True
    return False
