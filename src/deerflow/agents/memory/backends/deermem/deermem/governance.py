"""Rules that keep a bucket healthy on every write: no exact duplicates, bounded capacity."""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from deerflow.agents.memory.manager import DuplicateFactError, FactEvictedError

__all__ = [
    "capacity_evictions",
    "content_tokens",
    "is_stale",
    "jaccard",
    "normalized",
    "parse_time",
    "refuse_duplicate",
    "tokenize",
]


def normalized(content: str) -> str:
    """Content as compared for exact duplicates: case-folded, whitespace collapsed."""
    return " ".join(content.casefold().split())


def refuse_duplicate(
    stored: Iterable[tuple[str, str]], content: str, *, ignore_id: str | None = None
) -> None:
    """Raise `DuplicateFactError` if another fact already says exactly this.

    `stored` yields (fact id, normalised content) pairs, so callers can reuse what they cached.
    """
    wanted = normalized(content)
    for fact_id, existing in stored:
        if fact_id != ignore_id and existing == wanted:
            raise DuplicateFactError(
                f"an identical fact already exists: {fact_id}", existing_fact_id=fact_id
            )


def _keep_order(fact: Mapping[str, Any]) -> tuple[float, str]:
    # The least valuable fact sorts first: lowest confidence, then least recently updated.
    return (float(fact["confidence"]), str(fact.get("updatedAt", "")))


def capacity_evictions(
    facts: Mapping[str, Mapping[str, Any]], new: Mapping[str, Any], max_facts: int
) -> list[str]:
    """Ids to evict so that the bucket plus `new` holds at most `max_facts` (`confidence` policy).

    Raises:
        FactEvictedError: `new` itself ranks lowest and would be evicted at once.
    """
    overflow = len(facts) + 1 - max_facts
    if overflow <= 0:
        return []
    candidates = heapq.nsmallest(overflow, [*facts.values(), new], key=_keep_order)
    if any(candidate is new for candidate in candidates):
        raise FactEvictedError(
            f"the fact was not stored: the bucket is full (max_facts={max_facts}) and every "
            f"stored fact ranks above it (confidence {new['confidence']})"
        )
    return [str(candidate["id"]) for candidate in candidates]


_CJK: Final = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3\uf900-\ufaff"
_TOKEN: Final = re.compile(rf"(?P<cjk>[{_CJK}]+)|[^\W_{_CJK}]+")
_MAX_CHARS: Final = 4096  # bounds the work per fact and per query


def tokenize(text: str) -> list[str]:
    """Lower-cased words (letters and digits, split at `_` and punctuation) and CJK bigrams.

    A CJK run of one character is kept as is; longer runs become overlapping bigrams, which is
    how Chinese is matched without a segmenter ("使用pnpm" -> "使用", "pnpm").
    """
    tokens: list[str] = []
    for match in _TOKEN.finditer(text[:_MAX_CHARS].lower()):
        run = match.group()
        if match.group("cjk"):
            tokens.extend(run[i : i + 2] for i in range(max(len(run) - 1, 1)))
        else:
            tokens.append(run)
    return tokens


# Words that say nothing about the fact: "The user prefers X in chat" repeats "User prefers X".
STOPWORDS: Final = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "am",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "and",
        "or",
        "but",
        "as",
        "it",
        "its",
        "their",
        "his",
        "her",
        "they",
        "he",
        "she",
        "we",
        "our",
    ]
)


def content_tokens(text: str) -> frozenset[str]:
    """The words (and CJK bigrams) that carry a fact's meaning, for near-duplicate checks."""
    return frozenset(tokenize(text)) - STOPWORDS


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Token-set overlap in 0..1 (0 for two empty sets)."""
    return len(a & b) / len(a | b) if a or b else 0.0


def is_stale(fact: Mapping[str, Any], now: datetime, default_days: int) -> bool:
    """Neither updated nor confirmed within its valid age; a fact with no readable time is."""
    valid_days = fact.get("expected_valid_days")
    if isinstance(valid_days, bool) or not isinstance(valid_days, int) or valid_days <= 0:
        valid_days = default_days
    times = [parse_time(fact.get(key)) for key in ("updatedAt", "lastConfirmedAt", "createdAt")]
    known = [time for time in times if time is not None]
    return not known or now - max(known) > timedelta(days=valid_days)


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 time (naive means UTC), or None when it is missing or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
