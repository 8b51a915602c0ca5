"""The conformance kit against `openviking`, on langchain-openviking's in-memory client.

One API key serves one user, so the manager is bound to the kit's `user_id`: every standard test
that asks as that user runs; the tests needing a second user need `create_fact`, which OpenViking
does not offer, and skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_openviking import InMemoryOpenVikingClient

from deerflow.agents.memory.backends.openviking import OpenVikingMemoryManager
from deerflow.agents.memory.testing import MemoryManagerConformanceTests


class TestOpenVikingConformance(MemoryManagerConformanceTests):
    @pytest.fixture
    def manager(
        self, tmp_path: Path, user_id: str, monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[OpenVikingMemoryManager]:
        # The kit also builds the class from its config alone, which reads the key.
        monkeypatch.setenv("OPENVIKING_API_KEY", "kit-test-key")
        config = {"storage_path": str(tmp_path), "owner_user_id": user_id}
        manager = OpenVikingMemoryManager.from_config(config, client=InMemoryOpenVikingClient())
        yield manager
        manager.close()

    def test_only_search_is_supported(self) -> None:
        """The other optional tests take their "unsupported" branch here."""
        assert self.supported_operations == {"search"}
