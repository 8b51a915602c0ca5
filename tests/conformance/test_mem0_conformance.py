"""The conformance kit against the mem0 backend, for both transports.

`local` runs mem0's real engine (Qdrant on disk under tmp_path, a hashing embedder, a scripted
extraction model); `http` talks to a loopback fake of mem0's REST routes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.mem0 import Mem0MemoryManager
from deerflow.agents.memory.testing import MemoryManagerConformanceTests
from tests.mem0_fakes import API_KEY, FakeMem0Server, http_config, local_config

SUPPORTED = {
    "search",
    "get_memory",
    "reload_memory",
    "export_memory",
    "clear_memory",
    "create_fact",
    "update_fact",
    "delete_fact",
}


class TestMem0LocalConformance(MemoryManagerConformanceTests):
    @pytest.fixture
    def manager(self, tmp_path: Path) -> Iterator[Mem0MemoryManager]:
        manager = Mem0MemoryManager.from_config(local_config(tmp_path))
        yield manager
        manager.close()

    def test_supported_operations(self) -> None:
        assert self.supported_operations == SUPPORTED


class TestMem0HttpConformance(MemoryManagerConformanceTests):
    @pytest.fixture
    def manager(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[Mem0MemoryManager]:
        monkeypatch.setenv("MEM0_TEST_KEY", API_KEY)
        with FakeMem0Server().running() as server:
            config = {"storage_path": str(tmp_path), **http_config(server)}
            manager = Mem0MemoryManager.from_config(config)
            yield manager
            manager.close()

    def test_supported_operations(self) -> None:
        assert self.supported_operations == SUPPORTED
