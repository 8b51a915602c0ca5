"""Probe the latency of DeerMem's durable write queue: what `add()` pays before it returns.

    uv run python -m benchmarks.queue_probe [--puts 2000] [--dir DIR] [--json out.json]
    uv run python -m benchmarks.queue_probe --database-url URL [--puts 2000] [--json out.json]

Prints one table (times in ms, p50 / p95 / p99 / max). Every put commits to a real SQLite journal in
`--dir` (default: a temporary directory; put it on the disk you deploy on, since the fsync rows
depend on the device). No worker runs: the probe times the put itself.

* new key: each put is a new thread of 10 turns (about 200 characters each);
* replace: puts of one thread whose conversation grows by 2 turns a put (after 2000 puts it is
  4000 turns long, but a watermark after every 20 turns keeps what is stored short);
* put_now: an urgent item of 10 turns;
* new key, idle worker: as "new key", with the worker running (each put wakes it; 30 s debounce);
* 8 threads: 8 threads putting new keys at once, per-put latency and total puts per second;
* each with `synchronous=NORMAL` (survives a process kill, the default) and with `fsync=True`
  (`synchronous=FULL`, survives power loss too).

With `--database-url` the same series run on the PostgreSQL queue instead (`storage: postgres`),
each in a fresh schema dropped afterwards; its durability is the server's (`synchronous_commit`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.timing import summarize, time_calls
from deerflow.agents.memory.backends.deermem.deermem.config import parse_config
from deerflow.agents.memory.backends.deermem.deermem.engine import QueueSettings, WriteQueue
from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import (
    DurableQueue,
    QueueItem,
    QueueKey,
)

TEXT = "The user mentioned they deploy on Kubernetes 1.29 and prefer Go for services. " * 3


def turns(start: int, count: int) -> list[dict[str, Any]]:
    return [{"id": f"m{n}", "role": "user", "text": TEXT} for n in range(start, start + count)]


def identity(turn: dict[str, Any]) -> str:
    return str(turn["id"])


def ignore(item: QueueItem) -> None:
    return None


def open_queue(path: Path, fsync: bool, *, worker: bool = False) -> DurableQueue:
    return DurableQueue(path, process=ignore, identity=identity, fsync=fsync, start=worker)


@contextmanager
def postgres_queues(url: str, scratch: str) -> Iterator[Callable[..., WriteQueue]]:
    """Opens PostgreSQL queues, each in a schema of its own; drops them all at the end."""
    from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import open_pool
    from deerflow.agents.memory.backends.deermem.deermem.postgres.queue import PostgresQueue

    opened: list[tuple[Any, PostgresQueue, str]] = []
    settings = QueueSettings(ignore, identity, 30.0, 120.0, 0)

    def open_one(*, worker: bool = False) -> WriteQueue:
        schema = f"queue_probe_{uuid.uuid4().hex[:12]}"
        config = {"storage_path": scratch, "storage": "postgres", "database_url": url}
        pool = open_pool(
            parse_config(config | {"database_schema": schema, "database_pool_size": 9})
        )
        opened.append((pool, PostgresQueue(pool, settings, start=worker), schema))
        return opened[-1][1]

    try:
        yield open_one
    finally:
        for pool, queue, schema in opened:
            queue.close()
            with pool.connection() as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            pool.close()


def new_keys(queue: WriteQueue, puts: int) -> list[float]:
    conversation = turns(0, 10)
    return time_calls(puts, lambda i: queue.put(QueueKey(f"new{i}", "bench"), conversation))


def replacing(queue: WriteQueue, puts: int) -> list[float]:
    key = QueueKey("long", "bench")
    conversation: list[dict[str, Any]] = []

    def grow(i: int) -> None:
        conversation.extend(turns(2 * i, 2))
        if i % 10 == 0:
            queue.flush(10)  # every 20 turns an extraction advances the watermark

    return time_calls(puts, lambda i: queue.put(key, conversation), before=grow)


def urgent(queue: WriteQueue, puts: int) -> list[float]:
    conversation = turns(0, 10)
    return time_calls(puts, lambda i: queue.put_now(QueueKey(f"now{i}", "bench"), conversation))


def threaded(queue: WriteQueue, puts: int, threads: int = 8) -> tuple[list[float], float]:
    conversation = turns(0, 10)
    samples: list[list[float]] = [[] for _ in range(threads)]

    def writer(t: int) -> None:
        for i in range(puts // threads):
            start = time.perf_counter()
            queue.put(QueueKey(f"w{t}-{i}", "bench"), conversation)
            samples[t].append((time.perf_counter() - start) * 1000)

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began
    flat = [sample for per_thread in samples for sample in per_thread]
    return flat, len(flat) / elapsed


def show(stats: dict[str, Any]) -> str:
    cuts = " / ".join(f"{stats[q]:.3f}" for q in ("p50", "p95", "p99", "max"))
    return f"{cuts}  (n={stats['n']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--puts", type=int, default=2000)
    parser.add_argument("--dir", type=Path, help="where the journals go (default: a temp dir)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--database-url", help="probe the PostgreSQL queue on this server")
    args = parser.parse_args()

    results: dict[str, Any] = {}
    rows: list[tuple[str, str]] = []
    if args.database_url:
        with tempfile.TemporaryDirectory() as tmp, postgres_queues(args.database_url, tmp) as make:
            series = {
                "new_key": new_keys(make(), args.puts),
                "replace": replacing(make(), args.puts),
                "put_now": urgent(make(), args.puts),
                "new_key_idle_worker": new_keys(make(worker=True), args.puts),
            }
            samples, rate = threaded(make(), args.puts)
        for name, times in {**series, "8_threads": samples}.items():
            stats = results[f"{name}_postgres"] = summarize(times)
            rows.append((f"{name.replace('_', ' ')}, PostgreSQL", show(stats)))
        results["8_threads_postgres"]["puts_per_second"] = rate
        rows.append(("8 threads, PostgreSQL: throughput", f"{rate:,.0f} puts/s"))
    else:
        probe_sqlite(args, results, rows)
    width = max(len(label) for label, _ in rows)
    print(f"{'put latency, ms':<{width}}  p50 / p95 / p99 / max")
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def probe_sqlite(
    args: argparse.Namespace, results: dict[str, Any], rows: list[tuple[str, str]]
) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for fsync in (False, True):
            mode = "FULL" if fsync else "NORMAL"
            puts = args.puts if not fsync else max(200, args.puts // 4)
            series = {
                "new_key": new_keys(open_queue(Path(tmp) / f"new-{mode}.sqlite3", fsync), puts),
                "replace": replacing(open_queue(Path(tmp) / f"rep-{mode}.sqlite3", fsync), puts),
                "put_now": urgent(open_queue(Path(tmp) / f"now-{mode}.sqlite3", fsync), puts),
            }
            if not fsync:
                with_worker = open_queue(Path(tmp) / "worker.sqlite3", fsync, worker=True)
                series["new_key_idle_worker"] = new_keys(with_worker, puts)
                with_worker.close()
            samples, rate = threaded(open_queue(Path(tmp) / f"thr-{mode}.sqlite3", fsync), puts)
            series["8_threads"] = samples
            for name, times in series.items():
                stats = summarize(times)
                results[f"{name}_{mode}"] = stats
                label = f"{name.replace('_', ' ')}, synchronous={mode}"
                rows.append((label, show(stats)))
            results[f"8_threads_{mode}"]["puts_per_second"] = rate
            rows.append((f"8 threads, synchronous={mode}: throughput", f"{rate:,.0f} puts/s"))


if __name__ == "__main__":
    main()
