"""One fact as a Markdown file: YAML front matter, then `# title` and the content.

The format, key by key, is in docs/data-format.md.
"""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.core.front_matter import (
    read_front_matter,
    write_front_matter,
)
from deerflow.agents.memory.manager import FACT_CATEGORIES, MemoryCorruptionError

__all__ = [
    "FRONT_MATTER_ORDER",
    "MAX_REVISION",
    "OPTIONAL_PUBLIC_FIELDS",
    "SCHEMA_VERSION",
    "check_record",
    "is_revision",
    "parse_fact",
    "public_fact",
    "read_fact_file",
    "render_fact",
]

SCHEMA_VERSION: Final = 1
MAX_REVISION: Final = 2**63 - 1  # the largest integer SQLite stores (the index keeps revisions)
TITLE_MAX_CHARS: Final = 160
# Optional fields of a fact, written to the file and returned in the public fact dict.
OPTIONAL_PUBLIC_FIELDS: Final = (
    "sourceError",
    "expected_valid_days",
    "lastConfirmedAt",
    "confirmationCount",
    "consolidatedFrom",
    "topics",
    "event_time",
)
# Written in this order; keys the schema does not know follow, sorted, and are kept on rewrite.
FRONT_MATTER_ORDER: Final = (
    "id",
    "category",
    "confidence",
    "status",
    "createdAt",
    "updatedAt",
    "revision",
    "source",
    "user_id",
    "agent_name",
    "schemaVersion",
    *OPTIONAL_PUBLIC_FIELDS,
)
_KEYS: Final = frozenset(FRONT_MATTER_ORDER)


def title_of(content: str) -> str:
    """The first line of the content, cut to 160 characters: the file's `# title`."""
    return content.strip().splitlines()[0].strip()[:TITLE_MAX_CHARS]


def render_fact(record: dict[str, Any]) -> bytes:
    """The file bytes for a stored fact record (front matter keys plus `content`).

    Deterministic: the same record always gives the same bytes, so an undo restores a file
    byte for byte.
    """
    meta: dict[str, Any] = {key: record[key] for key in FRONT_MATTER_ORDER if key in record}
    meta.update(
        (key, record[key]) for key in sorted(record) if key not in meta and key != "content"
    )
    content = record["content"]
    body = f"# {title_of(content)}\n\n{content}"
    yaml_text = write_front_matter(meta)
    if yaml_text is None:
        import frontmatter  # a record outside what write_front_matter covers (hand-added keys)

        text = frontmatter.dumps(
            frontmatter.Post(body, **meta), sort_keys=False, allow_unicode=True
        )
    else:  # python-frontmatter's template, stripped as it strips it
        text = f"---\n{yaml_text}\n---\n\n{body}".strip()
    return (text + "\n").encode("utf-8")


def parse_fact(data: bytes, path: str | Path, *, user_id: str, bucket: str) -> dict[str, Any]:
    """The stored record of a fact file. Kept by `record_cache` for new processes: a change of
    what this returns for the same bytes must change `record_cache.FORMAT`.

    Raises:
        MemoryCorruptionError: unreadable front matter, or an id, scope, category or confidence
            that disagrees with the path or the schema. The file is left as it is.
    """
    try:
        meta, body = read_front_matter(data.decode("utf-8"), _KEYS)
    except ValueError as exc:  # UnicodeDecodeError and FrontMatterError are ValueErrors
        raise MemoryCorruptionError(f"{path}: unreadable front matter: {exc}") from exc
    if not meta:  # not a fact file, or one cut short before its closing `---`
        raise MemoryCorruptionError(
            f"{path}: no front matter (a fact file begins with a block between '---' lines "
            "holding its id, scope, category and confidence)"
        )
    record: dict[str, Any] = {
        key: value if type(value) in _AS_IS else _plain(value) for key, value in meta.items()
    }
    fact_id = os.path.splitext(os.path.basename(path))[0]
    check_record(record, path, fact_id=fact_id, user_id=user_id, bucket=bucket)
    record["content"] = _content_of(body)
    if not record["content"]:
        raise MemoryCorruptionError(f"{path}: the fact has no content")
    return record


