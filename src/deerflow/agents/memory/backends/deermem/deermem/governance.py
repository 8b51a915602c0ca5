"""Rules that keep a bucket healthy on every write: no exact duplicates, bounded capacity."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from deerflow.agents.memory.manager import DuplicateFactError, FactEvictedError

__all__ = ["capacity_evictions", "normalized", "refuse_duplicate"]


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
