"""Probe the DeerMem retrieval index: search latency, apply cost, rebuild time and memory.

    uv run python -m benchmarks.index_probe [--queries 2000] [--json out.json] [--big]

Prints one table (times in ms). Facts come from `benchmarks.datagen`, a seeded generator shaped
like the baseline's (12 templates over word lists, 0.55..0.99 confidence, 8 categories); queries
are 2-3 words of the same vocabulary, so common words match many facts of every user, as in real
use. This probe looks at the bare index; `benchmarks.deermem_bench` measures through the manager.

* search over 10^3 users at 10^3, 10^4 and 10^5 facts (each user's bucket grows too); at 10^5
  also with thread context 0.5 (`retrieval_thread_context`), every 10 facts of a user one thread;
* search by one user of 100 facts among 10^3..10^5 facts of others (only others' data grows);
* apply of one new fact (a user of 100 facts) with 10^2, 10^3 and 10^5 rows in the index;
* "[alt]": the same scoped queries on a bare FTS5 table, with and without FTS5's own bm25(),
  to show why the index computes BM25 over the scope instead;
* rebuild of 10^5 facts: wall time and peak RSS, in a fresh child process.

`--big` adds 10^6 facts to the one-user series (a few minutes more).
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from benchmarks.datagen import AGENT, make_fact, query_plan
from deerflow.agents.memory.backends.deermem.deermem.core.index import (
    IndexedFact,
    RetrievalIndex,
)


def corpus(
    n_facts: int, n_users: int, seed: int = 7, *, threads: bool = False
) -> Iterator[tuple[str, int, Iterator[IndexedFact]]]:
    """`n_facts` spread evenly over users `u0..u{n_users-1}`, generated lazily; with `threads`,
    every 10 consecutive facts are one conversation thread, in the order generated."""
    rng = random.Random(seed)
    per_user, extra = divmod(n_facts, n_users)
    counter = iter(range(n_facts))

    def fact(n: int) -> IndexedFact:
        made = make_fact(rng, n)
        if not threads:
            return made
        return replace(made, thread=f"thread {n // 10}", created_at=f"2026-01-01T00:00:{n % 10}Z")

    for u in range(n_users):
        count = per_user + (1 if u < extra else 0)
        yield f"u{u}", 1, (fact(next(counter)) for _ in range(count))


def timed(samples: int, call: Callable[[int], object]) -> dict[str, float]:
    """p50, p95, p99 and mean of `call(i)`, in milliseconds."""
    times = []
    for i in range(samples):
        start = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - start) * 1000)
    cuts = statistics.quantiles(times, n=100)
    return {"p50": cuts[49], "p95": cuts[94], "p99": cuts[98], "mean": statistics.mean(times)}


def show(stats: dict[str, float]) -> str:
    return "  ".join(f"{name} {value:.3f}" for name, value in stats.items()) + "  (ms)"


def search_latency(
    index: RetrievalIndex, users: list[str], queries: int, thread_context: float = 0.0
) -> dict[str, float]:
    plan = query_plan(users, queries)

    def search(i: int) -> object:
        return index.search(plan[i][0], AGENT, plan[i][1], thread_context=thread_context)

    for i in range(200):  # warm the page cache, as a running server would have it
        search(i)
    return timed(queries, search)


def apply_latency(index: RetrievalIndex, user: str, samples: int) -> dict[str, float]:
    revision = index.indexed_revision(user) or 1
    rng = random.Random(13)
    facts = [make_fact(rng, 10**9 + i) for i in range(samples)]
    return timed(samples, lambda i: index.apply(user, revision + 1 + i, [facts[i]], []))


def with_probe(others: int) -> Iterator[tuple[str, int, Iterator[IndexedFact]]]:
    """User `probe` with 100 facts, then `others` facts spread over 10^3 other users."""
    rng = random.Random(5)
    yield "probe", 1, (make_fact(rng, 10**10 + i) for i in range(100))
    yield from corpus(others, 1000)


def fts5_bm25_latency(path: Path, others: int, queries: int) -> dict[str, dict[str, float]]:
    """The road not taken: FTS5's own bm25() over the probe user's rowid range.

    A bare FTS5 table, rowid = user << 32 | n, with and without bm25() in the same scoped
    query: the difference is bm25()'s IDF walk over every user's postings.
    """
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    for number, (_, _, facts) in enumerate(with_probe(others)):
        rows = [((number << 32) | n, f.content) for n, f in enumerate(facts)]
        conn.executemany("INSERT INTO t (rowid, body) VALUES (?, ?)", rows)
    conn.execute("INSERT INTO t (t) VALUES ('optimize')")
    conn.commit()
    plan = [" OR ".join(f'"{w}"' for w in query.split()) for _, query in query_plan(["p"], queries)]
    scoped = "t MATCH ? AND rowid BETWEEN 0 AND 4294967295"
    results = {
        "scoped MATCH only": f"SELECT rowid FROM t WHERE {scoped}",
        "scoped MATCH + bm25()": f"SELECT rowid FROM t WHERE {scoped} ORDER BY bm25(t) LIMIT 5",
    }
    measured = {}
    for name, sql in results.items():

        def run(i: int, sql: str = sql) -> object:
            return conn.execute(sql, (plan[i],)).fetchall()

        measured[name] = timed(queries, run)
    conn.close()
    return measured


def peak_rss_mb() -> float:
    """VmHWM of this process in MB (ru_maxrss would carry over the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def rebuild_child(n_facts: int, path: Path) -> None:
    """Runs in a fresh process: rebuild `n_facts` over 10^3 users, print time and peak RSS."""
    index = RetrievalIndex(path)
    before_mb = peak_rss_mb()
    start = time.perf_counter()
    done = index.rebuild(corpus(n_facts, 1000))
    seconds = time.perf_counter() - start
    peak_mb = peak_rss_mb()
    index.close()
    print(json.dumps({"facts": done, "seconds": seconds, "rss_before": before_mb, "peak": peak_mb}))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--big", action="store_true", help="10^6 facts in the isolation runs")
    parser.add_argument("--rebuild-child", nargs=2, metavar=("N", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rebuild_child:
        rebuild_child(int(args.rebuild_child[0]), Path(args.rebuild_child[1]))
        return

    results: dict[str, object] = {}
    rows: list[tuple[str, str]] = []

    def record(key: str, label: str, stats: dict[str, float]) -> None:
        results[key] = stats
        rows.append((label, show(stats)))

    sizes = (10**3, 10**4, 10**5, *((10**6,) if args.big else ()))
    with tempfile.TemporaryDirectory() as tmp:
        users = [f"u{u}" for u in range(1000)]
        for n in sizes[:3]:
            index = RetrievalIndex(Path(tmp) / f"spread{n}.sqlite3")
            index.rebuild(corpus(n, 1000))
            record(
                f"search_{n}",
                f"search, {n} facts / 1000 users",
                search_latency(index, users, args.queries),
            )
            index.close()
        index = RetrievalIndex(Path(tmp) / "threads.sqlite3")
        index.rebuild(corpus(10**5, 1000, threads=True))
        for share in (0.0, 0.5):
            record(
                f"search_threads_{share}",
                f"search, 10^5 facts in threads / 1000 users, thread context {share}",
                search_latency(index, users, args.queries, thread_context=share),
            )
        index.close()

        for others in sizes:
            index = RetrievalIndex(Path(tmp) / f"probe{others}.sqlite3")
            index.rebuild(with_probe(others))
            stats = search_latency(index, ["probe"], args.queries)
            record(f"search_probe_{others}", f"search, 100-fact user + {others} others", stats)
            index.close()

        for rows_before in (10**2, 10**3, 10**5):
            index = RetrievalIndex(Path(tmp) / f"apply{rows_before}.sqlite3")
            index.rebuild(corpus(rows_before, max(1, rows_before // 100)))
            stats = apply_latency(index, "u0", 1000)
            record(f"apply_{rows_before}", f"apply 1 fact, index of {rows_before} rows", stats)
            index.close()

        for others in sizes[1:]:
            for name, stats in fts5_bm25_latency(
                Path(tmp) / f"bm25_{others}.sqlite3", others, args.queries
            ).items():
                record(f"fts5_{name}_{others}", f"[alt] {name}, probe + {others} others", stats)

        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.index_probe",
                "--rebuild-child",
                "100000",
                f"{tmp}/rebuild.sqlite3",
            ],
            cwd=Path(__file__).resolve().parents[1],
            check=True,
            capture_output=True,
            text=True,
        )
        rebuilt = json.loads(child.stdout)
        results["rebuild_100000"] = rebuilt
        rows.append(
            (
                "rebuild 10^5 facts, fresh process",
                f"{rebuilt['seconds']:.2f} s, peak RSS {rebuilt['peak']:.0f} MB "
                f"(after imports {rebuilt['rss_before']:.0f} MB)",
            )
        )

    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
