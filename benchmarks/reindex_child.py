"""A full `reindex` in a fresh process, run by `deermem_bench`: wall time and peak RSS.

    python benchmarks/reindex_child.py STORAGE_PATH [--lexical]

Prints one JSON line: facts indexed, seconds (split into reading + parsing the fact files, i.e.
time inside `FileMemoryStorage.scan`, which `reindex` calls once per user, and the rest: listing
the users and building the index), how many times `scan` and `reload` were called (`reload` must
stay at 0: it would fill the read cache), how many facts the storage's read cache holds
afterwards, and the peak RSS in MB (VmHWM of /proc/self/status) after the imports, after
constructing the manager and at the end, plus the RSS at the end.
`ru_maxrss` is not used: Linux carries the launching process's high-water mark across exec, so a
big parent would inflate it; VmHWM belongs to this process's own address space. With a terminal
on stderr, a Rich progress bar shows the facts indexed so far; Rich is imported either way, as
the CLI would.
"""

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager


def status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmHWM: peak RSS, VmRSS: current RSS) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_rss_mb() -> float:
    return status_mb("VmHWM")


def timed(method: Callable[..., Any], total: dict[str, float]) -> Callable[..., Any]:
    """`method`, adding the seconds spent in it to `total["seconds"]` and counting its calls."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            total["seconds"] += time.perf_counter() - started
            total["calls"] += 1

    return wrapper


def main() -> None:
    after_imports = peak_rss_mb()
    config = {"storage_path": sys.argv[1], "max_facts": 500}
    if "--lexical" in sys.argv[2:]:  # otherwise the index's vectors are rebuilt too
        config["retrieval_embeddings"] = False
    manager = DeerMemMemoryManager(backend_config=config)
    after_construct = peak_rss_mb()
    progress: Progress | None = None
    report: Callable[[int], None] | None = None
    if sys.stderr.isatty():
        progress = Progress(
            SpinnerColumn(),
            TextColumn("reindex"),
            BarColumn(),
            TextColumn("{task.completed} facts"),
            TimeElapsedColumn(),
            transient=True,
        )
        task = progress.add_task("reindex", total=None)
        progress.start()
        bar = progress
        report = lambda done: bar.update(task, completed=done)  # noqa: E731

    storage = manager.storage
    # `reindex` reads every user through `scan` (it bypasses the read cache); `scan` is timed as
    # "reading + parsing". `reload` (the cached read) is only counted: a call would mean reindex
    # fills the cache again, and its time would be inside `scan` if `scan` called it.
    reading = {"seconds": 0.0, "calls": 0}
    reloads = {"seconds": 0.0, "calls": 0}
    storage.scan = timed(storage.scan, reading)  # type: ignore[attr-defined]
    storage.reload = timed(storage.reload, reloads)  # type: ignore[method-assign]
    start = time.perf_counter()
    try:
        facts = manager.reindex(report)
    finally:
        if progress is not None:
            progress.stop()
    seconds = time.perf_counter() - start
    cached = getattr(storage, "_buckets", {})
    manager.close()
    result = {
        "facts": facts,
        "seconds": seconds,
        "reading_files_seconds": reading["seconds"],
        "indexing_seconds": seconds - reading["seconds"],
        "scan_calls": reading["calls"],
        "reload_calls": reloads["calls"],
        "facts_left_in_storage_cache": sum(len(bucket.facts) for bucket in cached.values()),
        "rss_after_imports_mb": after_imports,
        "rss_after_construct_mb": after_construct,
        "peak_rss_mb": peak_rss_mb(),
        "rss_at_end_mb": status_mb("VmRSS"),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
