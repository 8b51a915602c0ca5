"""Replicas: the gateway's throughput and latency under one mixed load, through 1 and 3 replicas.

    uv run python -m benchmarks.replicas_bench [--engine files|postgres ...] [--quick]
        [--json PATH] [--png PATH] [--markdown PATH]

(`make bench` runs it after the gateway benchmark: `benchmarks/results/replicas.*`.)

For each engine, and each replica count (1, then 3), real `deerflow serve` processes listen on
loopback ports over ONE fresh memory: a `storage_path` in a temporary directory for `files`, a
fresh schema of an embedded PostgreSQL (started here, `tests/postgres_server.py`) for `postgres`.
They authenticate by token (three users) and chat with a scripted model (no LLM cost; a turn
costs the agent, the memory injection and the queueing of its extraction, and the extraction
itself runs in the replicas' queue workers, debounced by 1 s).

The load is fixed, the same for every run: per user, `facts` fact lifecycles (create, read back,
every third edited, every fifth deleted), `chats` chat turns and `reads` reads (`GET
/api/memory` and searches), shuffled with a fixed seed and sent by `clients` threads, each
request through the next replica in turn. Before it, each replica answers one chat turn and one
read per user, unrecorded (building the agent, opening the user). Reported per run: requests per
second (all requests of the load over its wall time), latency p50/p95/p99 overall and per
route, and every request that did not succeed. The clients run in this process, the servers in
others, on the same machine: they compete for CPU, which the numbers include.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests.gateway.replicas import (
    USERS,
    Call,
    Fleet,
    Outcome,
    chat,
    failures,
    issue_tokens,
    mixed_load,
    read,
    replica_config,
    run,
    running_replicas,
    shared_memory,
)
from tests.postgres_server import running_postgres

from benchmarks.load_report import add_output_options, header, publish
from benchmarks.timing import summarize

ENGINES: Final = ("files", "postgres")
REPLICA_COUNTS: Final = (1, 3)
DEBOUNCE_SECONDS: Final = 1.0


@dataclass
class Settings:
    facts: int = 150
    chats: int = 20
    reads: int = 150
    clients: int = 16


QUICK: Final = Settings(facts=6, chats=2, reads=6, clients=4)


def measure_engine(engine: str, settings: Settings) -> list[dict[str, Any]]:
    """The load through each replica count, over a fresh memory each time."""
    measured = []
    with ExitStack() as stack:
        url = stack.enter_context(running_postgres()) if engine == "postgres" else None
        for count in REPLICA_COUNTS:
            with tempfile.TemporaryDirectory(prefix="deerflow-replicas-bench-") as workdir:
                backend = shared_memory(engine, Path(workdir) / "store", url)
                measured.append(measure(engine, count, backend, settings, Path(workdir)))
    return measured


def warm_up(fleet: Fleet) -> None:
    """Each replica builds its agent and opens each user before the clock starts."""
    outcome = Outcome()
    for replica in range(len(fleet.urls)):
        for user in USERS:
            chat(fleet, outcome, user, 1000 + replica, replica)
            read(fleet, user, replica)


def route_summaries(calls: list[Call]) -> dict[str, dict[str, float]]:
    by_route: dict[str, list[float]] = {}
    for call in calls:
        by_route.setdefault(call.route, []).append(call.ms)
    return {route: rounded(summarize(ms)) for route, ms in sorted(by_route.items())}


def rounded(summary: dict[str, Any]) -> dict[str, Any]:
    return {
        key: round(value, 2) if isinstance(value, float) else value
        for key, value in summary.items()
    }


def measure(
    engine: str, replicas: int, backend: dict[str, Any], settings: Settings, workdir: Path
) -> dict[str, Any]:
    config = replica_config(workdir, backend, DEBOUNCE_SECONDS)
    tokens = issue_tokens(workdir / "home")
    with running_replicas(replicas, config, workdir / "home") as servers:
        fleet = Fleet([server.base_url for server in servers], tokens)
        try:
            warm_up(fleet)
            fleet.calls.clear()
            work = mixed_load(
                fleet, Outcome(), facts=settings.facts, chats=settings.chats, reads=settings.reads
            )
            started = time.perf_counter()
            run(work, settings.clients)
            elapsed = time.perf_counter() - started
        finally:
            fleet.close()
    calls = fleet.calls
    return {
        "engine": engine,
        "replicas": replicas,
        "requests": len(calls),
        "seconds": round(elapsed, 2),
        "per_second": round(len(calls) / elapsed, 1),
        **rounded(summarize([call.ms for call in calls])),
        "errors": failures(calls),
        "routes": route_summaries(calls),
    }


# -- report ----------------------------------------------------------------------------------------

_COLUMNS: Final = (
    "engine",
    "replicas",
    "requests",
    "req/s",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "errors",
)


def rows(results: dict[str, Any]) -> list[list[str]]:
    return [
        [
            run_["engine"],
            str(run_["replicas"]),
            str(run_["requests"]),
            f"{run_['per_second']:.0f}",
            f"{run_['p50']:.1f}",
            f"{run_['p95']:.1f}",
            f"{run_['p99']:.1f}",
            ", ".join(f"{key}: {n}" for key, n in run_["errors"].items()) or "0",
        ]
        for run_ in results["runs"]
    ]


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    labels = [
        f"{r['engine']}\n{r['replicas']} replica{'s' if r['replicas'] > 1 else ''}" for r in runs
    ]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(labels, [r["per_second"] for r in runs], color="#1f5fbf")
    left.set_title(f"requests/s, {results['settings']['clients']} clients, mixed load")
    right.bar(labels, [r["p99"] for r in runs], color="#b3261e")
    right.set_title("p99 latency (ms)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--engine", action="append", choices=ENGINES, help="repeatable; default files"
    )
    parser.add_argument("--quick", action="store_true", help="a small load (smoke test)")
    parser.add_argument("--clients", type=int, help="concurrent client threads")
    add_output_options(parser)
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    if args.clients is not None:
        settings.clients = args.clients

    load_before = os.getloadavg()
    runs = []
    for engine in args.engine or ["files"]:
        runs += measure_engine(engine, settings)
    settings_ = vars(settings) | {"users": len(USERS), "debounce_seconds": DEBOUNCE_SECONDS}
    results = header("replicas", args.quick, settings_, load_before) | {"runs": runs}
    publish(
        results,
        "deerflow serve replicas over one memory, loopback",
        _COLUMNS,
        rows(results),
        args,
        chart,
    )


if __name__ == "__main__":
    main()
