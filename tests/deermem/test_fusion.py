"""Fusing the lexical and the semantic ranking, and hybrid relevance in injection ranking."""

from __future__ import annotations

import pytest

from deerflow.agents.memory.backends.deermem.deermem.fusion import fuse, min_max
from deerflow.agents.memory.backends.deermem.deermem.ranking import rank_for_query


def test_min_max_scales_to_the_unit_interval() -> None:
    assert min_max([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max([0.3]) == [1.0]
    assert min_max([0.5, 0.5]) == [1.0, 1.0]
    assert min_max([]) == []


def test_a_fact_strong_in_both_rankings_beats_one_strong_in_one() -> None:
    lexical = [("a", 9.0), ("b", 8.0), ("c", 1.0)]
    semantic = [("b", 0.9), ("d", 0.8), ("a", 0.2)]
    fused = fuse(lexical, semantic, semantic_weight=0.5)
    assert [item for item, _ in fused] == ["b", "a", "d", "c"]
    scores = dict(fused)
    assert scores["b"] == pytest.approx(0.5 * 7 / 8 + 0.5 * 1.0)
    assert scores["d"] == pytest.approx(0.5 * 6 / 7)  # only the semantic ranking knows it
    assert scores["c"] == pytest.approx(0.0)  # the weakest lexical hit, unknown to the other


def test_the_weight_moves_the_order_between_the_rankings() -> None:
    lexical = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    semantic = [("c", 0.9), ("b", 0.5), ("a", 0.1)]
    assert [i for i, _ in fuse(lexical, semantic, semantic_weight=0.0)] == ["a", "b", "c"]
    assert [i for i, _ in fuse(lexical, semantic, semantic_weight=1.0)] == ["c", "b", "a"]


def test_ties_are_broken_by_id_and_empty_rankings_fuse() -> None:
    assert fuse([("z", 1.0), ("y", 1.0)], [], semantic_weight=0.5) == [("y", 0.5), ("z", 0.5)]
    assert fuse([], [], semantic_weight=0.5) == []


@pytest.mark.parametrize("weight", [-0.1, 1.5])
def test_a_weight_outside_the_unit_interval_is_refused(weight: float) -> None:
    with pytest.raises(ValueError, match="semantic_weight"):
        fuse([("a", 1.0)], [], semantic_weight=weight)
    with pytest.raises(ValueError, match="semantic_weight"):
        rank_for_query(["a"], "a", text_of=str, confidence_of=lambda _: 0.5, semantic_weight=weight)


def test_injection_ranking_blends_meaning_into_relevance() -> None:
    facts = ["Uses pnpm", "Lives in Berlin", "Drinks tea"]
    similarity = {"Uses pnpm": 0.2, "Lives in Berlin": 0.9, "Drinks tea": 0.1}

    def ranked(semantic_weight: float) -> list[str]:
        return rank_for_query(
            facts,
            "which city",
            text_of=str,
            confidence_of=lambda _: 0.5,
            relevance_weight=1.0,
            similarity_of=similarity.__getitem__,
            semantic_weight=semantic_weight,
        )

    assert ranked(1.0)[0] == "Lives in Berlin"  # no word in common: meaning alone decides
    assert ranked(0.0) == facts  # lexical only: nothing matches, input order kept


def test_limit_keeps_the_best_in_the_same_order() -> None:
    lexical = [(f"l{n}", float(100 - n)) for n in range(50)]
    semantic = [(f"l{n}", float(n)) for n in range(0, 50, 3)] + [("s", 60.0)]
    full = fuse(lexical, semantic, semantic_weight=0.5)
    assert fuse(lexical, semantic, semantic_weight=0.5, limit=7) == full[:7]
