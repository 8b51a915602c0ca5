"""Fixtures of the LangGraph store tests: a real DeerMem in tmp_path, driven sync or async."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.langgraph_store import DeerFlowStore

USER = ("memories", "alice")
CODER = ("memories", "alice", "coder")


def new_key() -> str:
    return str(uuid.uuid4())


class Driven:
    """The store's public methods, called as they are (`sync`) or through their async twins,
    each in an event loop of its own (`async`): every test runs both paths."""

    def __init__(self, store: DeerFlowStore, path: str) -> None:
        self.store = store
        self.path = path

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if self.path == "sync":
            return getattr(self.store, name)  # type: ignore[no-any-return]
        twin = getattr(self.store, "a" + name)
        return lambda *args, **kwargs: asyncio.run(twin(*args, **kwargs))


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[DeerMemMemoryManager]:
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path / "store")})
    yield manager
    manager.close()


@pytest.fixture
def raw_store(manager: DeerMemMemoryManager) -> DeerFlowStore:
    return DeerFlowStore(manager)


@pytest.fixture(params=["sync", "async"])
def store(request: pytest.FixtureRequest, raw_store: DeerFlowStore) -> Driven:
    return Driven(raw_store, request.param)
