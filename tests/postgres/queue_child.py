"""Child processes for the PostgreSQL queue's crash tests: a replica that dies mid-work.

python -m tests.postgres.queue_child stall URL SCHEMA RECORD
    puts one urgent item, records it in RECORD when `process` starts, prints "processing" and
    never returns from `process`, until killed.
python -m tests.postgres.queue_child commit-then-die URL SCHEMA RECORD
    puts one urgent item; `process` records it in RECORD (standing for the extraction's
    commit) and then kills its own process with SIGKILL, before the queue finishes the item.

python -m tests.postgres.queue_child drain URL SCHEMA RECORD
    prints "ready" and runs a worker that processes every item (10 ms of work, then a line in
    RECORD standing for the extraction's commit), until killed.

All use a one-second lease, so that another queue takes the item a second after the death.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from deerflow.agents.memory.backends.deermem.deermem.config import parse_config
from deerflow.agents.memory.backends.deermem.deermem.engine import QueueSettings
from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import QueueItem, QueueKey
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import open_pool
from deerflow.agents.memory.backends.deermem.deermem.postgres.queue import PostgresQueue
from tests.deermem.queue_child import conversation, identity, recorder

LEASE_S = 1.0


def main(command: str, url: str, schema: str, record: Path) -> None:
    config = parse_config(
        {
            "storage_path": tempfile.mkdtemp(),
            "storage": "postgres",
            "database_url": url,
            "database_schema": schema,
        }
    )
    record_item = recorder(record)

    def process(item: QueueItem) -> None:
        if command == "drain":
            time.sleep(0.01)
            record_item(item)
            return
        record_item(item)
        if command == "commit-then-die":
            os.kill(os.getpid(), signal.SIGKILL)
        print("processing", flush=True)
        threading.Event().wait()

    settings = QueueSettings(
        process=process,
        identity=identity,
        debounce_seconds=0.0,
        max_wait_seconds=0.0,
        max_depth=0,
    )
    queue = PostgresQueue(open_pool(config), settings, lease_seconds=LEASE_S)
    if command == "drain":
        print("ready", flush=True)
    else:
        queue.put_now(QueueKey(command, "crash"), conversation(2), signals=["goal"])
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]))
