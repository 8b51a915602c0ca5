"""A user worth moving between stores (several buckets, unknown front-matter keys, a summary
edit, an undo), and what a store holds of it: importable by child processes too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deerflow.agents.memory.backends.deermem.deermem.core.dump import dump_file_user
from deerflow.agents.memory.backends.deermem.deermem.core.storage import FileMemoryStorage
from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager
from tests.deermem.storage_helpers import create, fact, storage_at


def manager_at(root: Path) -> DeerMemMemoryManager:
    return DeerMemMemoryManager.from_config(
        {"storage_path": str(root), "retrieval_embeddings": False}
    )


def fill_user(root: Path, user: str) -> None:
    """Give `user` facts in three buckets (one with keys DeerMem does not know), an edited
    summary, a deleted fact brought back by an undo, and an update."""
    manager = manager_at(root)
    try:
        manager.create_fact("Prefers pnpm over npm", "preference", 0.9, user_id=user)
        _, kept = manager.create_fact("Works on the billing service", user_id=user)
        _, coder = manager.create_fact(
            "Uses Python 3.12", "knowledge", user_id=user, agent_name="Coder"
        )
        manager.create_fact("Writes in British English", user_id=user, agent_name="writer")
        manager.update_summary("user", "workContext", "Backend engineer at Acme", user_id=user)
        assert kept is not None
        assert coder is not None
        manager.update_fact(kept, confidence=0.8, user_id=user)
        deleted = manager.delete_fact(coder, user_id=user, agent_name="Coder")
        change = next(
            e["change_id"]
            for e in manager.get_history(user_id=user, agent_name="Coder")
            if e["revision"] == deleted["revision"]
        )
        manager.revert_change(change, user_id=user)
        storage = manager.storage
        assert isinstance(storage, FileMemoryStorage)
        unusual = fact(
            "Keeps notes in Obsidian",
            "writer",
            topics=["notes", "tools"],
            reviewed_by={"name": "ops", "on": "2026-11-30"},
            x_origin="crm-import",
        )
        create(storage, user, unusual)
    finally:
        manager.close()


def stored(root: Path, user: str) -> dict[str, Any]:
    """Everything a fresh storage on `root` reads of `user`, facts keyed by (bucket, id)."""
    storage = storage_at(root)
    try:
        dump = dump_file_user(storage, user)
        return {
            "user_ids": sorted(storage.user_ids()),
            "revision": dump.revision,
            "last_updated": dump.last_updated,
            "summaries": dump.summaries,
            "facts": {(r["agent_name"], r["id"]): r for r in dump.facts},
            "history": list(dump.history),
        }
    finally:
        storage.close()
