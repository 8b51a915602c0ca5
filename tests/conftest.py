"""Shared fixtures: every test gets its own runtime home and no config from the environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deerflow.agents.memory import backend_keys
from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.inmemory import InMemoryMemoryManager
from deerflow.agents.memory.factory import reset_memory_manager
from deerflow.agents.memory.manager import MemoryManager
from tests.postgres_server import running_postgres


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


@pytest.fixture(params=["deermem", "inmemory"])
def storing_manager(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryManager]:
    """Each backend that stores what it is given: DeerMem (under `tmp_path/store`) and the
    in-memory reference, for tests of rules every backend must apply alike."""
    memory: MemoryManager
    if request.param == "deermem":
        memory = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path / "store")})
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
