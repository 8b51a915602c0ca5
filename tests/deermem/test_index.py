"""The retrieval index: query building (exact output), scoping, ranking, revisions, durability."""

from __future__ import annotations

import sqlite3
import sys
import threading
import types
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem.deermem.core.fts_query import (
    MAX_TERMS,
    FtsQuery,
    bigrams,
    build_query,
    segment,
)
from deerflow.agents.memory.backends.deermem.deermem.core.index import (
    IndexCorruptionError,
    IndexedFact,
    RetrievalIndex,
)
from deerflow.agents.memory.backends.deermem.deermem.engine import SearchIndex
from deerflow.agents.memory.manager import MemoryCorruptionError
from tests.conftest import OpenIndex

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
DEFAULT = "__default__"


def fact(
    n: int,
    content: str,
    *,
    agent: str = DEFAULT,
    category: str = "preference",
    confidence: float = 0.8,
    updated_at: str = "2026-12-01T10:00:00Z",
) -> IndexedFact:
    return IndexedFact(agent, f"fact_{n:08x}", content, category, confidence, updated_at)


def ids(
    index: SearchIndex,
    query: str,
    *,
    user: str = "u1",
    agent: str = DEFAULT,
    category: str | None = None,
    limit: int = 5,
) -> list[str]:
    hits = index.search(user, agent, query, category=category, limit=limit, now=NOW)
    return [hit.fact_id for hit in hits]


@pytest.fixture
def index(open_index: OpenIndex) -> SearchIndex:
    """Each engine's index (files and PostgreSQL): what follows holds for both."""
    opened: SearchIndex = open_index()
    return opened


# --- query building: exact output ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("don't", FtsQuery('"don\'t"', ('"don\'t"',), syntax=False)),
        ("e-mail", FtsQuery('"e-mail"', ('"e-mail"',), syntax=False)),
        ("what's up?", FtsQuery('"what\'s" OR "up?"', ('"what\'s"', '"up?"'), syntax=False)),
        ("Tea tea TEA", FtsQuery('"Tea"', ('"Tea"',), syntax=False)),
        ('say "hi', FtsQuery('"say" OR """hi"', ('"say"', '"""hi"'), syntax=False)),
        ("-- ? !", None),
        ("   ", None),
        ("", None),
        (
            "用户喜欢喝茶",
            FtsQuery(
                '"用户" OR "户喜" OR "喜欢" OR "欢喝" OR "喝茶"',
                ('"用户"', '"户喜"', '"喜欢"', '"欢喝"', '"喝茶"'),
                syntax=False,
            ),
        ),
        ('"quoted phrase"', FtsQuery('"quoted phrase"', ('"quoted phrase"',), syntax=True)),
        ("pnpm*", FtsQuery("pnpm*", ('"pnpm"*',), syntax=True)),
        ("tea AND NOT coffee", FtsQuery("tea AND NOT coffee", ('"tea"', '"coffee"'), syntax=True)),
        ("NEAR(green tea, 2)", FtsQuery("NEAR(green tea, 2)", ('"green"', '"tea"'), True)),
        ('"喝茶" OR x', FtsQuery('" 喝茶 " OR x', ('" 喝茶 "', '"x"'), syntax=True)),
        (
            "tea and coffee",
            FtsQuery('"tea" OR "and" OR "coffee"', ('"tea"', '"and"', '"coffee"'), False),
        ),
    ],
)
def test_build_query(text: str, expected: FtsQuery | None) -> None:
    assert build_query(text, bigrams) == expected


def test_build_query_plain_ignores_syntax() -> None:
    """The retry after FTS5 rejected an expression: every word is quoted, stars included."""
    assert build_query("pnpm* AND", bigrams, plain=True) == FtsQuery(
        '"pnpm*" OR "AND"', ('"pnpm*"', '"AND"'), syntax=False
    )


def test_build_query_caps_terms() -> None:
    built = build_query(" ".join(f"w{i}" for i in range(MAX_TERMS + 10)), bigrams)
    assert built is not None
    assert len(built.terms) == MAX_TERMS


def test_segment_rewrites_cjk_runs_only() -> None:
    assert segment("我爱喝茶, ok 茶", bigrams) == " 我爱 爱喝 喝茶 , ok  茶 "


