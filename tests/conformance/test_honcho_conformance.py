"""The conformance kit against the honcho backend, talking to a loopback fake of Honcho v3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.honcho import HonchoMemoryManager
from deerflow.agents.memory.testing import MemoryManagerConformanceTests
from tests.honcho_fake import FakeHoncho, serve_fake_honcho


@pytest.fixture(scope="module")
def honcho_server() -> Iterator[FakeHoncho]:
    with serve_fake_honcho() as server:
        yield server


class TestHonchoConformance(MemoryManagerConformanceTests):
    @pytest.fixture
    def manager(self, honcho_server: FakeHoncho, tmp_path: Path) -> Iterator[HonchoMemoryManager]:
        config = {"storage_path": str(tmp_path), "base_url": honcho_server.url, "max_retries": 0}
        manager = HonchoMemoryManager.from_config(config)
        yield manager
        manager.close()

    def test_search_is_the_only_optional_operation(self) -> None:
        """Honcho derives its own model of the user: there are no facts to list or edit."""
        assert self.supported_operations == {"search"}
