"""Lexical ranking: BM25 over one scope (exact scores), and what its choices change for a user."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem.deermem.core.index import IndexedFact, RetrievalIndex
from deerflow.agents.memory.backends.deermem.deermem.core.lexical import (
    K1,
    B,
    ScopeRows,
    rank,
    recency,
)

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
NOW_S = NOW.timestamp()
DAY = 86400.0
DEFAULT = "__default__"


def rows(*facts: tuple[str, str, float, float, int]) -> ScopeRows:
    """Rows numbered 100, 101, ... from `(fact_id, category, confidence, age_days, ntokens)`."""
    return ScopeRows.of(
        [
            (100 + n, fact_id, category, confidence, NOW_S - age * DAY, length)
            for n, (fact_id, category, confidence, age, length) in enumerate(facts)
        ]
    )


def idf(total: int, matched: int) -> float:
    return math.log(1 + (total - matched + 0.5) / (matched + 0.5))


def norm(length: int, average: float) -> float:
    return (K1 + 1) / (1 + K1 * (1 - B + B * length / average))


def test_scores_follow_the_formula() -> None:
    scope = rows(("a", "x", 1.0, 0, 4), ("b", "x", 0.5, 90, 8), ("c", "x", 1.0, 0, 6))
    hits = rank(scope, [[100, 101], [101]], limit=5, now=NOW_S)
    average = 6.0
    expected_b = (idf(3, 2) + idf(3, 1)) * norm(8, average) * (0.7 + 0.3 * 0.5) * 0.85
    expected_a = idf(3, 2) * norm(4, average)
    assert [fact_id for fact_id, _ in hits] == ["b", "a"]  # "c" matched nothing: not a hit
    assert hits[0][1] == pytest.approx(expected_b)
    assert hits[1][1] == pytest.approx(expected_a)


def test_recency_halves_its_share_every_ninety_days() -> None:
    assert recency(NOW_S, NOW_S) == 1.0
    assert recency(NOW_S + DAY, NOW_S) == 1.0  # a time in the future counts as new
    assert recency(NOW_S - 90 * DAY, NOW_S) == pytest.approx(0.85)
    assert recency(0.0, NOW_S) == pytest.approx(0.7)


def test_equal_scores_are_ordered_by_fact_id_and_cut_at_the_limit() -> None:
    scope = rows(*((f"f{n}", "x", 1.0, 0, 5) for n in (3, 1, 2, 0)))
    hits = rank(scope, [[100, 101, 102, 103]], limit=3, now=NOW_S)
    assert [fact_id for fact_id, _ in hits] == ["f0", "f1", "f2"]


def test_category_filter_and_syntax_candidates() -> None:
    scope = rows(("a", "goal", 1.0, 0, 5), ("b", "context", 1.0, 0, 5), ("c", "goal", 1.0, 0, 5))
    assert [f for f, _ in rank(scope, [[100, 101]], category="goal", limit=5, now=NOW_S)] == ["a"]
    # A deliberate expression decides the candidates; one no scored term matched scores 0.
    hits = rank(scope, [[100]], candidates=[100, 102], limit=5, now=NOW_S)
    assert [fact_id for fact_id, _ in hits] == ["a", "c"]
    assert hits[1][1] == 0.0


def test_rowids_unknown_to_the_rows_are_left_out() -> None:
    scope = rows(("a", "x", 1.0, 0, 5))
    assert [f for f, _ in rank(scope, [[100, 999]], limit=5, now=NOW_S)] == ["a"]


def test_an_old_strong_match_beats_a_new_weak_one_without_scoring_every_candidate() -> None:
    """Recency only scales by 0.7..1, so skipping hopeless candidates changes nothing."""
    facts = [("strong", "x", 1.0, 3650, 5)] + [(f"w{n:03}", "x", 1.0, 0, 5) for n in range(200)]
    scope = rows(*facts)
    weak = list(range(101, 301))
    hits = rank(scope, [[100], weak, weak], limit=10, now=NOW_S)  # "strong" has the rare term
    assert hits[0][0] == "strong"
    assert [f for f, _ in hits[1:]] == [f"w{n:03}" for n in range(9)]


def test_an_empty_scope_ranks_nothing() -> None:
    assert rank(ScopeRows.of([]), [[]], limit=5, now=NOW_S) == []


# --- through the index ---------------------------------------------------------------------------


def fact(n: int, content: str, confidence: float = 0.8) -> IndexedFact:
    return IndexedFact(DEFAULT, f"fact_{n:08x}", content, "context", confidence, "2026-12-01")


@pytest.fixture
def index(tmp_path: Path) -> Iterator[RetrievalIndex]:
    opened = RetrievalIndex(tmp_path / "index.sqlite3")
    yield opened
    opened.close()


def ids(index: RetrievalIndex, query: str, limit: int = 5) -> list[str]:
    return [hit.fact_id for hit in index.search("u1", DEFAULT, query, limit=limit, now=NOW)]


def test_a_long_fact_matching_more_of_the_query_beats_a_short_one(index: RetrievalIndex) -> None:
    """BM25's usual length penalty (b = 0.75) put the short fact first; a user asking about
    Kyoto and tea wants the long fact that mentions both."""
    long = (
        "Spent two weeks in Kyoto last spring with her sister, visiting temples, walking the "
        "old streets every evening and drinking green tea in a small garden cafe"
    )
    filler = [fact(n, f"likes hiking number {n}") for n in range(10, 20)]
    index.apply("u1", 1, [fact(1, "drinks tea"), fact(2, long), *filler], [])
    assert ids(index, "tea in Kyoto")[:2] == ["fact_00000002", "fact_00000001"]


def test_a_cached_scope_sees_another_writers_change(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    reader, writer = RetrievalIndex(path), RetrievalIndex(path)
    try:
        writer.apply("u1", 1, [fact(1, "drinks tea", 0.9), fact(2, "drinks tea", 0.5)], [])
        assert ids(reader, "tea") == ["fact_00000001", "fact_00000002"]  # now cached
        writer.apply("u1", 2, [fact(2, "drinks tea", 1.0), fact(3, "green tea")], [])
        assert ids(reader, "tea") == ["fact_00000002", "fact_00000001", "fact_00000003"]
        writer.apply("u1", 4, [], [("__default__", "fact_00000002")])  # a gap: user dirty
        assert ids(reader, "tea") == ["fact_00000001", "fact_00000003"]
    finally:
        reader.close()
        writer.close()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Melanie's book?!", ["fact_00000001"]),
        ("「喝茶」。", ["fact_00000002"]),
        ("email: bob@example.com", ["fact_00000003"]),
    ],
)
def test_punctuation_and_cjk_queries(
    index: RetrievalIndex, query: str, expected: list[str]
) -> None:
    index.apply(
        "u1",
        1,
        [
            fact(1, "Melanie's favourite book is Becoming Nicole"),
            fact(2, "用户喜欢喝茶"),
            fact(3, "Her email is bob@example.com"),
        ],
        [],
    )
    assert ids(index, query) == expected


def test_a_search_leaves_no_transaction_open(index: RetrievalIndex) -> None:
    """Searches read in one transaction; a query FTS5 rejects (searched again as plain words)
    and an unknown scope must both end it, or the next write could not begin."""
    index.apply("u1", 1, [fact(1, "uses pnpm")], [])
    assert ids(index, "pnpm AND") == ["fact_00000001"]
    assert index.search("nobody", DEFAULT, "pnpm") == []
    index.apply("u1", 2, [fact(2, "uses pnpm daily")], [])
    assert ids(index, "pnpm") == ["fact_00000001", "fact_00000002"]
