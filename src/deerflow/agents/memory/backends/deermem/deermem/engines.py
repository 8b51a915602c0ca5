"""Which engine a configuration names: `storage: files` (the default) or `storage: postgres`."""

from __future__ import annotations

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.engine import MemoryEngine

__all__ = ["open_engine"]


def open_engine(config: DeerMemConfig) -> MemoryEngine:
    """The engine of `config`, opened.

    Raises:
        ValueError: a custom `storage_class` cannot be loaded, or psycopg is not installed.
        DatabaseUnavailableError: the PostgreSQL database cannot be reached.
    """
    if config.storage == "postgres":
        from deerflow.agents.memory.backends.deermem.deermem.postgres.engine import (
            PostgresEngine,
        )

        return PostgresEngine(config)
    from deerflow.agents.memory.backends.deermem.deermem.core.file_engine import FileEngine
    from deerflow.agents.memory.backends.deermem.deermem.core.storage import load_storage
    from deerflow.agents.memory.backends.deermem.deermem.migrate import migrate_if_needed

    # A legacy single-file memory is migrated once, when its user is first opened.
    return FileEngine(config, load_storage(config, open_user=migrate_if_needed))
