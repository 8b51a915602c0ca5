"""Thread context (`retrieval_thread_context`): hits lend score to their thread neighbours."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.core.index import (
    IndexedFact,
    RetrievalIndex,
)
from deerflow.agents.memory.backends.deermem.deermem.threads import ThreadOrder, spread

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
DEFAULT = "__default__"
# A question and its answer in consecutive turns: the answer shares no word with a search for it.
CONVERSATION = (
    "Which city are you moving to next spring?",
    "Lisbon, we signed the lease last week.",
    "Congratulations, that sounds lovely.",
    "Thanks! I still need to find a dentist there.",
)
QUERY = "where is she moving"


def order(*threads: list[str], categories: dict[str, str] | None = None) -> ThreadOrder:
    rows = [
        (fact_id, f"t{n}", (categories or {}).get(fact_id, "context"))
        for n, facts in enumerate(threads)
        for fact_id in facts
    ]
    return ThreadOrder.of(rows)


# -- the pure ranking ----------------------------------------------------------------------------


def test_neighbours_are_read_in_the_order_written_per_thread() -> None:
    threads = order(["a", "b", "c", "d"], ["x", "y"])
    assert dict(threads.next) == {"a": "b", "b": "c", "c": "d", "x": "y"}
    assert dict(threads.after_next) == {"a": "c", "b": "d"}
    assert dict(threads.previous) == {"b": "a", "c": "b", "d": "c", "y": "x"}


def test_a_hit_lends_to_the_fact_after_it_the_one_after_that_and_the_one_before() -> None:
    threads = order(["q", "a", "later", "unrelated"], ["other"])
    ranked = spread([("a", 4.0), ("other", 2.0)], threads, share=0.5, limit=10)
    scores = dict(ranked)
    assert scores["a"] == pytest.approx(1.0)  # scaled: the best lends from 1
    assert scores["later"] == pytest.approx(0.5)  # after it: the share
    assert scores["unrelated"] == pytest.approx(0.25)  # after next: half of it
    assert scores["q"] == pytest.approx(0.125)  # before it: a quarter
    assert scores["other"] == pytest.approx(0.5)  # a thread of its own: nothing lent
    assert [fact_id for fact_id, _ in ranked] == ["a", "later", "other", "unrelated", "q"]


def test_a_neighbour_of_two_hits_adds_both_and_can_overtake_them() -> None:
    threads = order(["q1", "answer", "q2"])
    ranked = spread([("q1", 1.0), ("q2", 0.1)], threads, share=1.0, limit=3)
    assert ranked[0][0] == "answer"
    assert ranked[0][1] == pytest.approx(1.0 + 0.25 * 0.1)


def test_the_category_filter_also_holds_for_neighbours() -> None:
    threads = order(["q", "a"], categories={"q": "goal", "a": "preference"})
    assert spread([("q", 1.0)], threads, share=0.5, category="goal", limit=5) == [("q", 1.0)]


def test_facts_without_a_thread_and_share_zero_change_nothing() -> None:
    ranking = [("x", 3.0), ("y", 1.5)]
    assert spread(ranking, order(), share=0.5, limit=5) == [("x", 1.0), ("y", 0.5)]
    assert [f for f, _ in spread(ranking, order(["y", "x"]), share=0.0, limit=5)] == ["x", "y"]


def test_a_ranking_without_a_positive_score_is_kept_and_the_limit_applies() -> None:
    assert spread([("x", 0.0), ("y", 0.0)], order(["x", "z"]), share=1.0, limit=1) == [("x", 0.0)]
    assert spread([], order(["x"]), share=1.0, limit=1) == []


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_share_outside_0_to_1_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        spread([("x", 1.0)], order(), share=share, limit=1)


# -- the index -----------------------------------------------------------------------------------


def turns(thread: str = "t1", *, first: int = 1, agent: str = DEFAULT) -> list[IndexedFact]:
    return [
        IndexedFact(
            agent,
            f"fact_{first + i:08x}",
            text,
            "context",
            0.8,
            "2026-12-01T10:00:00Z",
            thread=thread,
            created_at=f"2026-11-30T10:00:{i:02d}Z",
        )
        for i, text in enumerate(CONVERSATION)
    ]


def ids(index: RetrievalIndex, query: str, share: float, **kwargs: Any) -> list[str]:
    hits = index.search("u1", DEFAULT, query, now=NOW, thread_context=share, **kwargs)
    return [hit.fact_id for hit in hits]


@pytest.fixture
def index(tmp_path: Path) -> RetrievalIndex:
    return RetrievalIndex(tmp_path / "index.sqlite3")


def test_the_answer_turn_is_found_only_with_thread_context(index: RetrievalIndex) -> None:
    index.apply("u1", 1, turns(), [])
    assert ids(index, QUERY, 0.0) == ["fact_00000001"]
    assert ids(index, QUERY, 0.5)[:2] == ["fact_00000001", "fact_00000002"]


def test_the_order_written_decides_not_the_order_indexed(index: RetrievalIndex) -> None:
    index.apply("u1", 1, list(reversed(turns())), [])
    assert ids(index, QUERY, 0.5)[:2] == ["fact_00000001", "fact_00000002"]


def test_another_thread_and_another_scope_lend_nothing(index: RetrievalIndex) -> None:
    question, answer, *_ = turns()
    moved = replace(answer, thread="t2")
    index.apply("u1", 1, [question, moved], [])
    index.apply("u2", 1, turns(first=10), [])
    assert ids(index, QUERY, 0.5) == ["fact_00000001"]


def test_thread_context_follows_changes_to_the_scope(index: RetrievalIndex) -> None:
    facts = turns()
    index.apply("u1", 1, facts[:1], [])
    assert ids(index, QUERY, 0.5) == ["fact_00000001"]  # the scope's threads are now cached
    index.apply("u1", 2, facts[1:], [])
    assert ids(index, QUERY, 0.5)[:2] == ["fact_00000001", "fact_00000002"]
    index.apply("u1", 3, [], [(DEFAULT, "fact_00000002")])
    assert "fact_00000002" not in ids(index, QUERY, 0.5)


def test_a_thread_context_outside_0_to_1_is_refused(index: RetrievalIndex) -> None:
    with pytest.raises(ValueError, match="thread_context"):
        ids(index, QUERY, 1.5)


def test_an_index_from_before_threads_gains_the_columns_and_rebuilds_users(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    first = RetrievalIndex(path)
    first.apply("u1", 1, turns(), [])
    first.close()
    with sqlite3.connect(path) as conn:  # back to schema version 2
        conn.execute("ALTER TABLE facts DROP COLUMN thread")
        conn.execute("ALTER TABLE facts DROP COLUMN created_ts")
        conn.execute("DELETE FROM migrations WHERE version = 3")
    reopened = RetrievalIndex(path)
    assert reopened.indexed_revision("u1") is None  # dirty: the next search rebuilds it
    reopened.replace_user("u1", 1, turns())
    assert ids(reopened, QUERY, 0.5)[:2] == ["fact_00000001", "fact_00000002"]
    reopened.close()


# -- through the manager -------------------------------------------------------------------------


def make(root: Path, **settings: Any) -> DeerMemMemoryManager:
    return DeerMemMemoryManager.from_config({"storage_path": str(root), **settings})


def remember_conversation(manager: DeerMemMemoryManager) -> None:
    """The turns as facts of one thread, as extraction records them, plus a manual fact."""
    facts: list[dict[str, Any]] = [
        {"content": text, "source": "thread-7", "createdAt": f"2026-11-30T10:00:{i:02d}Z"}
        for i, text in enumerate(CONVERSATION)
    ]
    facts.append({"content": "Is moving house slowly, box by box"})
    manager.import_memory({"facts": facts}, user_id="u")


@pytest.mark.parametrize(("share", "found"), [(0.0, False), (0.5, True)])
def test_the_setting_decides_whether_search_finds_the_answer(
    tmp_path: Path, share: float, found: bool
) -> None:
    # Lexical, where "Lisbon, ..." shares no word with the query (the model would find it).
    manager = make(tmp_path, retrieval_embeddings=False, retrieval_thread_context=share)
    try:
        remember_conversation(manager)
        results = manager.search(QUERY, 3, user_id="u")
        assert (CONVERSATION[1] in [r["content"] for r in results]) is found
    finally:
        manager.close()


@pytest.mark.parametrize("value", [-0.1, 1.01, "much"])
def test_a_bad_setting_is_refused_with_the_key(tmp_path: Path, value: Any) -> None:
    with pytest.raises(ValueError, match=r"memory\.backend_config\.retrieval_thread_context"):
        make(tmp_path, retrieval_thread_context=value)
