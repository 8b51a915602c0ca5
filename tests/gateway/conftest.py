"""Fixtures of the gateway tests: configs over real storage in tmp_path, live servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deerflow.agents.memory.manager import MemoryManager
from deerflow.config import AppConfig
from deerflow.gateway.app import create_app
from tests.gateway.live import LiveServer

Serve = Callable[..., LiveServer]


def app_config(tmp_path: Path, manager_class: str = "deermem", **sections: Any) -> AppConfig:
    """A config whose backend stores under `tmp_path/store`; `sections` replace top-level keys."""
    raw: dict[str, Any] = {
        "memory": {
            "manager_class": manager_class,
            "shutdown_flush_timeout_seconds": 5,
            "backend_config": {"storage_path": str(tmp_path / "store")},
        },
        **sections,
    }
    return AppConfig.model_validate(raw)


@pytest.fixture
def serve(isolated_environment: Path) -> Iterator[Serve]:
    """Start `create_app(config, manager=...)` on a free loopback port; stopped at teardown."""
    started: list[LiveServer] = []

    def start(
        config: AppConfig, *, manager: MemoryManager | None = None, wait_ready: bool = True
    ) -> LiveServer:
        app = create_app(config, manager=manager, home=isolated_environment)
        server = LiveServer(app, wait_ready=wait_ready).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def deermem(serve: Serve, tmp_path: Path) -> LiveServer:
    """A live gateway over DeerMem without auth."""
    return serve(app_config(tmp_path))


@pytest.fixture
def client(deermem: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deermem.base_url) as http:
        yield http
