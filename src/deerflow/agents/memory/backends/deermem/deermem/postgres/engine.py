"""The PostgreSQL engine: every part of a DeerMem memory in one database schema.

Several processes on several hosts (e.g. `deerflow serve` replicas behind a load balancer) open
the same schema and share one memory: commits serialise per user on the user's row, the search
index is in the same database, and the write queue hands each due conversation to one replica.
Nothing is kept under `storage_path` but what every process derives for itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg

from deerflow.agents.memory.backends.deermem.deermem.engine import (
    MemoryEngine,
    QueueSettings,
    UserDump,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import open_pool
from deerflow.agents.memory.backends.deermem.deermem.postgres.index import PostgresIndex
from deerflow.agents.memory.backends.deermem.deermem.postgres.queue import PostgresQueue
from deerflow.agents.memory.backends.deermem.deermem.postgres.storage import (
    PostgresMemoryStorage,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.tokens import PostgresTokenStore
from deerflow.agents.memory.backends.deermem.deermem.postgres.usage import PostgresUsage

if TYPE_CHECKING:
    from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
    from deerflow.agents.memory.backends.deermem.deermem.core.vectors import VectorModel

__all__ = ["PostgresEngine"]


class PostgresEngine(MemoryEngine):
    """One schema of one PostgreSQL database, through a pool of `database_pool_size`."""

    derived_data_errors = (psycopg.Error,)

    def __init__(self, config: DeerMemConfig) -> None:
        self._lease = config.queue_lease_seconds
        self._pool = open_pool(config)
        try:
            self._storage = PostgresMemoryStorage(config, self._pool)
            self._usage = PostgresUsage(self._pool)
        except BaseException:
            self._pool.close()
            raise

    @property
    def storage(self) -> PostgresMemoryStorage:
        return self._storage

    @property
    def usage(self) -> PostgresUsage:
        return self._usage

    def open_index(self, model: VectorModel | None, *, reset: bool = False) -> PostgresIndex:
        return PostgresIndex.reset(self._pool, model) if reset else PostgresIndex(self._pool, model)

    def open_queue(self, settings: QueueSettings) -> PostgresQueue:
        return PostgresQueue(self._pool, settings, lease_seconds=self._lease)

    def open_token_store(self) -> PostgresTokenStore:
        return PostgresTokenStore(self._pool)

    def user_ids(self) -> Iterator[str]:
        return self._storage.user_ids()

    def scan(self, user_id: str) -> tuple[int, list[dict[str, Any]]]:
        return self._storage.scan(user_id)

    def dump_user(self, user_id: str) -> UserDump:
        return self._storage.dump_user(user_id)

    def restore_user(self, dump: UserDump) -> None:
        self._storage.restore_user(dump)

    def close(self) -> None:
        self._pool.close()
