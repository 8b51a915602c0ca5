"""A child process that adds facts and reports what was acknowledged.

`storage` mode commits each fact as a storage point operation; `manager` mode calls the
contract's `create_fact`, as the gateway and the CLI do, and reports every refusal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager
from deerflow.agents.memory.manager import MemoryConflictError, MemoryManagerError
from tests.deermem.storage_helpers import create, fact, storage_at


def main(root: str, user: str, name: str, count: int, mode: str = "storage") -> None:
    outcome: dict[str, list[str]] = {"committed": [], "conflicts": [], "errors": []}
    if mode == "manager":
        manager = DeerMemMemoryManager.from_config(
            {"storage_path": root, "file_lock_timeout_seconds": 60}
        )
        for i in range(count):
            content = f"{name} fact {i}"
            try:
                manager.create_fact(content, user_id=user)
            except MemoryManagerError as exc:
                outcome["errors"].append(f"{content}: {type(exc).__name__}: {exc}")
            else:
                outcome["committed"].append(content)
        manager.close()
    else:
        storage = storage_at(Path(root), file_lock_timeout_seconds=30)
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
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), *sys.argv[5:])
