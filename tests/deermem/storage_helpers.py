"""Building blocks for storage tests, importable by child processes too."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet
from deerflow.agents.memory.backends.deermem.deermem.core.storage import FileMemoryStorage

NOW = "2026-12-01T10:00:00Z"
REPO = Path(__file__).resolve().parents[2]
LONG = os.environ.get("DEERFLOW_LONG_TESTS") == "1"
"""DEERFLOW_LONG_TESTS=1: the kill and concurrency loops run long (hundreds of kills); such a
test is marked `@pytest.mark.timeout(LONG_TIMEOUT)`."""
LONG_TIMEOUT = 3600 if LONG else 300


def storage_at(root: Path, **settings: Any) -> FileMemoryStorage:
    return FileMemoryStorage(DeerMemConfig(storage_path=str(root), **settings))


def fact(content: str, bucket: str = "__default__", **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": f"fact_{uuid.uuid4().hex}",
        "category": "context",
        "confidence": 0.5,
        "createdAt": NOW,
        "updatedAt": NOW,
        "source": {"type": "manual", "threadId": None},
        "agent_name": bucket,
        "content": content,
    }
    record.update(fields)
    return record


def create(storage: FileMemoryStorage, user: str, *records: dict[str, Any]) -> int:
    """Commit new facts as a point operation; return the new revision."""
    changes = ChangeSet(
        actor="test",
        reason="create",
        upserts=list(records),
        preconditions={(r["agent_name"], r["id"]): None for r in records},
        expected_revision=storage.load(user, None).revision,
        rebase=True,
    )
    return storage.save(user, changes).revision


def reopened(manager: Any) -> Any:
    """A manager of its own on `manager`'s storage, as another process would have: nothing it
    holds is shared with `manager` (caches, index connection)."""
    return type(manager).from_config(dict(manager.backend_config))


def spawn(module: str, *args: str) -> subprocess.Popen[str]:
    """`python -m tests.deermem.<module> args...` from the repository, its stdout piped."""
    return subprocess.Popen(
        [sys.executable, "-m", f"tests.deermem.{module}", *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
