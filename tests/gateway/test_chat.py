"""`POST /api/chat/{thread_id}`: lead-agent turns over SSE, with a scripted model and DeerMem."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from deerflow.config import AppConfig
from deerflow.gateway import chat_routes
from deerflow.gateway.errors import INTERNAL_TEXT
from deerflow.gateway.tokens import TokenStore, tokens_path
from tests.gateway.conftest import Serve, app_config
from tests.gateway.live import LiveServer
from tests.gateway.test_memory_api import expect_error
from tests.harness.scripted_model import USE, ScriptedConversationModel

REPLY = "Noted: green tea it is."
FACT = {"content": "Prefers green tea", "category": "preference", "confidence": 0.9}
SECRET = "sk-live-0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d"


class BrokenModel(ScriptedConversationModel):
    """A provider that fails mid-turn, with a key in its error message."""

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        raise RuntimeError(f"upstream refused api key {SECRET}")


class SlowModel(ScriptedConversationModel):
    """Answers only once the test releases it."""

    started: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()

    def _stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        SlowModel.started.set()
        SlowModel.release.wait(30)
        yield from super()._stream(*args, **kwargs)


def chat_config(tmp_path: Path, use: str = USE, **sections: Any) -> AppConfig:
    config = app_config(
        tmp_path,
        models=[{"name": "default", "use": use, "replies": [REPLY], "facts": [FACT]}],
        **sections,
    )
    config.memory.backend_config.update(debounce_seconds=0, debounce_max_wait_seconds=0)
    return config


def events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of a server-sent-events body."""
    found = []
    for block in response.text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        found.append((fields["event"], json.loads(fields["data"])))
    return found


def say(server: LiveServer, thread: str, message: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(
        server.url(f"/api/chat/{thread}"), json={"message": message}, timeout=60, **kwargs
    )


@pytest.fixture(autouse=True)
def fresh_model() -> Iterator[None]:
    ScriptedConversationModel.reset()
    SlowModel.started = threading.Event()
    SlowModel.release = threading.Event()
    yield
    SlowModel.release.set()


def test_a_turn_streams_the_reply_and_memory_learns_from_it(serve: Serve, tmp_path: Path) -> None:
    server = serve(chat_config(tmp_path))
    response = say(server, "web-1", "I always drink green tea")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    received = events(response)
    assert received[-1] == ("done", {})
    assert "".join(data["content"] for name, data in received if name == "token") == REPLY

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        facts = httpx.get(server.url("/api/memory")).json()["facts"]
        if facts:
            break
        time.sleep(0.1)
    assert [fact["content"] for fact in facts] == [FACT["content"]]
    extraction = ScriptedConversationModel.extraction_prompts[0]
    assert "I always drink green tea" in extraction[-1].text


def test_a_new_thread_starts_with_what_memory_knows(serve: Serve, tmp_path: Path) -> None:
    server = serve(chat_config(tmp_path))
    httpx.post(server.url("/api/memory/facts"), json={"content": "Lives in Lisbon"})
    assert events(say(server, "web-2", "Where should I travel?"))[-1][0] == "done"
    system = ScriptedConversationModel.system_prompts()[-1]
    assert "<memory>" in system
    assert "Lives in Lisbon" in system


def test_users_sharing_a_thread_id_never_share_a_conversation(
    serve: Serve, tmp_path: Path, isolated_environment: Path
) -> None:
    store = TokenStore(tokens_path(isolated_environment))
    alice, bob = (store.add(user)[1] for user in ("alice", "bob"))
    server = serve(chat_config(tmp_path, auth={"mode": "token"}))
    as_alice = {"headers": {"Authorization": f"Bearer {alice}"}}
    as_bob = {"headers": {"Authorization": f"Bearer {bob}"}}
    assert events(say(server, "shared", "My code name is Falcon", **as_alice))[-1][0] == "done"
    assert events(say(server, "shared", "What is my code name?", **as_bob))[-1][0] == "done"
    bob_prompt = ScriptedConversationModel.chat_prompts[-1]
    assert not any("Falcon" in message.text for message in bob_prompt)
    assert events(say(server, "shared", "Remind me", **as_alice))[-1][0] == "done"
    alice_prompt = ScriptedConversationModel.chat_prompts[-1]
    assert any("Falcon" in message.text for message in alice_prompt)
    expect_error(say(server, "shared", "hi"), 401, "unauthorized")


def test_bad_chat_requests_get_precise_errors(serve: Serve, tmp_path: Path) -> None:
    server = serve(chat_config(tmp_path))
    expect_error(say(server, "has space", "hi"), 422, "validation_error")
    expect_error(say(server, "web-3", ""), 422, "validation_error")
    missing = say(server, "web-3", "hi", params={"agent_name": "nobody"})
    detail = expect_error(missing, 404, "agent_not_found")
    assert str(tmp_path) not in detail
    expect_error(say(server, "web-3", "hi", params={"agent_name": "../x"}), 404, "agent_not_found")


def test_without_any_model_chat_is_501(
    serve: Serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No model configured, and the offline one not installed (whatever this environment holds).
    monkeypatch.setattr(chat_routes, "local_extra_installed", lambda: False)
    server = serve(app_config(tmp_path))
    assert "models:" in expect_error(say(server, "web-4", "hi"), 501, "chat_unavailable")


def test_a_failing_turn_ends_with_an_error_event_and_no_secret(
    serve: Serve, tmp_path: Path
) -> None:
    server = serve(chat_config(tmp_path, use="tests.gateway.test_chat:BrokenModel"))
    response = say(server, "web-5", "hello")
    assert response.status_code == 200
    assert events(response)[-1] == ("error", {"error": "internal_error", "detail": INTERNAL_TEXT})
    assert SECRET not in response.text


def test_one_turn_at_a_time_per_thread(serve: Serve, tmp_path: Path) -> None:
    server = serve(chat_config(tmp_path, use="tests.gateway.test_chat:SlowModel"))
    first: list[httpx.Response] = []
    running = threading.Thread(target=lambda: first.append(say(server, "web-6", "one")))
    running.start()
    assert SlowModel.started.wait(30)
    expect_error(say(server, "web-6", "two"), 409, "thread_busy")
    SlowModel.release.set()
    running.join(60)
    assert events(first[0])[-1] == ("done", {})
    assert events(say(server, "web-6", "three"))[-1] == ("done", {})
