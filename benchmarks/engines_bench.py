"""DeerMem's two engines side by side, through the public manager, in one run.

    uv run python -m benchmarks.engines_bench [--quick] [--large] [--engines files,postgres]
        [--json PATH] [--png PATH] [--markdown PATH]

(`make bench` runs it and writes `benchmarks/results/engines.{json,png,md}`.)

For each engine (files under a temporary directory; PostgreSQL in a temporary embedded server on
this machine, reached over its Unix socket), times in ms, each series with n, p50, p95, p99:

* create_fact into one bucket growing from 0 to 500 facts, by band of 100;
* get_context of a 500-fact bucket, uncached: an untimed update_fact before each call changes
  the revision, so the text is rendered again;
* search over 10^5 facts spread over 10^3 users (each user stored with one commit, then
  `reindex`), random users and 2-3 word queries; with `--large`, PostgreSQL also at 10^6 facts
  over 10^4 users.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.postgres_server import postgres_backend_config, running_postgres

from benchmarks.datagen import bulk_changes, query_plan, spread, user_facts
from benchmarks.timing import summarize, time_calls
from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager

Log = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    max_facts: int = 500
    band: int = 100
    context_samples: int = 100
    search_facts: tuple[tuple[int, int], ...] = ((100_000, 1_000),)
    large: tuple[tuple[int, int], ...] = ((1_000_000, 10_000),)
    queries: int = 1_000


QUICK = Plan(max_facts=60, band=20, context_samples=10, search_facts=((2_000, 20),), queries=50)


@contextmanager
def engine_config(engine: str, workdir: Path) -> Iterator[Callable[[str], dict[str, Any]]]:
    """A factory of fresh backend configs (one store per call) for `engine`."""
    if engine == "files":
        yield lambda name: {"storage_path": str(workdir / name)}
        return
    with running_postgres() as url:
        yield lambda name: postgres_backend_config(url, workdir / name)


def bench_create_fact(config: dict[str, Any], plan: Plan) -> dict[str, Any]:
    manager = DeerMemMemoryManager.from_config(config | {"max_facts": plan.max_facts})
    manager.warm()
    totals = []
    for fact in user_facts(1, plan.max_facts):
        start = time.perf_counter()
        manager.create_fact(fact.content, fact.category, fact.confidence, user_id="writer")
        totals.append((time.perf_counter() - start) * 1000)
    manager.close()
    return {
        f"{lo}-{lo + plan.band - 1}": summarize(totals[lo : lo + plan.band])
        for lo in range(0, plan.max_facts, plan.band)
    } | {"all": summarize(totals)}


def bench_context(config: dict[str, Any], plan: Plan) -> dict[str, Any]:
    manager = DeerMemMemoryManager.from_config(config | {"max_facts": plan.max_facts})
    manager.warm()
    user = "reader"
    manager.storage.save(user, bulk_changes(user_facts(2, plan.max_facts)))
    manager.get_context(user)
    fact_id = next(iter(manager.storage.load(user, None).facts))

    def bust(i: int) -> None:
        manager.update_fact(fact_id, confidence=0.6 + (i % 2) / 10, user_id=user)

    times = time_calls(plan.context_samples, lambda i: manager.get_context(user), before=bust)
    manager.close()
    return {str(plan.max_facts): summarize(times)}


def bench_search(config: dict[str, Any], facts: int, users: int, plan: Plan, log: Log) -> Any:
    manager = DeerMemMemoryManager.from_config(config | {"max_facts": 500})
    started = time.perf_counter()
    names = []
    for number, count in spread(facts, users):
        name = f"u{number}"
        manager.storage.save(name, bulk_changes(user_facts(number + 10, count)))
        names.append(name)
    stored = time.perf_counter() - started
    manager.reindex()
    indexed = time.perf_counter() - started - stored
    manager.warm()
    log(f"  {facts} facts over {users} users stored in {stored:.0f} s, indexed in {indexed:.0f} s")
    plan_queries = query_plan(names, plan.queries)

    def search(i: int) -> object:
        user, query = plan_queries[i]
        return manager.search(query, 10, user_id=user)

    first = time_calls(len(plan_queries), search)
    again = time_calls(len(plan_queries), search)
    manager.close()
    return {
        "facts": facts,
        "users": users,
        "store_s": round(stored, 1),
        "reindex_s": round(indexed, 1),
        "first_pass": summarize(first),
        "second_pass": summarize(again),
    }


def run(plan: Plan, engines: list[str], workdir: Path, log: Log, large: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for engine in engines:
        log(f"{engine}:")
        with engine_config(engine, workdir / engine) as config:
            part: dict[str, Any] = {}
            part["create_fact"] = bench_create_fact(config("create"), plan)
            log(f"  create_fact p50 {part['create_fact']['all']['p50']:.2f} ms")
            part["get_context_uncached"] = bench_context(config("context"), plan)
            sizes = plan.search_facts + (plan.large if large and engine == "postgres" else ())
            part["search"] = {
                f"{facts}/{users}": bench_search(config(f"search{facts}"), facts, users, plan, log)
                for facts, users in sizes
            }
            results[engine] = part
    return results


def markdown(results: dict[str, Any]) -> str:
    lines = ["| engine | measure | p50 ms | p99 ms |", "|---|---|---|---|"]
    for engine, part in results.items():
        for band, row in part["create_fact"].items():
            lines.append(f"| {engine} | create_fact {band} | {row['p50']:.2f} | {row['p99']:.2f} |")
        for size, row in part["get_context_uncached"].items():
            lines.append(
                f"| {engine} | get_context uncached {size} | {row['p50']:.2f} | {row['p99']:.2f} |"
            )
        for size, row in part["search"].items():
            for name in ("first_pass", "second_pass"):
                cell = row[name]
                lines.append(
                    f"| {engine} | search {size} {name.replace('_', ' ')} | {cell['p50']:.2f} "
                    f"| {cell['p99']:.2f} |"
                )
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for engine, part in results.items():
        bands = [band for band in part["create_fact"] if band != "all"]
        left.plot(bands, [part["create_fact"][b]["p50"] for b in bands], marker="o", label=engine)
        left.plot(
            bands,
            [part["create_fact"][b]["p99"] for b in bands],
            marker="x",
            linestyle="--",
            label=f"{engine} p99",
        )
    left.set(title="create_fact by bucket size", xlabel="facts in the bucket", ylabel="ms")
    left.legend()
    labels, p50s, p99s = [], [], []
    for engine, part in results.items():
        for size, row in part["search"].items():
            labels.append(f"{engine}\n{size}")
            p50s.append(row["second_pass"]["p50"])
            p99s.append(row["second_pass"]["p99"])
    positions = range(len(labels))
    right.bar([p - 0.2 for p in positions], p50s, width=0.4, label="p50")
    right.bar([p + 0.2 for p in positions], p99s, width=0.4, label="p99")
    right.set_xticks(list(positions), labels)
    right.set(title="search (facts/users)", ylabel="ms")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--large", action="store_true", help="PostgreSQL search at 10^6 facts")
    parser.add_argument("--engines", default="files,postgres", help="comma-separated")
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--png", type=Path, help="write a chart here (needs matplotlib)")
    parser.add_argument("--markdown", type=Path, help="write the table as Markdown here")
    args = parser.parse_args(argv)
    engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    unknown = sorted(set(engines) - {"files", "postgres"})
    if unknown:
        parser.error(f"unknown engines: {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="engines-bench-") as workdir:
        results = run(
            QUICK if args.quick else Plan(),
            engines,
            Path(workdir),
            lambda line: print(line, flush=True),
            args.large,
        )
    table = markdown(results)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(table)
    if args.png:
        plot(results, args.png)


if __name__ == "__main__":
    main()
