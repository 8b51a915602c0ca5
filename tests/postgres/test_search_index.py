"""The PostgreSQL search index beside the files index: the same hits for the same facts, the
vectors kept with the facts, revisions under concurrent replicas, and odd input."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from deerflow.agents.memory.backends.deermem.deermem.core.index import IndexedFact, RetrievalIndex
from deerflow.agents.memory.backends.deermem.deermem.embeddings import Embedder, EmbeddingError
from deerflow.agents.memory.backends.deermem.deermem.postgres.index import PostgresIndex
from deerflow.agents.memory.backends.deermem.deermem.retrieval import SearchHit
from tests.conftest import OpenIndex

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
DEFAULT = "__default__"
DATA = Path(__file__).parent.parent / "deermem" / "data" / "paraphrases.json"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    model = Embedder()
    model.load()
    return model


def english_corpus() -> tuple[list[IndexedFact], list[str]]:
    """Facts and questions about them: the paraphrase sets, their controls, and some more."""
    data = json.loads(DATA.read_text())
    texts: list[tuple[str, str]] = []
    queries: list[str] = []
    for part in ("dev", "check"):
        for entry in data[part]["facts"]:
            texts.append((entry["stored"], entry["category"]))
            queries.extend(entry["paraphrases"])
        for control in data[part]["controls"]:
            texts.append((control["proposed"], control["category"]))
            queries.append(control["stored"])
    texts += [
        ("Caroline found the transgender stories inspiring", "context"),
        ("She is running a charity race in May", "context"),
        ("I don't read e-mail on weekends", "preference"),
        ("Went camping with the kids", "context"),
    ]
    queries += [
        "What story did Caroline find?", "runs races", "what is", "e-mail", "run*",
        '"charity race"', "camping NOT kids", "NEAR(transgender inspiring, 3)", "weekend AND mail",
        "June 2023", "tea OR coffee", "pnpm AND", "Berlin", "",
    ]  # fmt: skip
    rng = random.Random(7)
    facts = [
        IndexedFact(
            DEFAULT if n % 3 else "coder",
            f"fact_{n:08x}",
            content,
            category,
            round(rng.uniform(0.5, 1.0), 2),
            f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}T10:00:00Z",
            event_time="2023-06-17" if content.startswith("Went camping") else None,
            thread=f"t{n % 4}" if n % 5 else None,
            created_at=f"2026-11-{n % 28 + 1:02d}T10:00:00Z",
        )
        for n, (content, category) in enumerate(texts)
    ]
    return facts, queries


CJK_FACTS = [
    "用户喜欢喝茶",
    "用户住在柏林",
    "我每天早上喝绿茶",
    "她在学习日语和汉字",
    "ユーザーは東京に住んでいる",
]
CJK_QUERIES = ["喝茶", "柏林", "绿茶", "日语", "东京", "東京", "用户喜欢什么"]


def hits(index: Any, agent: str, query: str, **options: Any) -> list[SearchHit]:
    return list(index.search("u", agent, query, limit=8, now=NOW, **options))


def assert_same_hits(files: RetrievalIndex, postgres: PostgresIndex, queries: list[str]) -> None:
    for query in queries:
        for agent in (DEFAULT, "coder"):
            for options in ({}, {"thread_context": 0.5}, {"category": "preference"}):
                expected = hits(files, agent, query, **options)
                found = hits(postgres, agent, query, **options)
                assert [hit.fact_id for hit in found] == [hit.fact_id for hit in expected], (
                    query,
                    agent,
                    options,
                )
                for got, want in zip(found, expected, strict=True):
                    assert got.score == pytest.approx(want.score, rel=1e-5, abs=1e-6)


@pytest.fixture
def both(
    tmp_path: Path, pool: ConnectionPool, request: pytest.FixtureRequest
) -> Iterator[tuple[RetrievalIndex, PostgresIndex]]:
    model = request.getfixturevalue("embedder") if request.param else None
    files, postgres = RetrievalIndex(tmp_path / "index.sqlite3", model), PostgresIndex(pool, model)
    yield files, postgres
    files.close()
    postgres.close()


@pytest.mark.parametrize("both", [False, True], ids=["lexical", "hybrid"], indirect=True)
def test_both_indexes_rank_an_english_corpus_alike(
    both: tuple[RetrievalIndex, PostgresIndex],
) -> None:
    facts, queries = english_corpus()
    for index in both:
        index.apply("u", 1, facts[:20], [])
        index.apply("u", 2, facts[20:], [(DEFAULT, "fact_00000001")])
    assert_same_hits(*both, queries)
    assert hits(both[1], DEFAULT, "What story did Caroline find?")  # the corpus is searched


@pytest.mark.parametrize("both", [False, True], ids=["lexical", "hybrid"], indirect=True)
def test_both_indexes_rank_a_cjk_corpus_alike(both: tuple[RetrievalIndex, PostgresIndex]) -> None:
    facts = [
        IndexedFact(DEFAULT, f"fact_{n}", text, "context", 0.8, "2026-12-01T10:00:00Z")
        for n, text in enumerate(CJK_FACTS)
    ]
    for index in both:
        index.rebuild([("u", 1, facts)])
    assert_same_hits(*both, CJK_QUERIES)
    assert [hit.fact_id for hit in hits(both[1], DEFAULT, "喝茶")] == ["fact_0"]


def stored_vectors(pool: ConnectionPool) -> dict[str, str]:
    """Fact id → vector of every stored vector ({} when there is no vector column)."""
    with pool.connection() as conn:
        if not conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = 'search_facts' AND column_name = 'embedding'"
        ).fetchone():
            return {}
        rows = conn.execute(
            "SELECT fact_id, embedding::text FROM search_facts WHERE embedding IS NOT NULL"
        ).fetchall()
    return dict(rows)


def fact(n: int, content: str, agent: str = DEFAULT) -> IndexedFact:
    return IndexedFact(agent, f"fact_{n}", content, "preference", 0.9, "2026-12-01T10:00:00Z")


def test_vectors_follow_every_write(pool: ConnectionPool, embedder: Embedder) -> None:
    index = PostgresIndex(pool, embedder)
    index.apply("u", 1, [fact(1, "Lives in Berlin"), fact(2, "Drinks green tea")], [])
    index.apply("u", 2, [fact(1, "Lives in Lisbon")], [(DEFAULT, "fact_2")])
    assert set(stored_vectors(pool)) == {"fact_1"}
    found = index.similarities("u", DEFAULT, "Lives in Lisbon")
    # Kept at the half precision the files index stores (a cosine moves by less than 2e-4).
    assert found == {"fact_1": pytest.approx(1.0, abs=2e-4)}
    index.replace_user("u", 3, [fact(3, "Uses pnpm"), fact(4, "Likes tea", "coder")])
    assert set(stored_vectors(pool)) == {"fact_3", "fact_4"}
    index.rebuild([("u", 4, [fact(5, "Works as a data engineer")])])
    assert set(stored_vectors(pool)) == {"fact_5"}
    assert [hit.fact_id for hit in index.search("u", DEFAULT, "which job", now=NOW)] == ["fact_5"]
    assert index.similarities("u", "coder", "tea") == {}
    assert index.similarities("nobody", DEFAULT, "tea") == {}


def test_another_model_or_none_drops_the_vectors_and_rebuilds_users(
    pool: ConnectionPool, embedder: Embedder
) -> None:
    PostgresIndex(pool, embedder).apply("u", 1, [fact(1, "Lives in Berlin")], [])
    lexical = PostgresIndex(pool)
    assert stored_vectors(pool) == {}  # opened without the model: the vectors would go stale
    assert lexical.indexed_revision("u") == 1  # its lexical rows are still right
    assert lexical.similarities("u", DEFAULT, "Berlin") == {}
    hybrid = PostgresIndex(pool, embedder)
    assert hybrid.indexed_revision("u") is None  # dirty: rebuilt with vectors before a search
    hybrid.replace_user("u", 1, [fact(1, "Lives in Berlin")])
    assert [hit.fact_id for hit in hybrid.search("u", DEFAULT, "which city", now=NOW)] == ["fact_1"]


def test_a_missing_model_stops_the_opening(pool: ConnectionPool, tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="not found"):
        PostgresIndex(pool, Embedder(model_dir=tmp_path / "missing"))


def test_replicas_applying_one_users_revisions_at_once_never_claim_a_gap(
    pool: ConnectionPool,
) -> None:
    """Revisions 1..40 applied by 4 replicas in whatever order they arrive: the user ends at
    40 only if each came after the one before, and is dirty otherwise."""
    replicas = [PostgresIndex(pool) for _ in range(4)]
    order: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def replica(n: int) -> None:
        try:
            for revision in range(n + 1, 41, 4):
                with lock:
                    order.append(revision)
                replicas[n].apply("u", revision, [fact(revision, f"tea {revision}")], [])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=replica, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    revision = replicas[0].indexed_revision("u")
    assert revision in (None, 40)
    assert len(replicas[0].search("u", DEFAULT, "tea", limit=100, now=NOW)) == 40


@pytest.mark.parametrize(
    "query",
    [
        "'; DROP TABLE search_facts; --",
        "tea & coffee | !milk",
        "a:* <-> b <2> c",
        "(((",
        "\x00 tea",
        "NEAR(tea coffee, 99999)",
        " ".join(f"word{n}" for n in range(100)),
        "é" * 5000,
    ],
)
def test_odd_queries_are_searched_or_find_nothing_but_never_fail(
    open_index: OpenIndex, query: str
) -> None:
    index = open_index()
    index.apply("u", 1, [fact(1, "tea and coffee with milk"), fact(2, "a b c")], [])
    found = index.search("u", DEFAULT, query, now=NOW)
    assert all(hit.fact_id in {"fact_1", "fact_2"} for hit in found)
    assert index.indexed_revision("u") == 1


def test_odd_facts_are_stored_and_found(open_index: OpenIndex) -> None:
    index = open_index()
    odd = [
        IndexedFact("o'brien", "fact_'1", 'It\'s a "quoted" fact \\ with\x00a NUL', "x", 1.0, ""),
        IndexedFact(DEFAULT, "fact_2", "word " * 20_000, "x", 0.0, "not a time"),
        IndexedFact(DEFAULT, "fact_3", "Crème brûlée à Zürich", "x", 0.5, "2026-12-01"),
        IndexedFact(DEFAULT, "fact_4", "é" * 3000 + " long", "x", 0.5, "2026-12-01"),
    ]
    index.apply("u", 1, odd, [])
    assert [hit.fact_id for hit in index.search("u", "o'brien", "quoted", now=NOW)] == ["fact_'1"]
    assert [hit.fact_id for hit in index.search("u", DEFAULT, "word", now=NOW)] == ["fact_2"]
    assert [hit.fact_id for hit in index.search("u", DEFAULT, "creme zurich")] == ["fact_3"]
    assert [hit.fact_id for hit in index.search("u", DEFAULT, "é" * 3000)] == ["fact_4"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda index: index.search("u", DEFAULT, "tea", limit=0), "limit"),
        (lambda index: index.search("u", DEFAULT, "tea", thread_context=1.5), "thread_context"),
    ],
)
def test_bad_search_arguments_are_refused(open_index: OpenIndex, call: Any, message: str) -> None:
    index = open_index()
    index.apply("u", 1, [fact(1, "tea")], [])
    with pytest.raises(ValueError, match=message):
        call(index)


def test_a_bad_semantic_weight_is_refused(open_index: OpenIndex, embedder: Embedder) -> None:
    index = open_index(embedder)
    index.apply("u", 1, [fact(1, "tea")], [])
    with pytest.raises(ValueError, match="semantic_weight"):
        index.search("u", DEFAULT, "tea", semantic_weight=1.5)


def test_reset_empties_the_index_so_every_user_is_rebuilt(pool: ConnectionPool) -> None:
    PostgresIndex(pool).apply("u", 1, [fact(1, "tea")], [])
    index = PostgresIndex.reset(pool)
    assert index.indexed_revision("u") is None
    assert index.search("u", DEFAULT, "tea") == []
