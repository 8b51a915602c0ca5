"""The conformance kit against DeerMem on PostgreSQL (a real server, a fresh schema per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.testing import MemoryManagerConformanceTests
from tests.postgres_server import postgres_backend_config


class TestDeerMemPostgresConformance(MemoryManagerConformanceTests):
    """Default settings (hybrid retrieval) with `storage: postgres`."""

    @pytest.fixture
    def manager(self, postgres_url: str, tmp_path: Path) -> Iterator[DeerMemMemoryManager]:
        manager = DeerMemMemoryManager.from_config(postgres_backend_config(postgres_url, tmp_path))
        manager.warm()
        yield manager
        manager.close()
