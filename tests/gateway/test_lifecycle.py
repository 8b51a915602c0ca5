"""Startup, readiness and shutdown of the gateway, and secrets kept out of answers and logs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from typer.testing import CliRunner

from deerflow.agents.memory.backends.inmemory import InMemoryMemoryManager
from deerflow.agents.memory.manager import build_memory_manager, default_host_hooks
from deerflow.cli.app import app as cli
from deerflow.config import load_config
from tests.deermem.pipeline_helpers import reply
from tests.gateway.conftest import Serve, app_config
from tests.gateway.serve_process import REPO_ROOT, serve_process, write_config
from tests.gateway.test_memory_api import expect_error

SECRET = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


class SlowWarmMemoryManager(InMemoryMemoryManager):
    """Warms only when the test says so, or fails to warm when told."""

    release: ClassVar[threading.Event] = threading.Event()
    fail: ClassVar[bool] = False

    def warm(self) -> bool:
        if not type(self).release.wait(30):
            raise TimeoutError("the test never released warm()")
        if type(self).fail:
            raise RuntimeError("the model cache is missing")
        return True


@pytest.fixture
def slow_backend() -> Iterator[type[SlowWarmMemoryManager]]:
    SlowWarmMemoryManager.release = threading.Event()
    SlowWarmMemoryManager.fail = False
    yield SlowWarmMemoryManager
    SlowWarmMemoryManager.release.set()


def test_memory_routes_wait_for_warm_while_liveness_answers(
    serve: Serve, tmp_path: Path, slow_backend: type[SlowWarmMemoryManager]
) -> None:
    server = serve(
        app_config(tmp_path, "inmemory"), manager=slow_backend.from_config({}), wait_ready=False
    )
    assert httpx.get(server.url("/healthz")).json() == {"status": "ok"}
    expect_error(httpx.get(server.url("/readyz")), 503, "not_ready")
    waiting = httpx.get(server.url("/api/memory"))
    expect_error(waiting, 503, "not_ready")
    assert waiting.headers["retry-after"] == "1"
    status = httpx.get(server.url("/api/memory/status")).json()
    assert (status["ready"], status["enabled"]) == (False, True)

    slow_backend.release.set()
    server.until_ready()
    assert httpx.get(server.url("/api/memory")).status_code == 200
    assert httpx.get(server.url("/api/memory/status")).json()["ready"] is True


def test_a_backend_that_fails_to_warm_stays_unready(
    serve: Serve,
    tmp_path: Path,
    slow_backend: type[SlowWarmMemoryManager],
    caplog: pytest.LogCaptureFixture,
) -> None:
    slow_backend.fail = True
    slow_backend.release.set()
    server = serve(
        app_config(tmp_path, "inmemory"), manager=slow_backend.from_config({}), wait_ready=False
    )
    deadline = time.monotonic() + 10
    while "failed to warm" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "the model cache is missing" in caplog.text
    assert "failed" in expect_error(httpx.get(server.url("/readyz")), 503, "not_ready")
    expect_error(httpx.get(server.url("/api/memory")), 503, "not_ready")


def test_memory_turned_off_is_503_on_memory_routes(serve: Serve, tmp_path: Path) -> None:
    config = app_config(tmp_path)
    config.memory.enabled = False
    server = serve(config)
    assert httpx.get(server.url("/readyz")).status_code == 200
    for path in ("/api/memory", "/api/memory/search?q=x", "/api/memory/history"):
        expect_error(httpx.get(server.url(path)), 503, "memory_disabled")
    status = httpx.get(server.url("/api/memory/status")).json()
    assert (status["enabled"], status["backend"]) == (False, None)
    assert not (tmp_path / "store").exists(), "no backend was built"


def test_a_bad_backend_stops_serve_before_it_listens(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("memory:\n  manager_class: deermemm\n")
    result = CliRunner().invoke(cli, ["serve", "--config", str(config), "--port", "0"])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert "memory.manager_class='deermemm'" in output
    assert "Refusing to fall back" in output


def test_a_port_in_use_stops_serve_with_exit_1_saying_why(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"memory:\n  backend_config:\n    storage_path: {tmp_path / 'store'}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = ["serve", "--config", str(config), "--port", str(port)]
        result = subprocess.run(
            [sys.executable, "-m", "deerflow", *command],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
    assert result.returncode == 1, result.stderr
    assert "address already in use" in result.stderr


def test_shutdown_writes_queued_conversations_before_exit(
    tmp_path: Path, isolated_environment: Path
) -> None:
    store = tmp_path / "store"
    config = write_config(
        tmp_path / "config.yaml",
        {
            "models": [
                {
                    "name": "default",
                    "use": "tests.deermem.pipeline_helpers:ScriptedModel",
                    "responses": [reply({"content": "Drinks green tea every morning"})],
                }
            ],
            "memory": {
                "shutdown_flush_timeout_seconds": 30,
                # Nothing is due for an hour: only the shutdown flush can write it.
                "backend_config": {
                    "storage_path": str(store),
                    "debounce_seconds": 3600,
                    "debounce_max_wait_seconds": 3600,
                },
            },
        },
    )
    app_config_ = load_config(config)
    queued = build_memory_manager(app_config_.memory, host_hooks=default_host_hooks(app_config_))
    turns = [HumanMessage("I drink green tea every morning", id="h1"), AIMessage("Noted!", id="a1")]
    queued.add("thread-1", turns, user_id="default")
    queued.close()

    with serve_process("--config", str(config), home=isolated_environment) as server:
        assert httpx.get(server.base_url + "/api/memory").json()["facts"] == []
        server.terminate()
    assert "writing queued memory" in server.output

    reader = build_memory_manager(app_config_.memory)
    try:
        facts = reader.get_memory(user_id="default")["facts"]
    finally:
        reader.close()
    assert [fact["content"] for fact in facts] == ["Drinks green tea every morning"]


def test_an_api_key_under_backend_config_never_shows(
    tmp_path: Path, isolated_environment: Path
) -> None:
    config = write_config(
        tmp_path / "config.yaml",
        {
            "memory": {
                "backend_config": {
                    "storage_path": str(tmp_path / "store"),
                    "model": {
                        "provider": "openai",
                        "model": "gpt-4o-mini",
                        "api_key": SECRET,
                        "base_url": f"https://proxy:{SECRET}@llm.internal/v1",
                    },
                }
            }
        },
    )
    with serve_process("--config", str(config), home=isolated_environment, verbose=True) as server:
        shown = httpx.get(server.base_url + "/api/memory/config")
        assert shown.status_code == 200
        model = shown.json()["memory"]["backend_config"]["model"]
        assert model["api_key"] == "***"
        assert model["model"] == "gpt-4o-mini"
        # The key in places a careless log line would echo: a query string, a body, an error.
        httpx.get(server.base_url + "/api/memory/search", params={"q": SECRET})
        httpx.post(server.base_url + "/api/memory/facts", json={"content": f"key {SECRET}"})
        (tmp_path / "store" / "users" / "default").mkdir(parents=True, exist_ok=True)
        (tmp_path / "store" / "users" / "default" / "memory.json").write_text(f"{{{SECRET}")
        expect_error(httpx.get(server.base_url + "/api/memory"), 500, "corruption")
        server.terminate()
    assert SECRET not in shown.text
    assert "GET /api/memory/config" in server.output, "the log was captured"
    assert "/api/memory/search?q=***" in server.output, "the access log line was masked"
    assert SECRET not in server.output
