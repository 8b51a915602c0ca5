"""Probe the PostgreSQL search index: search latency at 10^5 and 10^6 facts, load time, and
which index a query uses.

    uv run python -m benchmarks.pg_search_probe [--queries 2000] [--big] [--vectors]
        [--url postgresql://...] [--json out.json]

Facts and queries are those of `benchmarks.index_probe` (the files index's probe): facts from
`benchmarks.datagen` spread evenly over users, every 10 consecutive facts one thread, and 2-3
word queries of the same vocabulary by users drawn at random, so the two probes compare.

* load 10^5 facts over 10^3 users with `PostgresIndex.rebuild` (COPY), then search: plain,
  with thread context 0.5 and, with `--vectors`, hybrid (the shipped model);
* `--big`: the same at 10^6 facts over 10^4 users, lexical only (encoding a million facts and
  building their HNSW graph would take most of an hour on two cores);
* the plan of one scoped search (the btree scope index) and, with `--vectors`, a nearest-
  neighbour query over every user with and without the HNSW index;
* `--stems`: how many English words of the repository (docs, README, code, test data) the
  index's stemmer (`search_stem`, Snowball `porter`) and PostgreSQL's `english` stemmer each
  stem differently from FTS5's porter tokenizer, and the first few of them.

Without `--url` (or DEERFLOW_TEST_DATABASE_URL) an embedded PostgreSQL 18 with pgvector is
started in a temporary directory, as the tests do.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.postgres_server import postgres_backend_config, running_postgres

from benchmarks.datagen import AGENT, query_plan
from benchmarks.index_probe import corpus, show, timed
from deerflow.agents.memory.backends.deermem.deermem.config import parse_config
from deerflow.agents.memory.backends.deermem.deermem.embeddings import Embedder
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import open_pool
from deerflow.agents.memory.backends.deermem.deermem.postgres.index import PostgresIndex


def probe(url: str, n_facts: int, n_users: int, queries: int, *, vectors: bool) -> dict[str, Any]:
    """Load `n_facts` over `n_users` into a fresh schema and time searches."""
    config = parse_config(postgres_backend_config(url, Path("."), database_pool_size=2))
    model = Embedder() if vectors else None
    results: dict[str, Any] = {"facts": n_facts, "users": n_users, "vectors": vectors}
    with open_pool(config) as pool:
        index = PostgresIndex(pool, model)
        start = time.perf_counter()
        index.rebuild(corpus(n_facts, n_users, threads=True))
        results["load_s"] = round(time.perf_counter() - start, 1)
        with pool.connection() as conn:
            conn.execute("ANALYZE")
            (size,) = conn.execute("SELECT pg_total_relation_size('search_facts')").fetchone() or (
                0,
            )
        results["table_mb"] = round(int(size) / 2**20, 1)
        print(
            f"{n_facts} facts, {n_users} users: loaded in {results['load_s']} s,"
            f" {results['table_mb']} MiB with indexes"
        )
        plan = query_plan([f"u{u}" for u in range(n_users)], queries)

        def search(thread_context: float) -> dict[str, float]:
            def one(i: int) -> object:
                user, query = plan[i]
                return index.search(user, AGENT, query, limit=5, thread_context=thread_context)

            for i in range(min(200, queries)):  # warm the pool's connections and the cache
                one(i)
            return timed(queries, one)

        for name, share in (("search", 0.0), ("search, thread context 0.5", 0.5)):
            results[name] = search(share)
            label = f"{name}{' (hybrid)' if vectors else ''}"
            print(f"  {label:<40} {show(results[name])}")
        with pool.connection() as conn:
            user = plan[0][0]
            explained = conn.execute(
                "EXPLAIN (ANALYZE, COSTS OFF) SELECT id FROM search_facts"
                " WHERE user_key = %s AND agent = %s ORDER BY id",
                (user, AGENT),
            ).fetchall()
            results["scope_plan"] = [row[0] for row in explained]
            print("  scoped read:", " / ".join(line.strip() for (line,) in explained[:2]))
            if vectors and model is not None:
                results.update(_global_nearest(conn, model))
        index.close()
    return results


def _global_nearest(conn: Any, model: Embedder) -> dict[str, Any]:
    """A nearest-neighbour query over every user, with and without the HNSW index."""
    vector = "[" + ",".join(map(str, _floats(model.encode(["which city"])[0]))) + "]"
    (schema,) = conn.execute(
        "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'"
    ).fetchone()
    sql = (
        f"SELECT fact_id FROM search_facts ORDER BY embedding OPERATOR({schema}.<#>)"
        f" %s::{schema}.vector LIMIT 10"
    )
    found: dict[str, Any] = {}
    for name, setting in (("global_nearest_hnsw", "on"), ("global_nearest_scan", "off")):
        conn.execute(f"SET enable_indexscan = {setting}")
        times = []
        for _ in range(20):
            start = time.perf_counter()
            conn.execute(sql, (vector,), prepare=False).fetchall()  # a plan per setting
            times.append((time.perf_counter() - start) * 1000)
        found[name] = round(sorted(times)[10], 2)
        print(f"  nearest 10 over all users, index scan {setting}: p50 {found[name]} ms")
    conn.execute("RESET enable_indexscan")
    return found


def stem_differences(url: str, root: Path) -> dict[str, Any]:
    """Words stemmed otherwise than by FTS5, by the index's stemmer and by `english_stem`."""
    paths = [*root.glob("docs/*.md"), root / "README.md", *root.glob("src/**/*.py")]
    paths += root.glob("tests/deermem/data/*.json")
    text = " ".join(path.read_text(errors="replace") for path in paths)
    words = sorted({word.lower() for word in re.findall(r"[A-Za-z]+", text)})
    fts = sqlite3.connect(":memory:")
    fts.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='porter unicode61')")
    fts.executemany("INSERT INTO t (rowid, body) VALUES (?, ?)", enumerate(words))
    fts.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    expected = {words[row]: term for term, row in fts.execute("SELECT term, doc FROM v")}
    config = parse_config(postgres_backend_config(url, Path("."), database_pool_size=1))
    found: dict[str, Any] = {"words": len(words)}
    with open_pool(config) as pool:
        PostgresIndex(pool).close()  # creates search_stem
        with pool.connection() as conn:
            # English stemming without its stop words, which the comparison is not about.
            conn.execute(
                "CREATE TEXT SEARCH DICTIONARY english_words"
                " (TEMPLATE = snowball, Language = english)"
            )
            for name, stem in (
                ("porter", "search_stem(w)"),
                (
                    "english",
                    "CASE WHEN octet_length(w) < 3 THEN w"
                    " ELSE (ts_lexize('english_words', w))[1] END",
                ),
            ):
                rows = conn.execute(
                    f"SELECT w, {stem} FROM unnest(%s::text[]) AS w", (words,)
                ).fetchall()
                differ = [(w, expected[w], s) for w, s in rows if expected[w] != s]
                found[name] = {"differ": len(differ), "first": differ[:10]}
                print(
                    f"  {name}: {len(differ)} of {len(words)} words stemmed otherwise than"
                    f" by FTS5, e.g. {differ[:4]}"
                )
    return found


def _floats(vector: bytes) -> list[float]:
    from array import array

    return list(array("f", vector))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--big", action="store_true", help="also 10^6 facts over 10^4 users")
    parser.add_argument("--vectors", action="store_true", help="hybrid search at 10^5")
    parser.add_argument("--stems", action="store_true", help="only compare the stemmers")
    parser.add_argument("--url", help="a PostgreSQL server with pgvector (default: embedded)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    figures = []
    with ExitStack() as stack:
        url = args.url or stack.enter_context(running_postgres())
        if args.stems:
            figures.append(stem_differences(url, Path(__file__).resolve().parent.parent))
            args.big = args.vectors = False
        else:
            figures.append(probe(url, 100_000, 1000, args.queries, vectors=False))
        if args.vectors:
            figures.append(probe(url, 100_000, 1000, args.queries, vectors=True))
        if args.big:
            figures.append(probe(url, 1_000_000, 10_000, args.queries, vectors=False))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
