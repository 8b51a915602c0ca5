"""Shared fixtures: every test gets its own runtime home and no config from the environment."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory import backend_keys
from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.config import parse_config
from deerflow.agents.memory.backends.deermem.deermem.core.index import RetrievalIndex
from deerflow.agents.memory.backends.inmemory import InMemoryMemoryManager
from deerflow.agents.memory.factory import reset_memory_manager
from deerflow.agents.memory.manager import MemoryManager
from tests.postgres_server import postgres_backend_config, running_postgres


@pytest.fixture(autouse=True)
def isolated_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Run in an empty directory with DEER_FLOW_HOME under tmp_path and no stray config."""
    home = tmp_path / "home"
    monkeypatch.setenv("DEER_FLOW_HOME", str(home))
    monkeypatch.delenv("DEER_FLOW_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    # Unknown backend keys are warned about once per process; each test is a fresh start.
    monkeypatch.setattr(backend_keys, "_warned", set())
    yield home
    reset_memory_manager()


@pytest.fixture(params=["deermem", "deermem-postgres", "inmemory"])
def storing_manager(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryManager]:
    """Each backend that stores what it is given: DeerMem (under `tmp_path/store`, and in a
    PostgreSQL schema) and the in-memory reference, for tests of rules every backend must apply
    alike."""
    memory: MemoryManager
    if request.param == "deermem":
        memory = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path / "store")})
    elif request.param == "deermem-postgres":
        url = request.getfixturevalue("postgres_url")
        memory = DeerMemMemoryManager.from_config(postgres_backend_config(url, tmp_path / "store"))
    else:
        memory = InMemoryMemoryManager.from_config({})
    yield memory
    memory.close()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """One real PostgreSQL server for the session; tests isolate themselves by schema
    (`tests.postgres_server.postgres_backend_config`)."""
    with running_postgres() as url:
        yield url


OpenIndex = Callable[..., Any]
"""`open_index(model=None)`: a new search index object over the test's one store."""


@pytest.fixture(params=["files", "postgres"])
def open_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenIndex]:
    """Each engine's search index (`engine.SearchIndex`), for behaviour both must share: the
    files engine's FTS5 file under `tmp_path`, or PostgreSQL in a fresh schema. Every call
    opens another object over the same store, as another process or replica would."""
    opened: list[Any] = []
    if request.param == "files":
        path = tmp_path / ".retrieval" / "index.sqlite3"

        def open_files(model: Any = None) -> Any:
            opened.append(RetrievalIndex(path, model))
            return opened[-1]

        yield open_files
    else:
        from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import open_pool
        from deerflow.agents.memory.backends.deermem.deermem.postgres.index import PostgresIndex

        url = request.getfixturevalue("postgres_url")
        config = parse_config(postgres_backend_config(url, tmp_path, database_pool_size=8))
        with open_pool(config) as pool:

            def open_postgres(model: Any = None) -> Any:
                opened.append(PostgresIndex(pool, model))
                return opened[-1]

            yield open_postgres
    for index in opened:
        index.close()