# --- searching ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("don't", [1]),
        ("e-mail", [1]),
        ('"quoted phrase"', [2]),
        ("pnpm*", [3]),
        ("pnp*", [3]),
        ("用户喜欢喝茶", [4]),
        ("喝茶", [4]),
        ("tea NOT coffee", [5]),
        ("NEAR(green tea)", [6]),
        ("pnpm AND", [3]),  # FTS5 rejects it; searched again as plain words
        ('"unbalanced', []),
        ("   ", []),
        ("", []),
    ],
)
def test_query_forms_find_the_right_fact(
    index: SearchIndex, query: str, expected: list[int]
) -> None:
    index.apply(
        "u1",
        1,
        [
            fact(1, "I don't read e-mail on weekends"),
            fact(2, "a quoted phrase here; phrase quoted the other way"),
            fact(3, "Uses pnpm for node projects"),
            fact(4, "用户喜欢喝茶"),
            fact(5, "drinks tea in the afternoon"),
            fact(6, "green jasmine tea with coffee"),
        ],
        [],
    )
    assert ids(index, query) == [f"fact_{n:08x}" for n in expected]


def test_scopes_never_cross(index: SearchIndex) -> None:
    """The same fact id in two users and two agents: each search sees only its own scope."""
    index.apply(
        "u1", 1, [fact(1, "tea in u1 default"), fact(1, "tea in u1 coder", agent="coder")], []
    )
    index.apply("u2", 1, [fact(1, "tea in u2 default"), fact(2, "more tea in u2")], [])
    found = {
        (user, agent): [hit.fact_id for hit in index.search(user, agent, "tea u1 u2 coder")]
        for user in ("u1", "u2")
        for agent in (DEFAULT, "coder")
    }
    assert found == {
        ("u1", DEFAULT): ["fact_00000001"],
        ("u1", "coder"): ["fact_00000001"],
        ("u2", DEFAULT): ["fact_00000001", "fact_00000002"],
        ("u2", "coder"): [],
    }
    index.apply("u1", 2, [], [("coder", "fact_00000001")])
    assert ids(index, "tea", agent="coder") == []
    assert ids(index, "tea") == ["fact_00000001"]
    assert ids(index, "default", user="u2") == ["fact_00000001"]
    assert ids(index, "tea", user="nobody") == []


def test_category_filter_applies_before_the_limit(index: SearchIndex) -> None:
    facts = [fact(n, "drinks tea", confidence=1.0) for n in range(10)]
    facts.append(fact(99, "drinks tea", category="goal", confidence=0.1, updated_at="2020-01-01"))
    index.apply("u1", 1, facts, [])
    assert ids(index, "tea", limit=1) != ["fact_00000063"]
    assert ids(index, "tea", category="goal", limit=1) == ["fact_00000063"]
    assert ids(index, "tea", category="identity") == []


def test_confidence_and_recency_order_equal_matches(index: SearchIndex) -> None:
    index.apply(
        "u1",
        1,
        [
            fact(1, "drinks tea daily", confidence=0.5),
            fact(2, "drinks tea daily", confidence=0.9),
            fact(3, "drinks tea daily", confidence=0.9, updated_at="2026-05-16T10:00:00Z"),
        ],
        [],
    )
    assert ids(index, "tea") == ["fact_00000002", "fact_00000001", "fact_00000003"]


def test_a_much_better_text_match_wins_anyway(index: SearchIndex) -> None:
    weak = [fact(n, "drinks tea daily", confidence=1.0) for n in range(1, 6)]
    strong = fact(9, "drinks green tea daily", confidence=0.1, updated_at="2024-01-01T00:00:00Z")
    index.apply("u1", 1, [*weak, strong], [])
    assert ids(index, "green tea")[0] == "fact_00000009"


def test_an_unreadable_time_ranks_as_old(index: SearchIndex) -> None:
    index.apply(
        "u1", 1, [fact(1, "tea", updated_at=""), fact(2, "tea", updated_at="2026-12-01")], []
    )
    assert ids(index, "tea") == ["fact_00000002", "fact_00000001"]


