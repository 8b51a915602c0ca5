"""A child process that commits numbered multi-fact writes until it is killed.

Write n adds three facts tagged `w{n}-a/b/c`, deletes the three of write n-1 and sets the work
summary to `write n`: after a crash, each write must be either wholly there or wholly absent.
"""

from __future__ import annotations

import sys
from pathlib import Path

from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet
from tests.deermem.storage_helpers import fact, storage_at


def main(root: str, user: str, count: int) -> None:
    storage = storage_at(Path(root))
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
        print(n, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
