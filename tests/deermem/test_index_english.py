"""English retrieval: stop words left out of plain queries, Porter stemming, event times as
words, and the upgrades of index files built before them."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem.deermem.core.fts_query import (
    STOP_WORDS,
    FtsQuery,
    bigrams,
    build_query,
    event_words,
)
from deerflow.agents.memory.backends.deermem.deermem.core.index import (
    TOKENIZER,
    IndexedFact,
    RetrievalIndex,
)
from deerflow.agents.memory.backends.deermem.deermem.engine import SearchIndex
from tests.conftest import OpenIndex

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
DEFAULT = "__default__"


def fact(n: int, content: str) -> IndexedFact:
    return IndexedFact(DEFAULT, f"fact_{n:08x}", content, "context", 0.8, "2026-12-01T10:00:00Z")


def ids(index: SearchIndex, query: str) -> list[str]:
    return [hit.fact_id for hit in index.search("u1", DEFAULT, query, limit=10, now=NOW)]


@pytest.fixture
def index(open_index: OpenIndex) -> SearchIndex:
    """Each engine's index (files and PostgreSQL): searching holds for both."""
    opened: SearchIndex = open_index()
    return opened


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "When did Caroline go to the LGBTQ support group?",
            FtsQuery(
                '"Caroline" OR "go" OR "LGBTQ" OR "support" OR "group?"',
                ('"Caroline"', '"go"', '"LGBTQ"', '"support"', '"group?"'),
                syntax=False,
            ),
        ),
        # A word is dropped only when all its tokens are stop words; negations stay.
        (
            "What's Melanie's job",
            FtsQuery('"Melanie\'s" OR "job"', ('"Melanie\'s"', '"job"'), False),
        ),
        ("I don't drink", FtsQuery('"don\'t" OR "drink"', ('"don\'t"', '"drink"'), False)),
        # Nothing but stop words: searched as written rather than not at all.
        ("what is it", FtsQuery('"what" OR "is" OR "it"', ('"what"', '"is"', '"it"'), False)),
        # CJK words are never stop words; deliberate syntax passes through untouched.
        ("the 喝茶", FtsQuery('"喝茶"', ('"喝茶"',), syntax=False)),
        ("the AND tea", FtsQuery("the AND tea", ('"the"', '"tea"'), syntax=True)),
    ],
)
def test_build_query_drops_stop_words(text: str, expected: FtsQuery) -> None:
    assert build_query(text, bigrams, stop_words=STOP_WORDS) == expected


def test_stop_words_are_lower_case_function_words() -> None:
    assert all(word == word.casefold() for word in STOP_WORDS)
    assert {"the", "what", "did", "to"} <= STOP_WORDS
    assert not {"no", "not", "don"} & STOP_WORDS


def test_stemming_and_stop_words_in_search(index: SearchIndex) -> None:
    index.apply(
        "u1",
        1,
        [
            fact(1, "Caroline found the transgender stories inspiring"),
            fact(2, "what is the plan for the weekend and what is next"),
            fact(3, "用户喜欢喝茶"),
            fact(4, "She is running a charity race"),
        ],
        [],
    )
    assert ids(index, "What story did Caroline find?") == ["fact_00000001"]
    assert ids(index, "runs races") == ["fact_00000004"]
    # Only stop words: still searched.
    assert ids(index, "what is") == ["fact_00000002", "fact_00000004"]
    assert ids(index, "喝茶") == ["fact_00000003"]
    assert ids(index, "run*") == ["fact_00000004"]


def test_an_index_built_with_unicode61_is_retokenized_on_open(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    first = RetrievalIndex(path)
    first.apply("u1", 1, [fact(1, "she loves stories"), fact(2, "用户喜欢喝茶")], [])
    first.close()
    with sqlite3.connect(path) as conn:  # the table as schema version 1 created it
        conn.execute("DROP TABLE facts_fts")
        conn.execute(
            "CREATE VIRTUAL TABLE facts_fts USING fts5(body, content='facts', content_rowid='id',"
            " columnsize=0, tokenize='unicode61 remove_diacritics 2')"
        )
        conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('rebuild')")

    reopened = RetrievalIndex(path)
    try:
        assert ids(reopened, "story") == ["fact_00000001"]
        assert ids(reopened, "喝茶") == ["fact_00000002"]
        assert reopened.indexed_revision("u1") == 1  # re-indexed from `facts`, not dirty
    finally:
        reopened.close()
    with sqlite3.connect(path) as conn:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'facts_fts'").fetchone()
        assert f"tokenize='{TOKENIZER}'" in sql
        assert conn.execute("SELECT version FROM migrations").fetchall() == [(1,), (2,), (3,)]


# -- event times --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event_time", "words"),
    [
        ("2023-05-08", "8 May 2023"),
        ("2023-12-31T23:59:00+00:00", "31 December 2023"),
        (" 2024-02-29 ", "29 February 2024"),
        ("last spring", ""),
        ("", ""),
        (None, ""),
    ],
)
def test_event_times_become_the_words_a_question_uses(event_time: str | None, words: str) -> None:
    assert event_words(event_time) == words


def test_a_fact_is_found_by_when_it_happened(index: SearchIndex) -> None:
    dated = IndexedFact(
        DEFAULT, "fact_00000001", "Went camping with the kids", "context", 0.8,
        "2026-12-01T10:00:00Z", event_time="2023-06-17",
    )  # fmt: skip
    index.apply("u1", 1, [dated, fact(2, "Went camping alone"), fact(3, "Painted in June")], [])
    assert ids(index, "What did she do in June 2023?")[0] == "fact_00000001"
    assert ids(index, "camping June 2023")[0] == "fact_00000001"


def test_an_index_from_before_event_times_rebuilds_each_user_once(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    first = RetrievalIndex(path)
    first.apply("u1", 1, [fact(1, "tea")], [])
    first.close()
    with sqlite3.connect(path) as conn:  # back to schema version 1
        conn.execute("DROP TABLE vectors")
        conn.execute("ALTER TABLE facts DROP COLUMN thread")
        conn.execute("ALTER TABLE facts DROP COLUMN created_ts")
        conn.execute("DELETE FROM migrations WHERE version >= 2")
        conn.execute("DELETE FROM meta WHERE key = 'embedder'")
    reopened = RetrievalIndex(path)
    assert reopened.indexed_revision("u1") is None  # dirty: the next search rebuilds it
    reopened.apply("u1", 2, [fact(2, "coffee")], [])
    assert reopened.indexed_revision("u1") is None  # still dirty until rebuilt from the files
    reopened.replace_user("u1", 2, [fact(1, "tea"), fact(2, "coffee")])
    assert reopened.indexed_revision("u1") == 2
    reopened.close()
    again = RetrievalIndex(path)
    assert again.indexed_revision("u1") == 2  # upgraded once, not on every open
    again.close()
