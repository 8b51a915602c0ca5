"""mem0 memory records in the contract's shapes: facts, documents, and injection text.

mem0 has no categories or confidences of its own in the contract's sense; the backend keeps them
in each memory's metadata (`category`, `confidence`, `source`). A memory mem0 extracted itself,
or one written by another mem0 client, has none: it reads as category `context` with
`UNRATED_CONFIDENCE`.
"""

from __future__ import annotations

import html
import math
from typing import Any, Final, TypeGuard

from deerflow.agents.memory.backends.mem0.transport import Mem0Record, Scope
from deerflow.agents.memory.manager import FACT_CATEGORIES, empty_document

__all__ = [
    "CONTEXT_HEADER",
    "UNRATED_CONFIDENCE",
    "belongs_to",
    "document",
    "facts",
    "newest_first",
    "normalized",
    "render_context",
    "to_fact",
]

UNRATED_CONFIDENCE: Final = 0.5
CONTEXT_HEADER: Final = "What you know about the user (from mem0):"


def to_fact(record: Mem0Record) -> dict[str, Any] | None:
    """The contract's fact for a mem0 record; None for a record without id or text."""
    memory_id, content = record.get("id"), record.get("memory")
    if not memory_id or not isinstance(content, str) or not content.strip():
        return None
    metadata = record.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    category = metadata.get("category")
    confidence = metadata.get("confidence")
    created = str(record.get("created_at") or "")
    fact: dict[str, Any] = {
        "id": str(memory_id),
        "content": content,
        "category": category if category in FACT_CATEGORIES else "context",
        "confidence": float(confidence) if _is_confidence(confidence) else UNRATED_CONFIDENCE,
        "createdAt": created,
        "updatedAt": str(record.get("updated_at") or created),
        "source": str(metadata.get("source") or "mem0"),
    }
    score = record.get("score")
    if isinstance(score, int | float) and not isinstance(score, bool) and math.isfinite(score):
        fact["score"] = float(score)
    return fact


def _is_confidence(value: Any) -> TypeGuard[float]:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1
    )


def facts(records: list[Mem0Record]) -> list[dict[str, Any]]:
    """The facts of `records`, skipping records that are not memories."""
    return [fact for fact in map(to_fact, records) if fact is not None]


def newest_first(records: list[Mem0Record]) -> list[Mem0Record]:
    """`records` by creation time, newest first (mem0's ISO timestamps sort as text)."""
    return sorted(records, key=lambda record: str(record.get("created_at") or ""), reverse=True)


def document(records: list[Mem0Record]) -> dict[str, Any]:
    """A memory document with no summaries: mem0 keeps facts only."""
    return {**empty_document(), "facts": facts(newest_first(records))}


def belongs_to(record: Mem0Record, scope: Scope) -> bool:
    """Whether a record fetched by id is in `scope`, so no id reaches another user's memory."""
    return record.get("user_id") == scope.user_id and record.get("agent_id") == scope.agent_id


def normalized(text: Any) -> str:
    """Text compared for duplicates: case and spacing ignored."""
    return " ".join(str(text).lower().split())


def render_context(records: list[Mem0Record], max_chars: int) -> str:
    """One line per memory under a header, in the given order, within `max_chars`.

    The first line that does not fit ends the text, so the best-ranked memories are the ones
    kept. `<`, `>` and `&` are escaped: a memory cannot close the host's `<memory>` block.
    """
    text = ""
    for fact in facts(records):
        line = f"- {html.escape(fact['content'], quote=False)}"
        candidate = f"{text}\n{line}" if text else f"{CONTEXT_HEADER}\n{line}"
        if len(candidate) > max_chars:
            break
        text = candidate
    return text
