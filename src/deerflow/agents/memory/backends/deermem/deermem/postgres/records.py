"""Rows of the PostgreSQL storage read back as DeerMem's documents, records and audit entries.

Rows are never trusted: a row edited by hand (a record without `content`, a revision that is
not an integer, an audit entry that is not an object, another user's id) is reported as
`MemoryCorruptionError` naming the schema, table, user and fact, and left as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from deerflow.agents.memory.backends.deermem.deermem.core.commits import (
    check_history_entry,
    check_summaries,
)
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import (
    check_record,
    is_revision,
)
from deerflow.agents.memory.backends.deermem.deermem.core.paths import safe_user_id
from deerflow.agents.memory.manager import MemoryCorruptionError

__all__ = [
    "Document",
    "checked_document",
    "checked_entry",
    "checked_fact",
    "checked_owner",
    "checked_revision",
    "fact_name",
    "json_text",
]


@dataclass(frozen=True, slots=True)
class Document:
    """A user's row: summaries (`{user: {...}, history: {...}}`) and revision, and the
    buckets that hold facts. Shared by snapshots, so never changed."""

    user_id: str
    revision: int
    last_updated: str
    summaries: dict[str, Any]
    buckets: tuple[str, ...]


def json_text(value: Any) -> str:
    """`value` as the JSON text a `json` column keeps verbatim.

    Raises:
        ValueError: a value JSON cannot hold (NaN, an infinity, a date, a set, ...).
    """
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except TypeError as exc:
        raise ValueError(f"not storable as JSON: {exc}") from None


def fact_name(schema: str, user_key: str, bucket: str, fact_id: str) -> str:
    """How errors name a stored fact: `schema.facts/{user}/{bucket}/{fact id}.md`."""
    return f"{schema}.facts/{user_key}/{bucket}/{fact_id}.md"


def checked_revision(where: str, value: Any) -> int:
    if not is_revision(value):
        raise MemoryCorruptionError(
            f"{where}: revision {value!r} is not a non-negative 64-bit integer"
        )
    return int(value)


def checked_document(
    schema: str, user_key: str, row: tuple[Any, ...], buckets: tuple[str, ...]
) -> Document:
    """The `users` row (user_id, revision, last_updated, summaries) of `user_key`."""
    where = f"{schema}.users (user {user_key})"
    user_id, revision, last_updated, summaries = row
    checked_owner(schema, user_key, user_id)
    if not isinstance(last_updated, str):
        raise MemoryCorruptionError(f"{where}: last_updated {last_updated!r} is not text")
    try:
        check_summaries(summaries if isinstance(summaries, dict) else {})
    except ValueError as exc:
        raise MemoryCorruptionError(f"{where}: summaries: {exc}") from None
    return Document(
        user_id, checked_revision(where, revision), last_updated, summaries, tuple(buckets)
    )


def checked_owner(schema: str, user_key: str, user_id: Any) -> str:
    """`user_id`, checked to be the raw id whose key is `user_key` (the row's key)."""
    try:
        owner = isinstance(user_id, str) and safe_user_id(user_id) == user_key
    except ValueError:
        owner = False
    if not owner:
        raise MemoryCorruptionError(
            f"{schema}.users (user {user_key}): user_id {user_id!r} is not the user of this row"
        )
    return str(user_id)


def checked_fact(
    schema: str, user_key: str, raw_user: str, bucket: str, fact_id: str, record: Any
) -> dict[str, Any]:
    """The record of a `facts` row, checked as a fact file of that place would be."""
    where = fact_name(schema, user_key, bucket, fact_id)
    if not isinstance(record, dict):
        raise MemoryCorruptionError(f"{where}: the record is not a JSON object")
    check_record(record, where, fact_id=fact_id, user_id=raw_user, bucket=bucket)
    content = record.get("content")
    if not isinstance(content, str) or not content.strip():
        raise MemoryCorruptionError(f"{where}: the fact has no content")
    return record


def checked_entry(schema: str, user_key: str, revision: Any, entry: Any) -> dict[str, Any]:
    """The audit entry of a `history` row, checked to be what a commit writes."""
    where = f"{schema}.history (user {user_key}, revision {revision})"
    try:
        checked = check_history_entry(entry)
    except ValueError as exc:
        raise MemoryCorruptionError(f"{where}: {exc}") from None
    if checked["revision"] != revision:
        raise MemoryCorruptionError(f"{where}: the entry says revision {checked['revision']!r}")
    return checked