def read_fact_file(path: Path, *, shown: str | None = None) -> dict[str, Any]:
    """A fact file read on its own, outside any user's storage (an export being imported).

    Args:
        path: the file.
        shown: how errors name it (a path inside the export, not the server's temp folder);
            `path` by default.

    Raises:
        ValueError: the file is not a readable fact.
    """
    name = str(path) if shown is None else shown
    data = path.read_bytes()
    try:
        meta = read_front_matter(data.decode("utf-8"), _KEYS)[0]
    except ValueError as exc:
        raise ValueError(f"{name}: unreadable front matter: {exc}") from exc
    try:
        user_id, bucket = str(meta.get("user_id")), str(meta.get("agent_name"))
        return parse_fact(data, name, user_id=user_id, bucket=bucket)
    except MemoryCorruptionError as exc:
        raise ValueError(str(exc)) from None


def check_record(
    record: dict[str, Any], where: str | Path, *, fact_id: str, user_id: str, bucket: str
) -> None:
    """Check the front matter of a stored fact `fact_id` of (`user_id`, `bucket`) against the
    schema, making its confidence a float; `where` names it in errors (a file, a row).

    Raises:
        MemoryCorruptionError: an id, scope, category, confidence or revision that disagrees
            with where it is stored or with the schema.
    """

    def corrupt(problem: str) -> MemoryCorruptionError:
        return MemoryCorruptionError(f"{where}: {problem}")

    if record.get("id") != fact_id:
        raise corrupt(f"front matter id {record.get('id')!r} differs from the file name")
    if record.get("user_id") != user_id or record.get("agent_name") != bucket:
        raise corrupt(
            f"scope {record.get('user_id')!r}/{record.get('agent_name')!r} differs from the "
            f"directory's {user_id!r}/{bucket!r}"
        )
    if record.get("category") not in FACT_CATEGORIES:
        raise corrupt(f"unknown category {record.get('category')!r}")
    confidence = record.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        raise corrupt(f"confidence {confidence!r} is not a number")
    if not 0 <= confidence <= 1:
        raise corrupt(f"confidence {confidence!r} is outside 0..1")
    record["confidence"] = float(confidence)
    if not is_revision(record.get("revision")):
        raise corrupt(f"revision {record.get('revision')!r} is not a non-negative 64-bit integer")


def is_revision(value: Any) -> bool:
    """Whether `value` can be a stored revision: an integer (not a bool) that SQLite can hold,
    never negative."""
    return type(value) is int and 0 <= value <= MAX_REVISION


def _content_of(body: str) -> str:
    """The body without its `# title` line: what the user said the fact is. Split at `\n`
    only: the content may hold other line breaks (U+2028, ...) that must come back as they are."""
    lines = body.strip().split("\n")
    if lines and lines[0].startswith("# ") and len(lines) > 1:
        lines = lines[1:]
    elif lines and lines[0].startswith("# "):
        return lines[0][2:].strip()
    return "\n".join(lines).strip()


# Scalars `_plain` returns unchanged; checked inline, since most front-matter values are these.
_AS_IS: Final = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """YAML reads unquoted timestamps as datetimes; the document keeps ISO-8601 text."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def source_text(source: Any) -> str:
    """The public, string form of a source: the thread id of a conversation, else its type."""
    if isinstance(source, dict):
        if source.get("type") == "conversation" and source.get("threadId"):
            return str(source["threadId"])
        return str(source.get("type") or "unknown")
    return str(source or "unknown")


def public_fact(record: dict[str, Any]) -> dict[str, Any]:
    """The fact dict the contract returns."""
    fact = {
        "id": record["id"],
        "content": record["content"],
        "category": record["category"],
        "confidence": record["confidence"],
        "createdAt": record.get("createdAt", ""),
        "updatedAt": record.get("updatedAt", ""),
        "source": source_text(record.get("source")),
    }
    fact.update((key, record[key]) for key in OPTIONAL_PUBLIC_FIELDS if key in record)
    return fact
