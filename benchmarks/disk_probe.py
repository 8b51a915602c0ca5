"""Probe what the disk charges for the syncs a DeerMem commit makes.

    uv run python -m benchmarks.disk_probe [--samples 200] [--dir DIR] [--json out.json]

Prints one table (ms per case, p50 / p95 / p99 / max). Put `--dir` on the disk you deploy on
(default: a temporary directory under /tmp). The cases mirror a commit's steps:

* journal: a 3 kB write over the start of a kept file, fdatasync (the journal is never
  truncated, so its write needs no new blocks);
* N new files + directory, threads: N 400-byte files created in one directory, each fdatasync'd
  and the directory fsync'd, all issued at once from N + 1 threads (`SyncBatch.sync`);
* N new files + directory, one by one: the same syncs issued one after another;
* directory, nothing changed: an fsync of a directory with no pending entry;
* rename + directory: a temp file renamed over a kept file, then the directory fsync'd;
* unlink of a synced file: removing a file whose blocks are on the disk (no sync).

If the "threads" rows grow with N about as fast as the "one by one" rows, the disk serialises
flushes and a commit's cost follows the number of files it touches, not the number of waits
(docs/benchmarks.md, "Syncs in the background").
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.timing import summarize, time_calls
from deerflow.agents.memory.backends.deermem.deermem.core.atomic import fsync_dir

FILE_BYTES = b"x" * 400
JOURNAL_BYTES = 3000
BATCH_SIZES = (1, 2, 3, 5)


def new_file(directory: Path) -> int:
    fd = os.open(directory / uuid.uuid4().hex, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, FILE_BYTES)
    return fd


def sync_and_close(fd: int) -> None:
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def cases(root: Path, pool: ThreadPoolExecutor, samples: int) -> dict[str, Callable[[int], None]]:
    """Each case's call, by label; what they need is set up in `root` first."""
    journal = os.open(root / "journal", os.O_RDWR | os.O_CREAT, 0o600)
    os.write(journal, b"\0" * 65536)
    os.fsync(journal)
    files = root / "files"
    files.mkdir()
    kept = root / "kept"
    kept.mkdir()
    (kept / "memory.json").write_bytes(FILE_BYTES)
    doomed = root / "doomed"
    doomed.mkdir()

    def write_journal(i: int) -> None:
        os.pwrite(journal, os.urandom(JOURNAL_BYTES), 0)
        os.fdatasync(journal)

    def batch(count: int, threads: bool) -> Callable[[int], None]:
        def run(i: int) -> None:
            actions: list[Callable[[], None]] = [
                *(functools.partial(sync_and_close, new_file(files)) for _ in range(count)),
                functools.partial(fsync_dir, files),
            ]
            if threads:
                for future in [pool.submit(action) for action in actions]:
                    future.result()
            else:
                for action in actions:
                    action()

        return run

    def rename(i: int) -> None:
        temp = kept / f".memory.json.{i}.tmp"
        temp.write_bytes(FILE_BYTES)
        os.replace(temp, kept / "memory.json")
        fsync_dir(kept)

    def unlink(i: int) -> None:
        os.unlink(doomed / str(i))

    for i in range(samples):  # every file to unlink has its blocks on the disk
        fd = os.open(doomed / str(i), os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, FILE_BYTES)
        sync_and_close(fd)
    fsync_dir(doomed)

    table: dict[str, Callable[[int], None]] = {"journal": write_journal}
    for count in BATCH_SIZES:
        table[f"{count} new file(s) + directory, threads"] = batch(count, threads=True)
        table[f"{count} new file(s) + directory, one by one"] = batch(count, threads=False)
    table["directory, nothing changed"] = lambda i: fsync_dir(kept)
    table["rename + directory"] = rename
    table["unlink of a synced file"] = unlink
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: /tmp)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(dir=args.dir or "/tmp") as workdir,
        ThreadPoolExecutor(8) as pool,
    ):
        rows: dict[str, Any] = {
            label: summarize(time_calls(args.samples, call))
            for label, call in cases(Path(workdir), pool, args.samples).items()
        }
    output = Table(title=f"disk probe in {args.dir or '/tmp'} (ms, {args.samples} samples)")
    for column in ("case", "p50", "p95", "p99", "max"):
        output.add_column(column, justify="left" if column == "case" else "right")
    for label, row in rows.items():
        output.add_row(label, *(f"{row[key]:.3f}" for key in ("p50", "p95", "p99", "max")))
    Console().print(output)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
