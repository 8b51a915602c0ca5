"""Relevance-aware ordering of facts for a query, as pure functions.

Relevance is lexical: the query's tokens (words, and bigrams of CJK runs) weighted by IDF over
the facts being ranked, so words every fact shares ("user") count little. A fact's relevance is
`sqrt(matched / total)` of the squared IDF weights of the query's distinct tokens, in 0..1, and
its score is `relevance_weight * relevance + (1 - relevance_weight) * confidence`. With a
`diversity_weight` λ > 0 the order is greedy MMR: each next fact maximises
`score - λ * max Jaccard(tokens, tokens of the facts already picked)`. Ties keep input order.

Hybrid: given each fact's cosine similarity to the query, relevance becomes
`(1 - w) * lexical + w * semantic`, `w` = `semantic_weight`, the similarities scaled to 0..1 over
the facts ranked (`fusion.min_max`), as a hybrid search fuses its two rankings.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from deerflow.agents.memory.backends.deermem.deermem.fusion import min_max
from deerflow.agents.memory.backends.deermem.deermem.governance import jaccard, tokenize

__all__ = ["rank_for_query", "tokenize"]


T = TypeVar("T")


def _confidence(value: float) -> float:
    return min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0


def rank_for_query(
    facts: Sequence[T],
    query: str,
    *,
    text_of: Callable[[T], str],
    confidence_of: Callable[[T], float],
    relevance_weight: float = 0.5,
    diversity_weight: float = 0.0,
    similarity_of: Callable[[T], float] | None = None,
    semantic_weight: float = 0.5,
) -> list[T]:
    """Order `facts` by relevance to `query` blended with confidence, optionally diversified.

    Args:
        facts: the candidates, in the order ties should keep.
        query: the current user message (or any text); with no tokens, relevance is 0 for all.
        text_of: a fact's text.
        confidence_of: a fact's confidence; clamped to 0..1, NaN counts 0.
        relevance_weight: 0 ranks by confidence only, 1 by relevance only.
        diversity_weight: the MMR penalty λ for similarity to facts already picked; 0 = none.
        similarity_of: a fact's cosine similarity to `query`, for hybrid relevance; None keeps
            relevance lexical.
        semantic_weight: the semantic part of hybrid relevance.

    Raises:
        ValueError: a weight outside 0..1.
    """
    for name, weight in (
        ("relevance_weight", relevance_weight),
        ("diversity_weight", diversity_weight),
        ("semantic_weight", semantic_weight),
    ):
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"{name}: must be between 0 and 1, got {weight!r}")
    token_sets = [frozenset(tokenize(text_of(fact))) for fact in facts]
    document_frequency = Counter(token for tokens in token_sets for token in tokens)
    idf2 = {
        token: (math.log((len(facts) + 1) / (document_frequency[token] + 1)) + 1) ** 2
        for token in set(tokenize(query))
    }
    total = sum(idf2.values())

    def relevance(tokens: frozenset[str]) -> float:
        return math.sqrt(sum(w for t, w in idf2.items() if t in tokens) / total) if total else 0.0

    relevances = [relevance(tokens) for tokens in token_sets]
    if similarity_of is not None:
        semantic = min_max([similarity_of(fact) for fact in facts])
        relevances = [
            (1 - semantic_weight) * lexical + semantic_weight * meaning
            for lexical, meaning in zip(relevances, semantic, strict=True)
        ]
    scores = [
        relevance_weight * rel + (1 - relevance_weight) * _confidence(confidence_of(f))
        for f, rel in zip(facts, relevances, strict=True)
    ]
    order = sorted(range(len(facts)), key=lambda i: -scores[i])
    if diversity_weight > 0:
        order = _mmr(order, scores, token_sets, diversity_weight)
    return [facts[i] for i in order]


def _mmr(
    order: list[int], scores: list[float], token_sets: list[frozenset[str]], penalty: float
) -> list[int]:
    """Greedy maximal marginal relevance over `order` (best first, so ties keep that order)."""
    remaining = list(order)
    max_similarity = dict.fromkeys(order, 0.0)
    picked: list[int] = []
    while remaining:
        best = max(remaining, key=lambda i: scores[i] - penalty * max_similarity[i])
        remaining.remove(best)
        picked.append(best)
        for i in remaining:  # only the newest pick can raise an item's maximum similarity
            similarity = jaccard(token_sets[i], token_sets[best])
            max_similarity[i] = max(max_similarity[i], similarity)
    return picked
