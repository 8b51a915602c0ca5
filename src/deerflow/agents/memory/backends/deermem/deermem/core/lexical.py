"""BM25 over one scope, from the rowids each query term matches there, as pure functions.

`index.py` runs one scoped FTS5 MATCH per query term and hands the rowid lists here, with the
scope's rows (`ScopeRows`, which it keeps in memory per indexed revision); nothing here touches
a database, so the ranking can be tested exactly. The formula (the index module's docstring)::

    idf(t)  = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))       N, df: facts of the scope
    bm25(d) = sum(idf(t) for t matching d) * (k1 + 1) / (1 + k1 * (1 - b + b * len(d) / avglen))
    score   = bm25(d) * (0.7 + 0.3 * confidence) * (0.7 + 0.3 * 0.5 ** (age_days / 90))

Term frequency is taken as 1: FTS5 exposes it only through `bm25()`, whose cost grows with every
other scope's data. On LoCoMo's fact-like observations that costs nothing (R@10 0.580 with it,
0.579 without, in a throwaway reproduction); on the longer dialogue turns it cost about a point,
and `B` below won more than that back (docs/decisions.md, "Lexical ranking").
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["HALF_LIFE_DAYS", "K1", "B", "ScopeRows", "confidence_factor", "rank", "recency"]

K1: Final = 1.2
B: Final = 0.3
"""Length normalisation, lighter than BM25's usual 0.75: with term frequency fixed at 1 a long
fact is not inflated by repeats, so the full penalty only buried long facts (chosen on LoCoMo
conversations 0-4: b from 0.1 to 0.4 measured within 0.006 of each other, 0.75 two points
lower)."""
HALF_LIFE_DAYS: Final = 90.0
_HALF_LIFE_S: Final = HALF_LIFE_DAYS * 86400.0
_OLDEST: Final = 0.7
"""The recency factor of a very old fact: no score falls below 0.7 of its value at age 0."""


def confidence_factor(confidence: float) -> float:
    """How confidence scales a score: 0.7 (confidence 0) to 1 (confidence 1)."""
    return 0.7 + 0.3 * confidence


def recency(updated: float, now: float) -> float:
    """How age scales a score: 1 when new, halfway to 0.7 after `HALF_LIFE_DAYS` (Unix seconds)."""
    return _OLDEST + (1 - _OLDEST) * math.pow(0.5, max(0.0, now - updated) / _HALF_LIFE_S)


@dataclass(frozen=True, slots=True)
class ScopeRows:
    """What ranking needs of every fact of one scope, as read once per indexed revision (a search
    that misses the cache pays for this object).

    Attributes:
        positions: rowid → position in the tuples below.
        fact_ids, categories, updated: per fact (updated: Unix seconds).
        weights: per fact, what its text relevance is multiplied by before recency: BM25's
            length normalisation of its length times its confidence factor.
    """

    positions: dict[int, int]
    fact_ids: tuple[str, ...]
    categories: tuple[str, ...]
    updated: tuple[float, ...]
    weights: tuple[float, ...]

    @classmethod
    def of(cls, rows: Sequence[tuple[int, str, str, float, float, int]]) -> ScopeRows:
        """From `(rowid, fact_id, category, confidence, updated_ts, ntokens)` rows."""
        columns = list(zip(*rows, strict=True)) or [()] * 6
        rowids, fact_ids, categories, confidences, updated, ntokens = columns
        average = sum(ntokens) / len(ntokens) if ntokens else 1.0
        # BM25's length normalisation is (k1 + 1) / (fixed + per_token * length).
        fixed, per_token = 1 + K1 * (1 - B), K1 * B / average
        return cls(
            positions=dict(zip(rowids, range(len(rowids)), strict=True)),
            fact_ids=fact_ids,
            categories=categories,
            updated=updated,
            weights=tuple(
                (K1 + 1) / (fixed + per_token * length) * confidence_factor(confidence)
                for length, confidence in zip(ntokens, confidences, strict=True)
            ),
        )


def rank(
    rows: ScopeRows,
    postings: Sequence[Collection[int]],
    *,
    candidates: Iterable[int] | None = None,
    category: str | None = None,
    limit: int,
    now: float,
) -> list[tuple[str, float]]:
    """The best `limit` facts as `(fact_id, score)`, best first, equal scores by fact id.

    Args:
        rows: the scope's rows.
        postings: for each scored query term, the rowids it matches in the scope.
        candidates: the rowids that may be ranked (those a deliberate FTS5 expression matched;
            one matched by no scored term scores 0); None means every rowid of `postings`.
        category: rank only facts of this category.
        limit: the most results.
        now: Unix seconds that recency is measured from.
    """
    total = len(rows.fact_ids)
    relevance: dict[int, float] = {}
    for rowids in postings:
        matched = len(rowids)
        idf = math.log(1 + (total - matched + 0.5) / (matched + 0.5))
        for rowid in rowids:
            relevance[rowid] = relevance.get(rowid, 0.0) + idf
    positions, weights, categories = rows.positions, rows.weights, rows.categories
    scored_rowids = (
        relevance.items()
        if candidates is None
        else ((rowid, relevance.get(rowid, 0.0)) for rowid in candidates)
    )
    # Each candidate's score before recency, which can only scale it by _OLDEST..1. A rowid
    # missing from `rows` was written after they were read, by another process under the same
    # revision; it is ranked once its user's revision moves on.
    bounds = [
        (text * weights[position], position)
        for rowid, text in scored_rowids
        if (position := positions.get(rowid)) is not None
        and (category is None or categories[position] == category)
    ]
    if len(bounds) > limit:
        # The limit-th best score is at least _OLDEST times the limit-th best bound: facts below
        # that cannot reach the top, and most searches skip recency for most candidates.
        floor = _OLDEST * heapq.nlargest(limit, bounds)[-1][0]
        bounds = [bound for bound in bounds if bound[0] >= floor]
    scored = [
        (-bound * recency(rows.updated[position], now), rows.fact_ids[position])
        for bound, position in bounds
    ]
    return [(fact_id, -negative) for negative, fact_id in heapq.nsmallest(limit, scored)]
