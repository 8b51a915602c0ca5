"""PostgreSQL write queues for the tests: queue objects over one fresh schema, a pool per
replica, and the database's clock moved on by moving every stored time back (which is what
waiting would have done)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg_pool import ConnectionPool

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.engine import QueueSettings
from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import QueueItem
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import open_pool
from deerflow.agents.memory.backends.deermem.deermem.postgres.queue import PostgresQueue
from tests.deermem.queue_child import identity

_BACK = "- %s * interval '1 second'"


class PostgresQueues:
    """Makes `PostgresQueue`s on one schema; `close` closes them, then their pools."""

    def __init__(self, config: DeerMemConfig, process: Callable[[QueueItem], None]) -> None:
        self.config = config
        self._process = process
        self._pools: list[ConnectionPool] = []
        self._queues: list[PostgresQueue] = []

    def pool(self) -> ConnectionPool:
        """A pool of its own, as a replica has."""
        self._pools.append(open_pool(self.config))
        return self._pools[-1]

    def make(
        self,
        *,
        on: ConnectionPool | None = None,
        process: Callable[[QueueItem], None] | None = None,
        debounce_seconds: float = 30.0,
        max_wait_seconds: float = 120.0,
        max_depth: int = 0,
        start: bool = False,
        **options: Any,
    ) -> PostgresQueue:
        """A queue (on the first pool unless `on` names one), by default without a worker."""
        settings = QueueSettings(
            process=self._process if process is None else process,
            identity=identity,
            debounce_seconds=debounce_seconds,
            max_wait_seconds=max_wait_seconds,
            max_depth=max_depth,
        )
        pool = on or (self._pools[0] if self._pools else self.pool())
        self._queues.append(PostgresQueue(pool, settings, start=start, **options))
        return self._queues[-1]

    def advance(self, seconds: float) -> None:
        """As if `seconds` passed on the database's clock (after a queue made the tables)."""
        with self._first().connection() as conn:
            conn.execute(
                f"UPDATE queue_items SET first_at = first_at {_BACK}, last_at = last_at {_BACK},"
                f" due_at = due_at {_BACK}, claimed_until = claimed_until {_BACK}",
                (seconds,) * 4,
            )
            conn.execute(f"UPDATE queue_watermarks SET used_at = used_at {_BACK}", (seconds,))

    def now(self) -> float:
        """The database's time, in epoch seconds."""
        with self._first().connection() as conn:
            row = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()
            assert row is not None
            return float(row[0])

    def close(self) -> None:
        for queue in self._queues:
            queue.close()
        for pool in self._pools:
            pool.close()

    def _first(self) -> ConnectionPool:
        return self._pools[0] if self._pools else self.pool()
