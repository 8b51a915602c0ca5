"""The conformance kit against DeerMem, on real files under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.testing import MemoryManagerConformanceTests


class TestDeerMemConformance(MemoryManagerConformanceTests):
    @pytest.fixture
    def manager(self, tmp_path: Path) -> Iterator[DeerMemMemoryManager]:
        manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
        yield manager
        manager.close()


class TestDeerMemHybridConformance(MemoryManagerConformanceTests):
    """The same contract with hybrid retrieval on (the shipped embedding model)."""

    @pytest.fixture
    def manager(self, tmp_path: Path) -> Iterator[DeerMemMemoryManager]:
        manager = DeerMemMemoryManager.from_config(
            {"storage_path": str(tmp_path), "retrieval_embeddings": True}
        )
        yield manager
        manager.close()
