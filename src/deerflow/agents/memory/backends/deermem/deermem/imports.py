"""Turning an imported memory document into one change that replaces a bucket."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet, MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import FRONT_MATTER_ORDER
from deerflow.agents.memory.backends.deermem.deermem.core.paths import FACT_ID_PATTERN
from deerflow.agents.memory.backends.deermem.deermem.core.scrub import (
    refuse_fact_secrets,
    refuse_secrets,
)
from deerflow.agents.memory.backends.deermem.deermem.governance import (
    MAX_VALID_DAYS,
    normalized,
    parse_time,
)
from deerflow.agents.memory.manager import (
    checked_text,
    is_valid_unicode,
    parse_import_document,
    utc_now,
    validate_category,
    validate_confidence,
    validate_content,
)

__all__ = ["imported_changes"]

_SOURCE_TYPES = ("manual", "consolidation", "import", "conversation", "unknown")
# The keys of a fact dict an import reads or sets itself (the stored bookkeeping, and the score
# a search result carries); any other key is kept in the fact's front matter.
_KNOWN_KEYS: Final = frozenset({*FRONT_MATTER_ORDER, "content", "score"})
MAX_NESTING: Final = 16


def imported_changes(data: Any, snapshot: MemorySnapshot, *, max_facts: int) -> ChangeSet:
    """The change that makes the user's summaries and this bucket's facts equal to `data`.

    Sections missing from `data` become empty; facts not in `data` are removed. The document's
    shape is checked first (`parse_import_document`), so a mistyped one is refused rather than
    read as empty.

    Raises:
        ValueError: naming the first bad field (`facts[3].confidence: ...`); nothing is written.
    """
    document = parse_import_document(data)
    summaries = document.summaries()
    for part, sections in summaries.items():
        for section, summary in sections.items():
            refuse_secrets(summary, field=f"{part}.{section}.summary")
    facts = document.facts
    if len(facts) > max_facts:
        raise ValueError(f"facts: {len(facts)} facts exceed max_facts={max_facts}")
    now = utc_now()
    records: dict[str, dict[str, Any]] = {}
    seen: dict[str, int] = {}
    for number, raw in enumerate(facts):
        record = _record(raw, number, snapshot, now)
        content_key = normalized(record["content"])
        if content_key in seen:
            raise ValueError(f"facts[{number}]: same content as facts[{seen[content_key]}]")
        if record["id"] in records:
            raise ValueError(f"facts[{number}].id: {record['id']!r} appears twice")
        seen[content_key] = number
        records[record["id"]] = record
    return ChangeSet(
        actor="import",
        reason=f"import_memory ({len(records)} facts into {snapshot.bucket})",
        summaries=summaries,
        upserts=list(records.values()),
        deletes=[
            (snapshot.bucket, fact_id) for fact_id in snapshot.facts if fact_id not in records
        ],
        expected_revision=snapshot.revision,
    )


def _record(
    raw: Mapping[str, Any], number: int, snapshot: MemorySnapshot, now: str
) -> dict[str, Any]:
    where = f"facts[{number}]"
    try:
        content = validate_content(raw.get("content"))
        category = validate_category(raw.get("category", "context"))
        confidence = validate_confidence(raw.get("confidence", 0.5))
        created, updated = (_given_time(raw, key) for key in ("createdAt", "updatedAt"))
        optional = _optional_fields(raw)
    except ValueError as exc:
        raise ValueError(f"{where}.{exc}") from None
    fact_id = raw.get("id")
    if not (isinstance(fact_id, str) and FACT_ID_PATTERN.fullmatch(fact_id)):
        existing = next(
            (
                f["id"]
                for f in snapshot.facts.values()
                if normalized(f["content"]) == normalized(content)
            ),
            None,
        )
        fact_id = existing or f"fact_{uuid.uuid4().hex}"
    record: dict[str, Any] = {
        "id": fact_id,
        "category": category,
        "confidence": confidence,
        "createdAt": created or now,
        "updatedAt": updated or now,
        "source": _source(raw.get("source")),
        "agent_name": snapshot.bucket,
        "content": content,
    }
    record.update(optional)
    record.update(_unknown_fields(raw, where))
    refuse_fact_secrets(record, where=f"{where}.")
    return record


def _unknown_fields(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The keys the fact file format does not know, kept as they are; their
    text is scanned for secrets with the rest of the fact (`refuse_fact_secrets`).

    Raises:
        ValueError: a key that is not text, or a value JSON could not hold.
    """
    unknown = {key: value for key, value in raw.items() if key not in _KNOWN_KEYS}
    for key, value in unknown.items():
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"{where}: a key must be non-empty text, got {key!r}")
        if not _plain_json(value):
            raise ValueError(
                f"{where}.{key}: must be text, a number, true, false, null, or lists and objects "
                f"of those nested at most {MAX_NESTING} deep"
            )
    return unknown


