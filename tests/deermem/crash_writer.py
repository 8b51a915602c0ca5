"""A child process that writes until it is killed, printing each acknowledged write.

`commits` mode (the default) commits numbered multi-fact writes through the storage: write n
adds three facts tagged `w{n}-a/b/c`, deletes the three of write n-1 and sets the work summary
to `write n`, so after a crash each write must be either wholly there or wholly absent.

`creates` mode calls the contract's `create_fact` with `{name} fact {i}`, as the gateway does;
run two at once and the creates overtake each other (rebased in the commit).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet
from deerflow.agents.memory.backends.deermem.deermem.core.storage import MemoryStorage
from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager
from tests.deermem.storage_helpers import fact, storage_at


def commits(root: str, user: str, count: int) -> None:
    numbered_writes(storage_at(Path(root)), user, count, lambda line: print(line, flush=True))


def numbered_writes(
    storage: MemoryStorage, user: str, count: int, report: Callable[[str], None]
) -> None:
    """`count` numbered writes (see the module docstring), each reported once committed."""
    for _ in range(count):
        snapshot = storage.load(user, None)
        n = snapshot.revision + 1
        changes = ChangeSet(
            actor="test",
            reason=f"write {n}",
            summaries={"user": {"workContext": f"write {n}"}},
            upserts=[fact(f"w{n}-{part}") for part in "abc"],
            deletes=[("__default__", fact_id) for fact_id in snapshot.facts],
            expected_revision=snapshot.revision,
        )
        storage.save(user, changes)
        report(str(n))


def creates(root: str, user: str, count: int, name: str) -> None:
    manager = DeerMemMemoryManager.from_config({"storage_path": root, "max_facts": 500})
    manager.warm()  # the embedding model loads here, not inside the window the kill falls in
    print("ready", flush=True)
    for i in range(count):
        content = f"{name} fact {i}"
        manager.create_fact(content, user_id=user)
        print(content, flush=True)


if __name__ == "__main__":
    root, user, count, *mode = sys.argv[1:]
    if mode and mode[0] == "creates":
        creates(root, user, int(count), mode[1])
    else:
        commits(root, user, int(count))
