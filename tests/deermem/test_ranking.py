"""Relevance-aware ordering of facts for a query."""

from __future__ import annotations

import pytest

from deerflow.agents.memory.backends.deermem.deermem.governance import tokenize
from deerflow.agents.memory.backends.deermem.deermem.ranking import rank_for_query

Fact = tuple[str, float]


def rank(facts: list[Fact], query: str, **weights: float) -> list[str]:
    ranked = rank_for_query(
        facts, query, text_of=lambda f: f[0], confidence_of=lambda f: f[1], **weights
    )
    return [text for text, _ in ranked]


FACTS: list[Fact] = [
    ("User prefers dark mode in every editor", 0.95),
    ("User deploys with Docker on Fly.io", 0.80),
    ("User uses pnpm for JavaScript projects", 0.60),
    ("User lives in Berlin", 0.90),
]


def test_tokenize_words_and_cjk_bigrams() -> None:
    assert tokenize("Use PNPM_v9, not npm!") == ["use", "pnpm", "v9", "not", "npm"]
    assert tokenize("用户使用pnpm 中") == ["用户", "户使", "使用", "pnpm", "中"]


def test_relevance_weight_zero_is_confidence_order() -> None:
    assert rank(FACTS, "pnpm javascript", relevance_weight=0.0) == [
        FACTS[0][0],
        FACTS[3][0],
        FACTS[1][0],
        FACTS[2][0],
    ]


def test_relevant_fact_rises_despite_lower_confidence() -> None:
    ranked = rank(FACTS, "Which package manager for my JavaScript project? pnpm?")
    assert ranked[0] == "User uses pnpm for JavaScript projects"
    assert rank(FACTS, "where do I deploy with docker", relevance_weight=1.0)[0] == (
        "User deploys with Docker on Fly.io"
    )


def test_words_every_fact_shares_count_little() -> None:
    # Unweighted, "user" would give every fact half the relevance and dark mode (0.95) would win;
    # weighted by IDF, "user" is worth little and the pnpm fact wins.
    assert rank(FACTS, "user pnpm")[0] == "User uses pnpm for JavaScript projects"


def test_cjk_query_matches_by_bigrams() -> None:
    facts: list[Fact] = [("用户住在柏林", 0.9), ("用户喜欢使用 pnpm 管理依赖", 0.5)]
    assert rank(facts, "怎么管理依赖？")[0] == "用户喜欢使用 pnpm 管理依赖"


def test_empty_query_keeps_confidence_order_and_ties_keep_input_order() -> None:
    facts: list[Fact] = [("a", 0.5), ("b", 0.7), ("c", 0.5), ("d", float("nan"))]
    assert rank(facts, "  ") == ["b", "a", "c", "d"]


def test_diversity_spreads_near_duplicates() -> None:
    facts: list[Fact] = [
        ("User prefers pnpm for JavaScript monorepos", 0.9),
        ("User prefers pnpm for JavaScript monorepo work", 0.88),
        ("User codes JavaScript in Neovim", 0.7),
    ]
    query = "javascript tooling"
    assert rank(facts, query) == [facts[0][0], facts[1][0], facts[2][0]]
    assert rank(facts, query, diversity_weight=0.5) == [facts[0][0], facts[2][0], facts[1][0]]


@pytest.mark.parametrize("weights", [{"relevance_weight": 1.5}, {"diversity_weight": -0.1}])
def test_weights_outside_zero_to_one_are_refused(weights: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        rank(FACTS, "pnpm", **weights)