def _plain_json(value: Any, depth: int = 0) -> bool:
    """Whether `value` is what a JSON document holds (and so what YAML front matter can),
    nested at most `MAX_NESTING` deep."""
    if depth > MAX_NESTING:
        return False
    if isinstance(value, str):
        return is_valid_unicode(value)  # a lone surrogate cannot be written
    if value is None or isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain_json(item, depth + 1) for item in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _plain_json(v, depth + 1) for k, v in value.items())
    return False


def _optional_fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The optional fields of a fact that `raw` has (None counts as absent), checked.

    Raises:
        ValueError: `"{field}: ..."` for the first field of the wrong kind.
    """
    return {
        key: _checked(key, check, raw[key])
        for key, check in _OPTIONAL_CHECKS.items()
        if raw.get(key) is not None
    }


def _checked(key: str, check: Callable[[Any], Any], value: Any) -> Any:
    """`check(value)`, its `ValueError` naming `key` and the value."""
    try:
        return check(value)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}, got {value!r}") from None


def _fact_ids(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(
        isinstance(item, str) and FACT_ID_PATTERN.fullmatch(item) for item in value
    ):
        raise ValueError("must be a list of fact ids")
    return list(value)


def _time(value: Any) -> str:
    if parse_time(value) is None:
        raise ValueError("must be an ISO-8601 time")
    return str(value)


def _positive_int(limit: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise ValueError(f"must be a whole number from 1 to {limit}")
        return value

    return check


def _texts(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise ValueError("must be a list of non-empty texts")
    return [checked_text(item) for item in value]


_OPTIONAL_CHECKS: Final[dict[str, Callable[[Any], Any]]] = {
    "sourceError": checked_text,
    "expected_valid_days": _positive_int(MAX_VALID_DAYS),
    "lastConfirmedAt": _time,
    "confirmationCount": _positive_int(2**31 - 1),
    "consolidatedFrom": _fact_ids,
    "topics": _texts,
    "event_time": checked_text,
}


def _given_time(raw: Mapping[str, Any], key: str) -> str | None:
    """`raw[key]` checked as an ISO-8601 time; None when it is absent or empty."""
    value = raw.get(key)
    return None if value is None or value == "" else _checked(key, _time, value)


def _source(value: Any) -> dict[str, str | None]:
    """Keep the provenance an export carried: a thread id, or the kind of write (as text, from
    a JSON export, or as the stored mapping, from a Markdown one)."""
    if isinstance(value, Mapping) and value.get("type") in _SOURCE_TYPES:
        thread = value.get("threadId")
        return {"type": value["type"], "threadId": thread if isinstance(thread, str) else None}
    if isinstance(value, str) and value and value not in _SOURCE_TYPES:
        return {"type": "conversation", "threadId": value}
    kind = value if value in _SOURCE_TYPES and value != "unknown" else "import"
    return {"type": kind, "threadId": None}
