"""The files engine: DeerMem's memory under `storage_path` (see docs/data-format.md).

Summaries in `memory.json`, one Markdown file per fact, the audit log in `history.jsonl`, all
written by the storage's journaled commits; beside them the derived SQLite databases: the
retrieval index and the token counts under `.retrieval/`, the write queue under `.queue/`, and a
usage sidecar per bucket.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deerflow.agents.memory.backends.deermem.deermem.core.storage import (
    FileMemoryStorage,
    MemoryStorage,
)
from deerflow.agents.memory.backends.deermem.deermem.engine import (
    MemoryEngine,
    QueueSettings,
    UserDump,
)
from deerflow.agents.memory.backends.deermem.deermem.usage import FactUsage
from deerflow.agents.memory.manager import MemoryUnsupportedError

if TYPE_CHECKING:
    from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
    from deerflow.agents.memory.backends.deermem.deermem.core.index import RetrievalIndex
    from deerflow.agents.memory.backends.deermem.deermem.core.token_cache import TokenCache
    from deerflow.agents.memory.backends.deermem.deermem.core.vectors import VectorModel
    from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import DurableQueue

__all__ = ["FileEngine"]


class FileEngine(MemoryEngine):
    """Files under `config.storage_path`; `storage` may be a custom `MemoryStorage`
    (`storage_class`), which keeps the derived databases beside it all the same."""

    derived_data_errors = (sqlite3.Error, OSError)

    def __init__(self, config: DeerMemConfig, storage: MemoryStorage) -> None:
        self._root = Path(config.storage_path)
        self._storage = storage
        self._usage = FactUsage(self._root)

    @property
    def storage(self) -> MemoryStorage:
        return self._storage

    @property
    def usage(self) -> FactUsage:
        return self._usage

    def open_index(self, model: VectorModel | None, *, reset: bool = False) -> RetrievalIndex:
        from deerflow.agents.memory.backends.deermem.deermem.core.index import RetrievalIndex

        path = self._root / ".retrieval" / "index.sqlite3"
        return RetrievalIndex.reset(path, model) if reset else RetrievalIndex(path, model)

    def open_queue(self, settings: QueueSettings) -> DurableQueue:
        from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import DurableQueue

        return DurableQueue(
            self._root / ".queue" / "pending.sqlite3",
            process=settings.process,
            identity=settings.identity,
            debounce_seconds=settings.debounce_seconds,
            max_wait_seconds=settings.max_wait_seconds,
            max_depth=settings.max_depth,
        )

    def open_token_store(self) -> TokenCache:
        from deerflow.agents.memory.backends.deermem.deermem.core.token_cache import TokenCache

        return TokenCache(self._root / ".retrieval" / "tokens.sqlite3")

    def user_ids(self) -> Iterator[str]:
        return self.files("list users").user_ids()

    def scan(self, user_id: str) -> tuple[int, list[dict[str, Any]]]:
        return self.files("scan a user").scan(user_id)

    def dump_user(self, user_id: str) -> UserDump:
        from deerflow.agents.memory.backends.deermem.deermem.core.dump import dump_file_user

        return dump_file_user(self.files("copy a user"), user_id)

    def restore_user(self, dump: UserDump) -> None:
        from deerflow.agents.memory.backends.deermem.deermem.core.dump import restore_file_user

        restore_file_user(self.files("copy a user"), dump)

    def legacy_sources(self) -> list[str]:
        """Files of the old single-file layout that `migrate` would move, relative to the root."""
        from deerflow.agents.memory.backends.deermem.deermem.migrate import find_legacy

        root = self.files("migrate").root
        return [str(source.path.relative_to(root)) for source in find_legacy(root)]

    def migrate(
        self, *, dry_run: bool = False, progress: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """Migrate every user's old single-file memory; the report per user."""
        from deerflow.agents.memory.backends.deermem.deermem.migrate import migrate

        storage = self.files("migrate")
        return migrate(storage.root, storage, dry_run=dry_run, progress=progress).as_dict()

    def files(self, operation: str) -> FileMemoryStorage:
        """The file storage, for what only it can do (migration, listing users).

        Raises:
            MemoryUnsupportedError: a custom `storage_class` is configured.
        """
        if not isinstance(self._storage, FileMemoryStorage):
            raise MemoryUnsupportedError(type(self._storage).__name__, operation)
        return self._storage
