"""The memory document and fact shapes that every backend returns (docs/data-format.md).

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
from deerflow.agents.memory.secret_detector import refuse_secrets

__all__ = [
    "FACT_CATEGORIES",
    "HISTORY_SECTIONS",
    "MAX_TEXT_CHARS",
    "SUMMARY_SECTIONS",
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
    "validate_summary",
    "validate_summary_section",
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
SUMMARY_SECTIONS: Final = {"user": USER_SECTIONS, "history": HISTORY_SECTIONS}
DOCUMENT_VERSION: Final = "2.0"
# The longest text one fact or one summary section may hold, for every writer: a fact is one
# statement about the user, and everything stored is injected into prompts and kept in history.
MAX_TEXT_CHARS: Final = 10_000
# C0 and C1 control characters other than tab and line feed.
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Bidirectional embedding, override and isolate controls: they make text display in another
# order than it is read (and than a model reads it). Marks (U+200E, U+200F, U+061C) are kept.
_BIDI_CONTROL: Final = re.compile("[\u202a-\u202e\u2066-\u2069]")
_BYTE_ORDER_MARK: Final = "\ufeff"
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
    """Stored text (a fact's content, a summary, or any text field beside a fact): stripped,
    line breaks as `\n`, byte order marks (U+FEFF, an encoding artifact) removed.

    Raises:
        ValueError: saying why: not text, longer than `MAX_TEXT_CHARS`, nothing visible (only
            spaces, zero-width or control characters), a control character other than a line
            break or a tab (which could drive a terminal that shows it), a bidirectional
            override or isolate (which shows the text in another order than it is read), or
            not valid Unicode.
    """
    if not isinstance(value, str):
        raise ValueError("must be non-empty text")
    text = value.replace(_BYTE_ORDER_MARK, "").replace("\r\n", "\n").replace("\r", "\n")
    text = text.strip()
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"should have at most {MAX_TEXT_CHARS} characters (got {len(text)})")
    if control := _CONTROL.search(text):
        raise ValueError(f"holds the control character U+{ord(control[0]):04X}")
    if bidi := _BIDI_CONTROL.search(text):
        raise ValueError(f"holds the bidirectional control character U+{ord(bidi[0]):04X}")
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


def validate_summary_section(part: Any, section: Any) -> tuple[str, str]:
    """Return `(part, section)` when they name a summary section, e.g. `user`, `workContext`.

    Raises:
        ValueError: naming the parts, or the part's sections.
    """
    if part not in SUMMARY_SECTIONS:
        raise ValueError(f"part: {part!r} is not one of {', '.join(SUMMARY_SECTIONS)}")
    if section not in SUMMARY_SECTIONS[part]:
        sections = ", ".join(SUMMARY_SECTIONS[part])
        raise ValueError(f"section: {section!r} is not a section of {part}: {sections}")
    return str(part), str(section)


def validate_summary(part: Any, section: Any, text: Any) -> tuple[str, str, str]:
    """Return `(part, section, text)` of a summary edit, checked: the section exists, a blank
    text is "", any other follows the content's rules (it is injected just the same) and holds
    nothing that looks like a credential.

    Raises:
        ValueError: naming the section, or the parts and sections (`validate_summary_section`).
    """
    part, section = validate_summary_section(part, section)
    where = f"{part}.{section}"
    if not isinstance(text, str):
        raise ValueError(f"{where}: the summary must be text")
    if not text.strip():
        return part, section, ""
    try:
        text = checked_text(text)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    refuse_secrets(text, field=where)
    return part, section, text


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
