"""Writing a whole user another engine dumped into the PostgreSQL storage's tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deerflow.agents.memory.backends.deermem.deermem.core.commits import (
    check_history_entry,
    check_summaries,
)
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import is_revision
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    DEFAULT_AGENT,
    bucket_name,
    validate_fact_id,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.records import (
    checked_fact,
    json_text,
)
from deerflow.agents.memory.manager import MemoryConflictError, MemoryCorruptionError

if TYPE_CHECKING:
    from psycopg import Connection

    from deerflow.agents.memory.backends.deermem.deermem.engine import UserDump

__all__ = ["write_dump"]


def write_dump(conn: Connection[Any], schema: str, user_key: str, dump: UserDump) -> None:
    """Insert `dump` as the memory of `user_key`, inside the caller's transaction.

    Raises:
        ValueError: the dump is not a memory a DeerMem engine writes (named in the message).
        MemoryConflictError: the user already has a memory here.
    """
    facts = _checked(schema, user_key, dump)
    inserted = conn.execute(
        "INSERT INTO users (user_key, user_id, revision, last_updated, summaries)"
        " VALUES (%s, %s, %s, %s, %s::json) ON CONFLICT (user_key) DO NOTHING RETURNING 1",
        (user_key, dump.user_id, dump.revision, dump.last_updated, json_text(dump.summaries)),
    ).fetchone()
    if inserted is None:
        raise MemoryConflictError(
            f"user {dump.user_id!r} already has a memory in {schema}; nothing was merged"
        )
    with conn.cursor().copy("COPY facts (user_key, bucket, fact_id, record) FROM STDIN") as copy:
        for bucket, fact_id, text in facts:
            copy.write_row((user_key, bucket, fact_id, text))
    with conn.cursor().copy("COPY history (user_key, revision, entry) FROM STDIN") as copy:
        for entry in dump.history:
            copy.write_row((user_key, entry["revision"], json_text(entry)))


def _checked(schema: str, user_key: str, dump: UserDump) -> list[tuple[str, str, str]]:
    """The dump's facts as (bucket, fact id, JSON text), after checking all of the dump."""
    if not is_revision(dump.revision):
        raise ValueError(f"dump of {dump.user_id!r}: revision {dump.revision!r} is not valid")
    if not isinstance(dump.last_updated, str):
        raise ValueError(f"dump of {dump.user_id!r}: last_updated is not text")
    try:
        check_summaries(dump.summaries)
    except ValueError as exc:
        raise ValueError(f"dump of {dump.user_id!r}: summaries: {exc}") from None
    rows: dict[tuple[str, str], str] = {}
    for record in dump.facts:
        try:
            bucket, fact_id = _place(record)
            checked_fact(schema, user_key, dump.user_id, bucket, fact_id, dict(record))
            text = json_text(record)
        except (ValueError, MemoryCorruptionError) as exc:
            raise ValueError(f"dump of {dump.user_id!r}: a fact: {exc}") from None
        if (bucket, fact_id) in rows:
            raise ValueError(f"dump of {dump.user_id!r}: fact {fact_id} appears twice")
        rows[(bucket, fact_id)] = text
    last = 0
    for entry in dump.history:
        try:
            check_history_entry(entry)
        except ValueError as exc:
            raise ValueError(f"dump of {dump.user_id!r}: history: {exc}") from None
        revision = entry["revision"]
        if not (is_revision(revision) and last < revision <= dump.revision):
            raise ValueError(
                f"dump of {dump.user_id!r}: history entry {entry['change_id']!r} has revision "
                f"{revision!r}, not after {last} and at most {dump.revision}"
            )
        last = revision
    return [(bucket, fact_id, text) for (bucket, fact_id), text in rows.items()]


def _place(record: Any) -> tuple[str, str]:
    if not isinstance(record, dict):
        raise ValueError("not an object")
    bucket = record.get("agent_name")
    if not isinstance(bucket, str) or (bucket != DEFAULT_AGENT and bucket_name(bucket) != bucket):
        raise ValueError(f"agent_name {bucket!r} is not a bucket")
    return bucket, validate_fact_id(record.get("id"))  # type: ignore[arg-type]
