"""The two record stores of DeerMem side by side, for tests that hold for both, and the
child processes of the PostgreSQL concurrency and crash tests."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psycopg

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig, parse_config
from deerflow.agents.memory.backends.deermem.deermem.core.storage import (
    FileMemoryStorage,
    MemoryStorage,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import open_pool
from deerflow.agents.memory.backends.deermem.deermem.postgres.storage import (
    PostgresMemoryStorage,
)
from tests.postgres_server import postgres_backend_config

ENGINES = ("files", "postgres")

OpenStorage = Callable[[], MemoryStorage]
"""Opens another storage object on the same store, as another process would."""


def postgres_config(url: str, root: Path, schema: str | None = None) -> DeerMemConfig:
    extra = {} if schema is None else {"database_schema": schema}
    return parse_config(postgres_backend_config(url, root, **extra))


@contextmanager
def postgres_storage(config: DeerMemConfig) -> Iterator[PostgresMemoryStorage]:
    with open_pool(config) as pool:
        storage = PostgresMemoryStorage(config, pool)
        try:
            yield storage
        finally:
            storage.close()


@contextmanager
def opened_stores(engine: str, root: Path, url: str | None) -> Iterator[OpenStorage]:
    """A function opening storages on one fresh store of `engine`; all closed afterwards."""
    with ExitStack() as stack:
        if engine == "files":
            config = DeerMemConfig(storage_path=str(root))

            def open_files() -> MemoryStorage:
                storage = FileMemoryStorage(config)
                stack.callback(storage.close)
                return storage

            yield open_files
            return
        assert url is not None
        pg_config = postgres_config(url, root)

        def open_postgres() -> MemoryStorage:
            return stack.enter_context(postgres_storage(pg_config))

        yield open_postgres


def run_sql(config: DeerMemConfig, statement: str) -> list[tuple[Any, ...]]:
    """Run `statement` in the store's schema, as an operator would by hand; its rows."""
    assert config.database_url is not None
    options = f"-c search_path={config.database_schema}"
    with psycopg.connect(config.database_url, options=options, autocommit=True) as conn:
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []


def normalised(value: Any) -> Any:
    """`value` with what differs between two runs of the same writes replaced: change ids
    (numbered in order of appearance) and times. Give facts the same ids in both runs."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    names: dict[str, str] = {}
    text = re.sub(r"chg_[0-9a-f]{32}", lambda m: names.setdefault(m[0], f"<chg{len(names)}>"), text)
    return json.loads(re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<time>", text))
