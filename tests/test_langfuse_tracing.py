"""Memory's extraction calls are traced in Langfuse, with the user and the thread.

Langfuse's SDK sends OpenTelemetry spans (OTLP over HTTP, protobuf) to
`$LANGFUSE_HOST/api/public/otel/v1/traces`; a loopback server records what arrives.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("langfuse", reason="the langfuse extra is not installed")

from langchain_core.messages import AIMessage, HumanMessage
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from deerflow.agents.memory.callbacks import MemoryCallbacks
from deerflow.agents.memory.manager import build_memory_manager
from deerflow.config.loader import parse_config
from deerflow.langfuse_tracing import LangfuseMemoryCallbacks
from tests.harness.scripted_model import USE, ScriptedConversationModel

TRACES = "/api/public/otel/v1/traces"
FACT = {"content": "Prefers pnpm over npm", "category": "preference", "confidence": 0.9}


class Recorder(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        Recorder.received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def langfuse_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    Recorder.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-test")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-test")
    monkeypatch.setenv("LANGFUSE_HOST", host)
    yield host
    server.shutdown()
    server.server_close()


def span_attributes(body: bytes) -> list[dict[str, str]]:
    request = ExportTraceServiceRequest.FromString(body)
    return [
        {attribute.key: attribute.value.string_value for attribute in span.attributes}
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


def test_an_extraction_call_reaches_langfuse_with_the_user_and_the_thread(
    tmp_path: Path, langfuse_host: str
) -> None:
    ScriptedConversationModel.reset()
    config = parse_config(
        {
            "models": [{"name": "scripted", "use": USE, "facts": [FACT]}],
            "memory": {"backend_config": {"storage_path": str(tmp_path)}},
        },
        {},
    )
    manager = build_memory_manager(config)
    callbacks = manager.callbacks
    assert isinstance(callbacks, LangfuseMemoryCallbacks)
    try:
        manager.add(
            "thread-lf-1",
            [HumanMessage("I always use pnpm, never npm."), AIMessage("Noted.")],
            user_id="alice",
        )
        assert manager.shutdown_flush(30)
        assert [f["content"] for f in manager.get_memory(user_id="alice")["facts"]] == [
            FACT["content"]
        ]
    finally:
        manager.close()
    callbacks.flush()

    spans = [
        attributes
        for path, body in Recorder.received
        if path == TRACES
        for attributes in span_attributes(body)
    ]
    assert spans, f"nothing reached {TRACES}: {[path for path, _ in Recorder.received]}"
    users = {value for span in spans for key, value in span.items() if key.endswith("user.id")}
    sessions = {
        value for span in spans for key, value in span.items() if key.endswith("session.id")
    }
    assert users == {"alice"}, spans
    assert sessions == {"thread-lf-1"}, spans


def test_without_keys_nothing_is_traced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY", "LANGFUSE_HOST"):
        monkeypatch.delenv(name, raising=False)
    config = parse_config({"memory": {"backend_config": {"storage_path": str(tmp_path)}}}, {})
    manager = build_memory_manager(config)
    try:
        assert type(manager.callbacks) is MemoryCallbacks
    finally:
        manager.close()


def test_half_a_key_pair_in_config_yaml_names_the_missing_key(tmp_path: Path) -> None:
    config = parse_config({"tracing": {"langfuse": {"public_key": "pk-lf-x"}}}, {})
    with pytest.raises(ValueError, match=r"tracing\.langfuse\.secret_key: needed"):
        build_memory_manager(config, home=tmp_path)
