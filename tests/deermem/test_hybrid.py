"""Hybrid retrieval with the real shipped model: search, injection, vectors, dedup."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.index import (
    IndexedFact,
)
from deerflow.agents.memory.backends.deermem.deermem.core.paths import safe_user_id
from deerflow.agents.memory.backends.deermem.deermem.core.vectors import stored_form
from deerflow.agents.memory.backends.deermem.deermem.embeddings import Embedder, EmbeddingError
from deerflow.agents.memory.backends.deermem.deermem.pipeline.apply import apply_extraction
from deerflow.agents.memory.backends.deermem.deermem.pipeline.extraction import (
    Extraction,
    Labels,
    NewFact,
)
from tests.conftest import OpenIndex
from tests.deermem.pipeline_helpers import ScriptedModel, reply

DEFAULT = "__default__"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
PNPM = "Uses pnpm as the JavaScript package manager"
FACTS = (
    PNPM,
    "Lives in Berlin",
    "Is allergic to peanuts",
    "Drinks green tea every morning",
    "Works as a data engineer",
)
# No word in common with PNPM once stop words are dropped: lexical search cannot find it.
PARAPHRASE = "what JS tooling does she like?"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    model = Embedder()
    model.load()
    return model


def make(root: Path, **settings: Any) -> DeerMemMemoryManager:
    config = {"storage_path": str(root), **settings}  # hybrid is the default
    return DeerMemMemoryManager.from_config(config)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[DeerMemMemoryManager]:
    manager = make(tmp_path)
    yield manager
    manager.close()


def stored_vectors(root: Path, user: str = "u", agent: str = DEFAULT) -> dict[str, bytes]:
    """The vectors the index holds for one scope, read from the file."""
    with sqlite3.connect(root / ".retrieval" / "index.sqlite3") as conn:
        rows = conn.execute(
            "SELECT f.fact_id, v.vec FROM vectors AS v JOIN facts AS f ON f.id = v.id"
            " JOIN scopes USING (scope_id) WHERE user_key = ? AND agent = ?",
            (safe_user_id(user), agent),
        ).fetchall()
    return dict(rows)


def orphan_vectors(root: Path) -> int:
    with sqlite3.connect(root / ".retrieval" / "index.sqlite3") as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM vectors WHERE id NOT IN (SELECT id FROM facts)"
        ).fetchone()
    return int(count)


def assert_vectors_match_the_files(
    manager: DeerMemMemoryManager, embedder: Embedder, root: Path, user: str = "u"
) -> None:
    facts = manager.reload_memory(user_id=user)["facts"]
    vectors = [stored_form(v) for v in embedder.encode([f["content"] for f in facts])]
    expected = dict(zip([f["id"] for f in facts], vectors, strict=True))
    assert stored_vectors(root, user) == expected
    assert orphan_vectors(root) == 0


def contents(results: list[dict[str, Any]]) -> list[str]:
    return [result["content"] for result in results]


# -- search and injection --------------------------------------------------------------------


def test_a_fresh_install_finds_a_fact_by_meaning_and_not_the_unrelated(tmp_path: Path) -> None:
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})  # defaults only
    manager.create_fact("Prefers pnpm over npm")
    assert contents(manager.search("package manager")) == ["Prefers pnpm over npm"]
    manager.create_fact("Deploys services with Kubernetes")
    manager.create_fact("Likes tea")
    # Beside a clear match, facts unrelated to the query are not returned.
    assert contents(manager.search("Kubernetes")) == ["Deploys services with Kubernetes"]
    manager.close()


def test_hybrid_search_finds_a_paraphrase_that_lexical_search_misses(tmp_path: Path) -> None:
    lexical = make(tmp_path / "lexical", retrieval_embeddings=False)
    hybrid = make(tmp_path / "hybrid")
    for manager in (lexical, hybrid):
        for content in FACTS:
            manager.create_fact(content, "preference", 0.9, user_id="u")
    assert PNPM not in contents(lexical.search(PARAPHRASE, top_k=5, user_id="u"))
    (best,) = hybrid.search(PARAPHRASE, top_k=1, user_id="u")
    assert best["content"] == PNPM
    assert 0 < best["score"] <= 1
    # Exact words still win: the lexical ranking is half of the fused score.
    assert hybrid.search("peanuts", top_k=1, user_id="u")[0]["content"] == FACTS[2]
    lexical.close()
    hybrid.close()


def test_injection_ranks_the_fact_meant_first_even_without_shared_words(tmp_path: Path) -> None:
    lexical = make(
        tmp_path / "lexical", retrieval_embeddings=False, retrieval_relevance_enabled=True
    )
    hybrid = make(tmp_path / "hybrid", retrieval_relevance_enabled=True)
    for manager in (lexical, hybrid):
        manager.create_fact(PNPM, "preference", 0.85, user_id="u")
        for content in FACTS[1:]:
            manager.create_fact(content, "preference", 0.9, user_id="u")
    first = f"- [preference | 0.85] {PNPM}"
    assert not lexical.get_context("u", query=PARAPHRASE).split("Facts:\n")[1].startswith(first)
    assert hybrid.get_context("u", query=PARAPHRASE).split("Facts:\n")[1].startswith(first)
    lexical.close()
    hybrid.close()


def test_another_users_and_another_buckets_vectors_never_score(
    manager: DeerMemMemoryManager,
) -> None:
    manager.create_fact(PNPM, user_id="alice")
    manager.create_fact(PNPM, user_id="bob", agent_name="coder")
    manager.create_fact("Lives in Berlin", user_id="bob")
    assert contents(manager.search(PARAPHRASE, top_k=5, user_id="bob")) == ["Lives in Berlin"]
    assert contents(manager.search(PARAPHRASE, top_k=5, user_id="carol")) == []
    assert contents(manager.search(PARAPHRASE, top_k=5, user_id="alice")) == [PNPM]


def test_the_category_filter_applies_to_the_semantic_ranking(
    manager: DeerMemMemoryManager,
) -> None:
    manager.create_fact(PNPM, "knowledge", user_id="u")
    manager.create_fact("Prefers yarn for JavaScript", "preference", user_id="u")
    found = manager.search(PARAPHRASE, top_k=5, user_id="u", category="preference")
    assert contents(found) == ["Prefers yarn for JavaScript"]


def test_a_query_the_model_cannot_read_is_searched_lexically(
    manager: DeerMemMemoryManager,
) -> None:
    manager.create_fact("用户喜欢喝茶", user_id="u")
    for content in FACTS:
        manager.create_fact(content, user_id="u")
    # The model knows no Chinese token, so the query has no vector: no fact is padded in.
    assert contents(manager.search("喝茶", top_k=5, user_id="u")) == ["用户喜欢喝茶"]


# -- the vectors stay those of the files -------------------------------------------------------


def test_vectors_follow_every_write_path(tmp_path: Path, embedder: Embedder) -> None:
    manager = make(tmp_path)
    _, a = manager.create_fact(PNPM, user_id="u")
    _, b = manager.create_fact("Lives in Berlin", user_id="u")
    _, c = manager.create_fact("Drinks green tea every morning", user_id="u")
    assert_vectors_match_the_files(manager, embedder, tmp_path)

    manager.update_fact(b, content="Lives in Lisbon", user_id="u")
    assert_vectors_match_the_files(manager, embedder, tmp_path)
    manager.update_fact(a, confidence=0.95, user_id="u")
    assert_vectors_match_the_files(manager, embedder, tmp_path)

    manager.delete_fact(c, user_id="u")
    assert c not in stored_vectors(tmp_path)
    assert_vectors_match_the_files(manager, embedder, tmp_path)
    manager.revert_change(manager.get_history(user_id="u")[0]["change_id"], user_id="u")
    assert c in stored_vectors(tmp_path)
    assert_vectors_match_the_files(manager, embedder, tmp_path)

    exported = manager.export_memory(user_id="u")
    manager.clear_memory(user_id="u")
    assert stored_vectors(tmp_path) == {}
    assert orphan_vectors(tmp_path) == 0
    manager.revert_change(manager.get_history(user_id="u")[0]["change_id"], user_id="u")
    assert len(stored_vectors(tmp_path)) == 3
    assert_vectors_match_the_files(manager, embedder, tmp_path)

    exported["facts"] = [f for f in exported["facts"] if f["id"] != a]
    manager.import_memory(exported, user_id="u")
    assert a not in stored_vectors(tmp_path)
    assert_vectors_match_the_files(manager, embedder, tmp_path)

    assert manager.reindex() == 2
    assert_vectors_match_the_files(manager, embedder, tmp_path)
    assert contents(manager.search("which city", top_k=1, user_id="u")) == ["Lives in Lisbon"]
    manager.close()


def test_concurrent_writers_leave_one_vector_per_fact(tmp_path: Path, embedder: Embedder) -> None:
    manager = make(tmp_path)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(5):
                manager.create_fact(f"Fact {i} from writer {n} about tea", user_id=f"u{n}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for n in range(4):  # four users writing into the one index at once
        assert len(stored_vectors(tmp_path, f"u{n}")) == 5
        assert_vectors_match_the_files(manager, embedder, tmp_path, f"u{n}")
    manager.close()


def test_turning_embeddings_on_later_or_off_and_on_never_leaves_stale_vectors(
    tmp_path: Path, embedder: Embedder
) -> None:
    plain = make(tmp_path, retrieval_embeddings=False)
    _, fact_id = plain.create_fact("Lives in Berlin", user_id="u")
    plain.close()

    hybrid = make(tmp_path)  # built lexical-only: its first search builds the vectors
    assert contents(hybrid.search("which city", top_k=1, user_id="u")) == ["Lives in Berlin"]
    assert_vectors_match_the_files(hybrid, embedder, tmp_path)
    hybrid.close()

    plain = make(tmp_path, retrieval_embeddings=False)
    plain.update_fact(fact_id, content="Drinks green tea every morning", user_id="u")
    assert stored_vectors(tmp_path) == {}  # index opened without a model: vectors would go stale
    plain.close()

    hybrid = make(tmp_path)
    assert contents(hybrid.search("morning beverage", top_k=1, user_id="u")) == [
        "Drinks green tea every morning"
    ]
    assert_vectors_match_the_files(hybrid, embedder, tmp_path)
    hybrid.close()


def test_an_index_of_full_precision_vectors_is_rebuilt_in_half_precision(
    tmp_path: Path, embedder: Embedder
) -> None:
    manager = make(tmp_path)
    manager.create_fact("Lives in Berlin", user_id="u")
    manager.close()
    # As an earlier version left it: float32 vectors, recorded under the bare model name.
    with sqlite3.connect(tmp_path / ".retrieval" / "index.sqlite3") as conn:
        full = {fact_id: embedder.encode([text])[0] for fact_id, text in stored_texts(conn)}
        for fact_id, vector in full.items():
            conn.execute(
                "UPDATE vectors SET vec = ? WHERE id = (SELECT id FROM facts WHERE fact_id = ?)",
                (vector, fact_id),
            )
        conn.execute("UPDATE meta SET value = ? WHERE key = 'embedder'", (embedder.name,))
    conn.close()

    manager = make(tmp_path)
    assert contents(manager.search("which city", top_k=1, user_id="u")) == ["Lives in Berlin"]
    assert_vectors_match_the_files(manager, embedder, tmp_path)
    manager.close()


def stored_texts(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return conn.execute("SELECT fact_id, body FROM facts").fetchall()


def test_a_failing_model_writes_nothing_to_the_index(
    open_index: OpenIndex, embedder: Embedder, tmp_path: Path
) -> None:
    open_index(embedder).close()  # the store holds this model's vectors...
    index = open_index(Embedder(model_dir=tmp_path / "missing"))  # ...whose files then went
    fact = IndexedFact(DEFAULT, "fact_1", "Lives in Berlin", "context", 0.9, "2026-12-01")
    with pytest.raises(EmbeddingError, match="not found"):
        index.apply("u", 1, [fact], [])
    assert index.indexed_revision("u") is None
    with pytest.raises(EmbeddingError):
        index.search("u", DEFAULT, "Berlin")


# -- near duplicates by meaning ----------------------------------------------------------------


def proposal(content: str, category: str = "preference") -> NewFact:
    return NewFact(content, category, 0.9, Labels("user", "durable", "descriptive"))


def extraction(*facts: NewFact) -> Extraction:
    return Extraction(
        summaries={},
        new_facts=facts,
        reinforce=(),
        removals=(),
        stale_remove=(),
        stale_extend=(),
        consolidations=(),
        rejected={},
    )


def merged(
    tmp_path: Path, embedder: Embedder | None, new: NewFact, **settings: Any
) -> dict[str, int]:
    """Apply `new` over a bucket holding "Uses docker compose for deployments"."""
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
    manager.create_fact("Uses docker compose for deployments", "preference", 0.8, user_id="u")
    config = DeerMemConfig(storage_path=str(tmp_path), fact_dedup_enabled=True, **settings)
    outcome = apply_extraction(
        manager.storage.load("u", None),
        extraction(new),
        config,
        now=NOW,
        stamp="2026-12-02T12:00:00Z",
        thread_id="t1",
        similarity=None if embedder is None else embedder.text_similarities,
    )
    manager.close()
    return outcome.metrics


def test_a_paraphrase_is_merged_by_cosine_similarity(tmp_path: Path, embedder: Embedder) -> None:
    paraphrase = proposal("Deploys with Docker Compose")  # token Jaccard 0.4: below 0.7
    assert merged(tmp_path / "a", None, paraphrase).get("facts_merged_dedup", 0) == 0
    assert merged(tmp_path / "b", embedder, paraphrase)["facts_merged_dedup"] == 1
    strict = merged(tmp_path / "c", embedder, paraphrase, fact_dedup_semantic_threshold=0.99)
    assert strict.get("facts_merged_dedup", 0) == 0
    other_category = merged(tmp_path / "d", embedder, proposal(paraphrase.content, "knowledge"))
    assert other_category.get("facts_merged_dedup", 0) == 0


def test_a_different_fact_is_not_merged(tmp_path: Path, embedder: Embedder) -> None:
    metrics = merged(tmp_path, embedder, proposal("Deploys to Kubernetes with Helm charts"))
    assert metrics.get("facts_merged_dedup", 0) == 0


def test_the_pipeline_merges_a_paraphrase_into_one_fact(tmp_path: Path) -> None:
    model = ScriptedModel(
        responses=[
            reply({"content": "Uses docker compose for deployments", "confidence": 0.8}),
            reply({"content": "Deploys with Docker Compose", "confidence": 0.9}),
        ]
    )
    manager = DeerMemMemoryManager.from_config(
        {"storage_path": str(tmp_path), "retrieval_embeddings": True, "fact_dedup_enabled": True},
        host_llm_factory=lambda: model,
    )
    first = [HumanMessage("how do we ship?", id="h1"), AIMessage("compose", id="a1")]
    second = [*first, HumanMessage("and deploys?", id="h2"), AIMessage("same", id="a2")]
    manager.add("t", first, user_id="u")
    assert manager.shutdown_flush(10) is True
    manager.add("t", second, user_id="u")
    assert manager.shutdown_flush(10) is True
    (fact,) = manager.reload_memory(user_id="u")["facts"]
    assert fact["content"] == "Uses docker compose for deployments"
    assert fact["confidence"] == 0.9
    assert fact["confirmationCount"] == 1
    manager.close()


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retrieval_semantic_weight", 1.5),
        ("retrieval_semantic_weight", -0.1),
        ("fact_dedup_semantic_threshold", 0),
        ("retrieval_embeddings", "sometimes"),
    ],
)
def test_bad_settings_are_refused_with_the_key(tmp_path: Path, key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"memory\.backend_config\.{key}"):
        make(tmp_path, **{key: value})