def test_scores_are_positive_and_best_first(index: SearchIndex) -> None:
    index.apply("u1", 1, [fact(1, "tea"), fact(2, "tea and cake"), fact(3, "cake")], [])
    hits = index.search("u1", DEFAULT, "tea cake", now=NOW)
    assert hits[0].fact_id == "fact_00000002"
    assert all(hit.score > 0 for hit in hits)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


def test_limit_must_be_positive(index: SearchIndex) -> None:
    with pytest.raises(ValueError, match="limit"):
        index.search("u1", DEFAULT, "tea", limit=0)


# --- writing -----------------------------------------------------------------------------------


def test_apply_updates_and_deletes(index: SearchIndex) -> None:
    index.apply("u1", 1, [fact(1, "likes tea"), fact(2, "likes coffee")], [])
    index.apply("u1", 2, [fact(1, "likes matcha")], [(DEFAULT, "fact_00000002")])
    assert ids(index, "tea coffee") == []
    assert ids(index, "matcha") == ["fact_00000001"]
    index.apply("u1", 3, [], [(DEFAULT, "fact_00000002"), ("coder", "fact_00000001")])
    assert ids(index, "matcha") == ["fact_00000001"]


def test_replace_user_swaps_every_agent_of_one_user(index: SearchIndex) -> None:
    index.apply("u1", 1, [fact(1, "old tea"), fact(2, "old tea", agent="coder")], [])
    index.apply("u2", 1, [fact(1, "old tea")], [])
    index.replace_user("u1", 7, [fact(3, "new tea", agent="coder")])
    assert ids(index, "tea") == []
    assert ids(index, "tea", agent="coder") == ["fact_00000003"]
    assert ids(index, "old", user="u2") == ["fact_00000001"]
    assert index.indexed_revision("u1") == 7


def test_indexed_revision_follows_sequential_commits_only(index: SearchIndex) -> None:
    assert index.indexed_revision("u1") is None
    index.apply("u1", 1, [fact(1, "tea")], [])
    index.apply("u1", 2, [], [])
    assert index.indexed_revision("u1") == 2
    index.apply("u1", 4, [fact(2, "tea")], [])  # revision 3 was missed
    assert index.indexed_revision("u1") is None
    index.apply("u1", 5, [], [])  # still unknown: only a rebuild makes it known again
    assert index.indexed_revision("u1") is None
    assert ids(index, "tea") == ["fact_00000001", "fact_00000002"]  # the rows were still applied
    index.replace_user("u1", 5, [fact(1, "tea")])
    assert index.indexed_revision("u1") == 5
    index.mark_dirty("u1")
    assert index.indexed_revision("u1") is None


def test_a_new_user_is_known_only_from_revision_one(index: SearchIndex) -> None:
    index.apply("u1", 3, [fact(1, "tea")], [])
    index.mark_dirty("u2")
    assert index.indexed_revision("u1") is None
    assert index.indexed_revision("u2") is None


def test_rebuild_streams_and_reports_progress(index: SearchIndex) -> None:
    index.apply("gone", 1, [fact(1, "tea")], [])
    produced = 0
    progress: list[tuple[int, int]] = []

    def facts(user: int, count: int) -> Iterator[IndexedFact]:
        nonlocal produced
        for n in range(count):
            produced += 1
            yield fact(n, f"tea number {n} of user {user}", agent="coder" if n % 2 else DEFAULT)

    users = ((f"u{user}", 3, facts(user, 1250)) for user in range(2))
    done = index.rebuild(users, progress=lambda n: progress.append((n, produced)))
    assert done == 2500
    assert progress == [(1000, 1000), (2000, 2000), (2500, 2500)]  # nothing read ahead
    assert ids(index, "tea", user="gone") == []
    assert index.indexed_revision("gone") is None
    assert index.indexed_revision("u1") == 3
    assert ids(index, '"number 1248"', user="u1") == ["fact_000004e0"]
    assert ids(index, '"number 1249"', user="u1", agent="coder") == ["fact_000004e1"]


