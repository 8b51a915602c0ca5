"""A pool in a fresh schema of the session's PostgreSQL, for the engine's parts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

from deerflow.agents.memory.backends.deermem.deermem.config import parse_config
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import open_pool
from tests.postgres_server import postgres_backend_config


@pytest.fixture
def pool(postgres_url: str, tmp_path: Path) -> Iterator[ConnectionPool]:
    config = parse_config(postgres_backend_config(postgres_url, tmp_path, database_pool_size=8))
    with open_pool(config) as opened:
        yield opened
