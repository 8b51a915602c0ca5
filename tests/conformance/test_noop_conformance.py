"""The conformance kit against `noop`: search works (returns []), everything else is unsupported."""

from __future__ import annotations

from pathlib import Path

import pytest

from deerflow.agents.memory.backends.noop import NoopMemoryManager
from deerflow.agents.memory.testing import MemoryManagerConformanceTests


class TestNoopConformance(MemoryManagerConformanceTests):
    @pytest.fixture
    def manager(self, tmp_path: Path) -> NoopMemoryManager:
        return NoopMemoryManager.from_config({"storage_path": str(tmp_path)})

    def test_only_search_is_supported(self) -> None:
        """The other optional tests take their "unsupported" branch here."""
        assert self.supported_operations == {"search"}
