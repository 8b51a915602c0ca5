"""The conformance kit against the `inmemory` reference backend, which supports everything."""

from __future__ import annotations

from pathlib import Path

import pytest

from deerflow.agents.memory.backends.inmemory import InMemoryMemoryManager
from deerflow.agents.memory.testing import OPTIONAL_OPERATIONS, MemoryManagerConformanceTests


class TestInMemoryConformance(MemoryManagerConformanceTests):
    @pytest.fixture
    def manager(self, tmp_path: Path) -> InMemoryMemoryManager:
        return InMemoryMemoryManager.from_config({"storage_path": str(tmp_path)})

    def test_every_operation_is_supported(self) -> None:
        """The reference exercises every optional test, so none of them may be skipped."""
        assert self.supported_operations == frozenset(OPTIONAL_OPERATIONS)
