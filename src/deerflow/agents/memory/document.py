"""The memory document and fact shapes that every backend returns (SPEC §5.2, §5.3).

`get_memory`, `reload_memory`, `export_memory`, `clear_memory`, `import_memory` and
`create_fact` return a `MemoryDocument`; `search` returns a list of `Fact` dicts. The helpers here
give every backend the same validation, so bad input is refused alike everywhere.
"""

from __future__ import annotations

import math
import re
import unicodedata
from datetime import UTC, datetime
from typing import Any, Final, NotRequired, TypedDict

from deerflow.agents.memory.errors import MemoryConflictError
from deerflow.agents.memory.identity import is_valid_unicode

__all__ = [
    "FACT_CATEGORIES",
    "HISTORY_SECTIONS",
    "USER_SECTIONS",
    "Fact",
    "MemoryDocument",
    "Section",
    "check_revision",
    "checked_text",
    "empty_document",
    "searchable_query",
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
# C0 and C1 control characters other than tab and line feed.
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_UNSEARCHABLE: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


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
    """Return the content as `checked_text` gives it.

    Raises:
        ValueError: `content: ...`, as `checked_text`.
    """
    try:
        return checked_text(content)
    except ValueError as exc:
        raise ValueError(f"content: {exc}") from None


def checked_text(value: Any) -> str:
    """Stored text (a fact's content or any text field beside it): stripped, line breaks as
    `\n`.

    Raises:
        ValueError: saying why: not text, nothing visible (only spaces, zero-width or control
            characters), a control character other than a line break or a tab (which could
            drive a terminal that shows it), or not valid Unicode.
    """
    if not isinstance(value, str):
        raise ValueError("must be non-empty text")
    text = value.replace("\r\n", "\n").replace("\r", "\n").strip()
    if control := _CONTROL.search(text):
        raise ValueError(f"holds the control character U+{ord(control[0]):04X}")
    if not any(unicodedata.category(char)[0] not in "CZ" for char in text):
        raise ValueError("must be non-empty text (it has nothing visible)")
    if not is_valid_unicode(text):
        raise ValueError("must be valid Unicode text (it holds a lone surrogate)")
    return text


def searchable_query(query: Any) -> str:
    """`query` without the characters no stored fact can hold (control characters, lone
    surrogates), which would otherwise reach the search engine.

    Raises:
        ValueError: it is not text.
    """
    if not isinstance(query, str):
        raise ValueError(f"query: must be text, got {type(query).__name__}")
    return _UNSEARCHABLE.sub(" ", query)


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
    return value + 0.0  # -0.0 becomes 0.0, which is how it reads back


def check_revision(current: int, expected_revision: Any) -> None:
    """Refuse a conditional write when the memory is no longer at the revision the caller read.

    Call it in the same atomic step as the write (under the lock that orders writes).

    Raises:
        ValueError: `expected_revision` is neither None nor a non-negative integer.
        MemoryConflictError: the memory is at `current`, not `expected_revision`.
    """
    if expected_revision is None:
        return
    if (
        isinstance(expected_revision, bool)
        or not isinstance(expected_revision, int)
        or expected_revision < 0
    ):
        raise ValueError(
            f"expected_revision: must be a non-negative integer, got {expected_revision!r}"
        )
    if current != expected_revision:
        raise MemoryConflictError(
            f"the memory is at revision {current}, not {expected_revision}: another writer "
            "changed it since it was read; reload and retry"
        )
