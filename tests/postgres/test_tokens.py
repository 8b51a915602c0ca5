"""Token counts of context lines in PostgreSQL: known to every replica, inserted once."""

from __future__ import annotations

import logging
import threading
from typing import NoReturn

import pytest
from psycopg_pool import ConnectionPool

from deerflow.agents.memory.backends.deermem.deermem.core.token_cache import line_key
from deerflow.agents.memory.backends.deermem.deermem.core.tokens import (
    TokenCounter,
    shared_cl100k_base,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.tokens import PostgresTokenStore

LINES = [
    "- [correction | 0.97] Use pnpm, not npm (avoid: used npm)",
    "- [preference | 0.90] 用户喜欢喝茶",
    "",
    "- lone surrogate \ud800 and <|endoftext|>",
]


def never_loads() -> NoReturn:
    raise AssertionError("the tokenizer was loaded")


def real(text: str) -> int:
    return len(shared_cl100k_base().encode_ordinary(text))


def test_a_line_counted_by_one_replica_is_known_to_another(pool: ConnectionPool) -> None:
    first = TokenCounter(cache=PostgresTokenStore(pool))
    assert [first.count(line + "\n") for line in LINES] == [real(line + "\n") for line in LINES]
    first.flush()
    second = TokenCounter(never_loads, cache=PostgresTokenStore(pool))
    for line in LINES:
        for text in (line, line + "\n", line + "\n\n"):
            assert second.count(text) == real(text)
    assert not second.ready


def test_stored_counts_are_never_overwritten(pool: ConnectionPool) -> None:
    store = PostgresTokenStore(pool)
    store.put({"line": (1, 2, 3)})
    store.put({"line": (7, 8, 9), "other": (4, 5, 6)})
    assert store.get("line") == (1, 2, 3)
    assert store.get("other") == (4, 5, 6)
    assert store.get("unknown") is None
    store.put({})
    with pool.connection() as conn:
        digests = [row[0] for row in conn.execute("SELECT digest FROM token_counts")]
    assert sorted(digests) == sorted([line_key("line"), line_key("other")])


def test_replicas_storing_the_same_lines_at_once_all_succeed(pool: ConnectionPool) -> None:
    errors: list[BaseException] = []
    counts = {f"line {n}": (n, n + 1, n + 2) for n in range(200)}

    def store() -> None:
        try:
            PostgresTokenStore(pool).put(counts)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=store) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    reader = PostgresTokenStore(pool)
    assert all(reader.get(line) == values for line, values in counts.items())


def test_a_failing_database_means_counting_with_the_encoding(
    pool: ConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresTokenStore(pool)
    store.put({"line": (1, 2, 3)})
    with pool.connection() as conn:
        conn.execute("ALTER TABLE token_counts RENAME TO gone")
    with caplog.at_level(logging.WARNING):
        assert store.get("line") is None
        store.put({"line": (1, 2, 3)})
    assert [r.getMessage() for r in caplog.records] == [
        "token counts: reading failed; counting with the encoding instead",
        "token counts: storing 1 lines failed; they are counted again later",
    ]
    counter = TokenCounter(cache=store)
    assert counter.count(LINES[0]) == real(LINES[0])
