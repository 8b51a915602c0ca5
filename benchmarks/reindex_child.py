"""A full `reindex` in a fresh process, run by `deermem_bench`: wall time and peak RSS.

    python benchmarks/reindex_child.py STORAGE_PATH

Prints one JSON line: facts indexed, seconds, and RSS (ru_maxrss, MB) after the imports, after
constructing the manager and at the end (the process's peak). With a terminal on stderr, a Rich
progress bar shows the facts indexed so far; Rich is imported either way, as the CLI would.
"""

import json
import resource
import sys
import time
from collections.abc import Callable

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def main() -> None:
    after_imports = peak_rss_mb()
    manager = DeerMemMemoryManager(backend_config={"storage_path": sys.argv[1], "max_facts": 500})
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

    start = time.perf_counter()
    try:
        facts = manager.reindex(report)
    finally:
        if progress is not None:
            progress.stop()
    seconds = time.perf_counter() - start
    manager.close()
    result = {
        "facts": facts,
        "seconds": seconds,
        "rss_after_imports_mb": after_imports,
        "rss_after_construct_mb": after_construct,
        "peak_rss_mb": peak_rss_mb(),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
