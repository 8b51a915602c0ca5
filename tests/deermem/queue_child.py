"""Child processes for the write-queue crash and multi-process tests.

python -m tests.deermem.queue_child put-loop JOURNAL PREFIX
    puts conversations of threads PREFIX0, PREFIX1, ... (debounce 60 s, so none is processed)
    and prints each number once its put has returned, until killed.
python -m tests.deermem.queue_child grow JOURNAL RECORD THREAD
    puts the first 2 turns of THREAD, then extends it by one turn at a time, printing the number
    of turns once each call has returned, until killed; its worker extracts along the way
    (debounce 10 ms, at most 50 ms), recording each item in RECORD.
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
    """A `process` callback appending `pid thread_id turns first_id last_id` lines to `record`."""

    def process(item: QueueItem) -> None:
        ends = f"{identity(item.turns[0])} {identity(item.turns[-1])}"
        line = f"{os.getpid()} {item.key.thread_id} {len(item.turns)} {ends}\n"
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


def grow(journal: Path, record: Path, thread: str) -> None:
    record_item = recorder(record)

    def process(item: QueueItem) -> None:
        record_item(item)
        time.sleep(0.002)  # an LLM call takes a while: let kills land inside it too

    queue = DurableQueue(
        journal, process=process, identity=identity, debounce_seconds=0.01, max_wait_seconds=0.05
    )
    key = QueueKey(thread, "crash")
    queue.put(key, conversation(2))
    print(2, flush=True)
    n = 2
    while True:
        turn = {"id": f"m{n}", "role": "user" if n % 2 == 0 else "assistant", "text": f"turn {n}"}
        if not queue.extend(key, [turn], after=f"m{n - 1}"):
            raise AssertionError(f"m{n - 1} is not the cursor of {key}")
        n += 1
        print(n, flush=True)


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
    elif command == "grow":
        grow(Path(args[0]), Path(args[1]), args[2])
    elif command == "stall":
        stall(Path(args[0]), Path(args[1]))
    else:
        drain(Path(args[0]), Path(args[1]), Path(args[2]))