def test_changes_after_a_rebuild_find_exactly_the_new_text(index: SearchIndex) -> None:
    # The rebuild fills the full-text index from `facts` in one pass, with rowids of its own
    # choosing: later changes must replace and remove exactly those entries.
    facts = [fact(n, f"green tea number {n}") for n in range(3)]
    index.rebuild([("u1", 1, facts), ("u2", 1, [fact(0, "green tea of another user")])])
    index.apply("u1", 2, [fact(1, "black coffee now"), fact(7, "green tea again")], [])
    index.apply("u1", 3, [], [(DEFAULT, "fact_00000002")])
    assert sorted(ids(index, "green tea")) == ["fact_00000000", "fact_00000007"]
    assert ids(index, "coffee") == ["fact_00000001"]
    assert ids(index, '"number 1"') == []
    assert ids(index, '"number 2"') == []
    assert ids(index, "another", user="u2") == ["fact_00000000"]
    if isinstance(index, RetrievalIndex):
        with sqlite3.connect(index.path) as conn:  # FTS5's own check of index against content
            conn.execute("INSERT INTO facts_fts(facts_fts, rank) VALUES ('integrity-check', 1)")


def test_rebuild_of_nothing_empties_the_index(index: SearchIndex) -> None:
    index.apply("u1", 1, [fact(1, "tea")], [])
    assert index.rebuild([]) == 0
    assert ids(index, "tea") == []


# --- the store -----------------------------------------------------------------------------------


def test_reopening_keeps_data(open_index: OpenIndex) -> None:
    first = open_index()
    first.apply("u1", 1, [fact(1, "tea")], [])
    first.close()
    with pytest.raises(RuntimeError, match="closed"):
        first.indexed_revision("u1")
    second = open_index()
    assert ids(second, "tea") == ["fact_00000001"]
    assert second.indexed_revision("u1") == 1


def test_reopening_keeps_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    RetrievalIndex(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM migrations").fetchall() == [(1,), (2,), (3,)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_concurrent_applies_lose_nothing(index: SearchIndex) -> None:
    def writer(user: str) -> None:
        for n in range(1, 51):
            index.apply(user, n, [fact(n, f"tea {n}")], [])

    threads = [threading.Thread(target=writer, args=(f"u{t}",)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for t in range(4):
        assert index.indexed_revision(f"u{t}") == 50
        assert len(ids(index, "tea", user=f"u{t}", limit=100)) == 50


def test_two_objects_on_one_store_see_each_others_writes(open_index: OpenIndex) -> None:
    one, two = open_index(), open_index()
    one.apply("u1", 1, [fact(1, "tea")], [])
    assert ids(two, "tea") == ["fact_00000001"]
    two.apply("u1", 2, [fact(2, "more tea")], [])
    assert ids(one, "tea") == ["fact_00000001", "fact_00000002"]
    assert one.indexed_revision("u1") == 2


def test_a_corrupt_file_is_reported_not_deleted(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    path.write_bytes(b"this is not a database " * 200)
    with pytest.raises(IndexCorruptionError, match=str(path)) as raised:
        RetrievalIndex(path)
    assert isinstance(raised.value, MemoryCorruptionError)
    assert path.read_bytes().startswith(b"this is not")
    fresh = RetrievalIndex.reset(path)
    fresh.apply("u1", 1, [fact(1, "tea")], [])
    assert ids(fresh, "tea") == ["fact_00000001"]
    fresh.close()


# --- jieba ---------------------------------------------------------------------------------------


def test_jieba_is_used_when_installed_and_its_loss_marks_users_dirty(
    open_index: OpenIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in jieba that cuts every CJK run into single characters."""
    fake = types.ModuleType("jieba")
    fake.lcut_for_search = list  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "jieba", fake)
    with_jieba = open_index()
    with_jieba.apply("u1", 1, [fact(1, "用户喜欢喝茶")], [])
    assert ids(with_jieba, "茶") == ["fact_00000001"]  # a single character: no bigram has it
    with_jieba.close()

    monkeypatch.setitem(sys.modules, "jieba", None)  # importing it now fails
    without = open_index()
    assert without.indexed_revision("u1") is None
    without.replace_user("u1", 1, [fact(1, "用户喜欢喝茶")])
    assert ids(without, "喝茶") == ["fact_00000001"]
    assert open_index().indexed_revision("u1") == 1  # the fallback is recorded: no loop
