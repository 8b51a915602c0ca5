"""The conformance kit against DeerMem, on real files under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.testing import MemoryManagerConformanceTests


class TestDeerMemConformance(MemoryManagerConformanceTests):
    """Default settings: hybrid retrieval (the shipped embedding model)."""

    @pytest.fixture
    def manager(self, tmp_path: Path) -> Iterator[DeerMemMemoryManager]:
        manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
        # As `deerflow serve` does before it reports ready: loading the model (importing numpy)
        # holds the GIL long enough to stall an event loop if the first search did it.
        manager.warm()
        yield manager
        manager.close()


class TestDeerMemLexicalConformance(MemoryManagerConformanceTests):
    """The same contract with lexical retrieval only (`retrieval_embeddings: false`)."""

    @pytest.fixture
    def manager(self, tmp_path: Path) -> Iterator[DeerMemMemoryManager]:
        manager = DeerMemMemoryManager.from_config(
            {"storage_path": str(tmp_path), "retrieval_embeddings": False}
        )
        yield manager
        manager.close()
