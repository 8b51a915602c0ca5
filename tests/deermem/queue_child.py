"""Child processes for the write-queue crash and multi-process tests.

python -m tests.deermem.queue_child put-loop JOURNAL PREFIX
    puts conversations of threads PREFIX0, PREFIX1, ... (debounce 60 s, so none is processed)
    and prints each number once its put has returned, until killed.
python -m tests.deermem.queue_child stall JOURNAL RECORD
    puts one urgent item, records it in RECORD when `process` starts, prints "processing"
    and never returns from `process`, until killed.
python -m tests.deermem.queue_child drain JOURNAL RECORD GO
    prints "ready", waits for the file GO, then runs a worker that records every item it
    processes in RECORD, and exits once the journal is empty.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import (
    DurableQueue,
    QueueItem,
    QueueKey,
)


def conversation(count: int) -> list[dict[str, Any]]:
    """`count` alternating user/assistant turns with ids m0, m1, ..."""
    return [
        {"id": f"m{n}", "role": "user" if n % 2 == 0 else "assistant", "text": f"turn {n}"}
        for n in range(count)
    ]


def identity(turn: dict[str, Any]) -> str:
    return str(turn["id"])


def recorder(record: Path) -> Any:
    """A `process` callback appending `pid thread_id turns` lines to `record`."""

    def process(item: QueueItem) -> None:
        line = f"{os.getpid()} {item.key.thread_id} {len(item.turns)}\n"
        fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line.encode())  # one O_APPEND write: lines of two processes never mix
        finally:
            os.close(fd)

    return process


def put_loop(journal: Path, prefix: str) -> None:
    queue = DurableQueue(
        journal, process=lambda item: None, identity=identity, debounce_seconds=60.0
    )
    n = 0
    while True:
        queue.put(QueueKey(f"{prefix}{n}", "crash"), conversation(4), signals=["goal"])
        print(n, flush=True)
        n += 1


def stall(journal: Path, record: Path) -> None:
    record_start = recorder(record)

    def process(item: QueueItem) -> None:
        record_start(item)
        print("processing", flush=True)
        threading.Event().wait()

    queue = DurableQueue(journal, process=process, identity=identity, debounce_seconds=0.0)
    queue.put_now(QueueKey("stalled", "crash"), conversation(2))
    threading.Event().wait()


def drain(journal: Path, record: Path, go: Path) -> None:
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.005)
    record_item = recorder(record)

    def process(item: QueueItem) -> None:
        record_item(item)
        time.sleep(0.01)  # an LLM call takes a while: let the other process contend

    queue = DurableQueue(journal, process=process, identity=identity, debounce_seconds=0.0)
    deadline = time.monotonic() + 60
    while queue.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    queue.close()


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "put-loop":
        put_loop(Path(args[0]), args[1])
    elif command == "stall":
        stall(Path(args[0]), Path(args[1]))
    else:
        drain(Path(args[0]), Path(args[1]), Path(args[2]))
