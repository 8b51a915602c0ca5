"""Access heat of facts in PostgreSQL: the sidecar's arithmetic, atomic across replicas."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest
from psycopg_pool import ConnectionPool

from deerflow.agents.memory.backends.deermem.deermem.postgres.usage import PostgresUsage
from deerflow.agents.memory.backends.deermem.deermem.usage import (
    MAX_ENTRIES,
    UsageEntry,
    heat,
    record_hits,
)

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
HALF_LIFE = 30.0


def test_counts_decay_like_the_sidecar(pool: ConnectionPool) -> None:
    usage = PostgresUsage(pool)
    expected: dict[str, UsageEntry] = {}
    accesses = [
        (["a", "b"], NOW),
        (["a", "a"], NOW + timedelta(days=15)),  # one search naming a fact twice counts once
        (["b", "c"], NOW + timedelta(days=45)),
    ]
    for ids, moment in accesses:
        usage.record("u", "coder", ids, moment, HALF_LIFE)
        expected = record_hits(expected, ids, moment, HALF_LIFE)
    loaded = usage.load("u", "coder")
    assert loaded.keys() == expected.keys()
    for fact_id, entry in expected.items():
        assert loaded[fact_id].count == entry.count
        assert loaded[fact_id].heat == pytest.approx(entry.heat, rel=1e-9)
    later = NOW + timedelta(days=60)
    assert heat(usage, "u", "coder", later, HALF_LIFE) == pytest.approx(
        heat(_Fixed(expected), "u", "coder", later, HALF_LIFE)
    )
    # Another replica's clock a day behind: counted, and the last access never moves back.
    usage.record("u", "coder", ["b"], NOW + timedelta(days=44), HALF_LIFE)
    behind = usage.load("u", "coder")["b"]
    assert (behind.count, behind.last_accessed) == (3, NOW + timedelta(days=45))
    assert behind.heat == pytest.approx(loaded["b"].heat + 1)


class _Fixed:
    """A UsageStore holding given entries."""

    def __init__(self, entries: dict[str, UsageEntry]) -> None:
        self._entries = entries

    def load(self, user_id: str, bucket: str) -> dict[str, UsageEntry]:
        return dict(self._entries)


def test_buckets_and_users_are_kept_apart(pool: ConnectionPool) -> None:
    usage = PostgresUsage(pool)
    usage.record("u", "coder", ["a"], NOW, HALF_LIFE)
    usage.record("u", "__default__", ["a", "b"], NOW, HALF_LIFE)
    usage.record("v", "coder", ["a"], NOW, HALF_LIFE)
    usage.record("u", "coder", [], NOW, HALF_LIFE)
    assert set(usage.load("u", "coder")) == {"a"}
    assert set(usage.load("u", "__default__")) == {"a", "b"}
    assert usage.load("w", "coder") == {}


def test_concurrent_replicas_lose_no_increment(pool: ConnectionPool) -> None:
    errors: list[BaseException] = []
    ids = [f"fact_{n}" for n in range(5)]

    def replica(n: int) -> None:
        usage = PostgresUsage(pool)  # each replica migrates on start, at once
        try:
            for i in range(25):
                usage.record("u", "b", ids[n % 2 :] if i % 2 else ids[::-1], NOW, HALF_LIFE)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=replica, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    counts = {fact_id: entry.count for fact_id, entry in PostgresUsage(pool).load("u", "b").items()}
    # fact_0 is missed by the odd searches of odd replicas: 3 * 25 + 3 * 13.
    assert counts == {"fact_0": 114, "fact_1": 150, "fact_2": 150, "fact_3": 150, "fact_4": 150}


def test_a_bucket_keeps_the_hottest_and_the_just_hit(pool: ConnectionPool) -> None:
    usage = PostgresUsage(pool)
    hot = [f"hot_{n:04d}" for n in range(MAX_ENTRIES - 1)]
    usage.record("u", "b", hot, NOW, HALF_LIFE)
    usage.record("u", "b", hot, NOW, HALF_LIFE)  # heat 2
    usage.record("u", "b", ["warm"], NOW, HALF_LIFE)  # heat 1: the bucket is full
    usage.record("u", "b", ["new_1", "new_2"], NOW, HALF_LIFE)
    loaded = usage.load("u", "b")
    assert len(loaded) == MAX_ENTRIES
    assert {"new_1", "new_2", *hot[:-1]} <= loaded.keys()
    assert "warm" not in loaded
    expected = record_hits(
        record_hits(
            record_hits(record_hits({}, hot, NOW, HALF_LIFE), hot, NOW, HALF_LIFE),
            ["warm"],
            NOW,
            HALF_LIFE,
        ),
        ["new_1", "new_2"],
        NOW,
        HALF_LIFE,
    )
    assert loaded.keys() == expected.keys()


def test_a_failing_record_never_fails_the_search(
    pool: ConnectionPool, caplog: pytest.LogCaptureFixture
) -> None:
    usage = PostgresUsage(pool)
    with pool.connection() as conn:
        conn.execute("ALTER TABLE fact_usage RENAME TO gone")
    with caplog.at_level(logging.WARNING):
        usage.record("u", "b", ["a"], NOW, HALF_LIFE)
    assert "could not record fact usage of u/b" in caplog.text
    with pytest.raises(Exception, match="fact_usage"):
        usage.load("u", "b")
