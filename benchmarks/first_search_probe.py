"""A user's first search at 10^5 facts over 10^3 users, alone, repeatable (docs/benchmarks.md).

`deermem_bench --only stores` measures this series (`spread/pass1`) among much else; this probe
measures only it, so a change to the first search can be judged in minutes: it builds the store
once (as `deermem_bench` does: 10^5 facts of its data recipe over 10^3 users, then `reindex`),
keeps it in `--workdir`, and runs the pass `--runs` times, each in a fresh manager (so every
user's first search reads its rows and vectors, as after a restart):
1,000 `search(top_k=5)` calls over users drawn at random, then the same calls again (pass 2).
It reports each run and the median of the runs' p50 and p99, in wall time and in the CPU time
the searching thread spent (on a shared machine the wall time's tail is mostly other processes
holding the CPU), with a cProfile of one more pass 1 (`--profile`). Usage:

    uv run python -m benchmarks.first_search_probe [--workdir DIR] [--runs 3] [--json PATH]
        [--profile] [--lexical] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from benchmarks.datagen import query_plan, spread
from benchmarks.deermem_bench import (
    FULL,
    QUICK,
    Plan,
    ingest,
    open_manager,
    source_info,
    store_users,
    with_cpu,
)
from benchmarks.timing import summarize, time_calls

FACTS: Final = 10**5
QUICK_FACTS: Final = 10**3  # `--quick`: over `QUICK`'s 50 users, for the smoke test
READY: Final = "probe-ready"  # marks a store that was built completely


def build(root: Path, plan: Plan, facts: int) -> None:
    """The store under `root` with its index, unless an earlier run finished it."""
    if (root / READY).exists():
        return
    ingest(root, store_users(plan, facts), plan.workers)
    manager = open_manager(root, plan)
    manager.reindex()
    manager.close()
    (root / READY).touch()


def run(root: Path, plan: Plan, facts: int, runs: int, profile: bool) -> dict[str, Any]:
    users = [f"u{n}" for n, _ in spread(facts, plan.spread_users)]
    queries = query_plan(users, plan.spread_queries, seed=11)
    results: list[dict[str, Any]] = []
    for _ in range(runs):
        manager = open_manager(root, plan)
        counts: list[int] = []

        def search(i: int, manager: Any = manager, counts: list[int] = counts) -> None:
            user, query = queries[i]
            counts.append(len(manager.search(query, top_k=5, user_id=user)))

        cpu1: list[float] = []
        cpu2: list[float] = []
        pass1 = time_calls(len(queries), with_cpu(search, cpu1))
        pass2 = time_calls(len(queries), with_cpu(search, cpu2))
        manager.close()
        results.append(
            {
                "pass1": summarize(pass1),
                "pass2": summarize(pass2),
                "pass1_cpu": summarize(cpu1),
                "pass2_cpu": summarize(cpu2),
                "mean_hits": sum(counts) / len(counts),
                "load_average": os.getloadavg(),
            }
        )
        print(
            f"pass 1 p50 {results[-1]['pass1']['p50']:.3f} p99 {results[-1]['pass1']['p99']:.3f}"
            f" | pass 2 p50 {results[-1]['pass2']['p50']:.3f}"
            f" p99 {results[-1]['pass2']['p99']:.3f} ms",
            file=sys.stderr,
        )
    report: dict[str, Any] = {
        "benchmark": "first_search_probe",
        "command": " ".join(["python", "-m", "benchmarks.first_search_probe", *sys.argv[1:]]),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source_info(),
        "facts": facts,
        "users": len(users),
        "queries": len(queries),
        "lexical": plan.lexical,
        "runs": results,
        "median": {
            f"{part}_{stat}": statistics.median(r[part][stat] for r in results)
            for part in ("pass1", "pass2", "pass1_cpu", "pass2_cpu")
            for stat in ("p50", "p99")
        },
    }
    if profile:
        manager = open_manager(root, plan)
        report["profile_pass1"] = _profile(manager, queries)
        manager.close()
    return report


def _profile(manager: Any, queries: list[tuple[str, str]]) -> dict[str, Any]:
    """cProfile of one pass 1 (every user's first search), its 25 costliest functions."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for user, query in queries:
        manager.search(query, top_k=5, user_id=user)
    profiler.disable()
    stats = pstats.Stats(profiler)
    table = stats.stats  # type: ignore[attr-defined]
    rows = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:25]
    return {
        "searches": len(queries),
        "top_own_time_us_per_search": [
            {
                "function": f"{Path(f).name}:{line}({name})",
                "own": own / len(queries) * 1e6,
                "cumulative": cumulative / len(queries) * 1e6,
            }
            for (f, line, name), (_, _, own, cumulative, _) in rows
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--workdir", type=Path, help="keep the store here (built once)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument("--profile", action="store_true", help="also profile one pass 1")
    parser.add_argument("--lexical", action="store_true", help="retrieval_embeddings: false")
    parser.add_argument("--quick", action="store_true", help="10^3 facts over 50 users")
    args = parser.parse_args(argv)
    plan = replace(QUICK if args.quick else FULL, lexical=args.lexical)
    facts = QUICK_FACTS if args.quick else FACTS
    with tempfile.TemporaryDirectory(prefix="first-search-") as tmp:
        root = args.workdir or Path(tmp)
        build(root, plan, facts)
        report = run(root, plan, facts, args.runs, args.profile)
    median = report["median"]
    print(
        f"median of {args.runs}: pass 1 p50 {median['pass1_p50']:.3f} p99 {median['pass1_p99']:.3f}"
        f" | pass 2 p50 {median['pass2_p50']:.3f} p99 {median['pass2_p99']:.3f} ms"
        f" | CPU pass 1 p50 {median['pass1_cpu_p50']:.3f} p99 {median['pass1_cpu_p99']:.3f} ms"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
