"""A child process that adds facts as point operations and reports what was acknowledged."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from deerflow.agents.memory.manager import MemoryConflictError
from tests.deermem.storage_helpers import create, fact, storage_at


def main(root: str, user: str, name: str, count: int) -> None:
    storage = storage_at(Path(root), file_lock_timeout_seconds=30)
    outcome: dict[str, list[str]] = {"committed": [], "conflicts": []}
    for i in range(count):
        record = fact(f"{name} fact {i}")
        try:
            create(storage, user, record)
        except MemoryConflictError:
            outcome["conflicts"].append(record["content"])
        else:
            outcome["committed"].append(record["content"])
    print(json.dumps(outcome))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
