"""The memory document and fact shapes that every backend returns (SPEC §5.2, §5.3).

`get_memory`, `reload_memory`, `export_memory`, `clear_memory`, `import_memory` and
`create_fact` return a `MemoryDocument`; `search` returns a list of `Fact` dicts. The helpers here
give every backend the same validation, so bad input is refused alike everywhere.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Final, NotRequired, TypedDict

__all__ = [
    "FACT_CATEGORIES",
    "HISTORY_SECTIONS",
    "USER_SECTIONS",
    "Fact",
    "MemoryDocument",
    "Section",
    "empty_document",
    "utc_now",
    "validate_category",
    "validate_confidence",
    "validate_content",
]

FACT_CATEGORIES: Final = (
    "preference",
    "knowledge",
    "context",
    "behavior",
    "goal",
    "correction",
    "identity",
    "constraint",
    "decision",
    "other",
)
USER_SECTIONS: Final = ("workContext", "personalContext", "topOfMind")
HISTORY_SECTIONS: Final = ("recentMonths", "earlierContext", "longTermBackground")
DOCUMENT_VERSION: Final = "2.0"


class Section(TypedDict):
    summary: str
    updatedAt: str


class Fact(TypedDict):
    id: str
    content: str
    category: str
    confidence: float
    createdAt: str
    updatedAt: str
    source: str
    sourceError: NotRequired[str]
    score: NotRequired[float]


class MemoryDocument(TypedDict):
    version: str
    revision: int
    lastUpdated: str
    user: dict[str, Section]
    history: dict[str, Section]
    facts: list[Fact]


def utc_now() -> str:
    """The current time as ISO-8601 with a `Z` suffix, to the second."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def empty_document(now: str | None = None) -> MemoryDocument:
    """A document with empty summaries, revision 0 and no facts."""
    stamp = now or utc_now()

    def sections(names: tuple[str, ...]) -> dict[str, Section]:
        return {name: {"summary": "", "updatedAt": stamp} for name in names}

    return {
        "version": DOCUMENT_VERSION,
        "revision": 0,
        "lastUpdated": stamp,
        "user": sections(USER_SECTIONS),
        "history": sections(HISTORY_SECTIONS),
        "facts": [],
    }


def validate_content(content: Any) -> str:
    """Return the stripped content, or raise `ValueError` if it is not non-empty text."""
    if not isinstance(content, str) or not content.strip():
        raise ValueError("content: must be non-empty text")
    return content.strip()


def validate_category(category: Any) -> str:
    """Return the category, or raise `ValueError` naming the allowed ones."""
    if category not in FACT_CATEGORIES:
        raise ValueError(f"category: {category!r} is not one of {', '.join(FACT_CATEGORIES)}")
    return str(category)


def validate_confidence(confidence: Any) -> float:
    """Return the confidence as a float in 0..1, or raise `ValueError`."""
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        raise ValueError(f"confidence: must be a number between 0 and 1, got {confidence!r}")
    value = float(confidence)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"confidence: must be between 0 and 1, got {confidence!r}")
    return value
