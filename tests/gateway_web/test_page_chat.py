"""The chat panel's streaming client, against a scripted chat route on the real gateway.

The route streams the events the page reads (`token`, `error`, `done`); the lead agent behind the
real route is the harness's business and is tested there. Without a chat route the panel says
chat is not available (`test_page_server.py`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute
from playwright.sync_api import Browser, Page, expect

from deerflow.gateway.app import create_app
from tests.gateway.live import LiveServer
from tests.gateway_web.conftest import Screenshot
from tests.gateway_web.harness import memory_config, watched_page


class ScriptedChat:
    """A chat route that answers each message with scripted events and records the turns."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, str | None, str]] = []  # thread, agent, message

    def events(self, message: str) -> list[tuple[str, dict[str, Any]]]:
        if message == "fail":
            return [("token", {"content": "Let me"}), ("error", {"error": "x", "detail": "boom"})]
        if message == "cut":
            return [("token", {"content": "Half a"})]
        words = ["You ", "said: ", message]
        return [("token", {"content": word}) for word in words] + [("done", {})]

    async def route(self, thread_id: str, request: Request) -> StreamingResponse:
        message = (await request.json())["message"]
        self.turns.append((thread_id, request.query_params.get("agent_name"), message))

        async def stream() -> AsyncIterator[str]:
            yield ": the first comment line keeps proxies from buffering\n\n"
            for name, data in self.events(message):
                yield f"event: {name}\ndata: {json.dumps(data)}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    def install(self, app: FastAPI) -> None:
        # In front of the page's mount at "/", which would otherwise take the path.
        app.router.routes.insert(0, APIRoute("/api/chat/{thread_id}", self.route, methods=["POST"]))


@pytest.fixture
def chat() -> ScriptedChat:
    return ScriptedChat()


@pytest.fixture
def chat_page(browser: Browser, tmp_path: Path, chat: ScriptedChat) -> Iterator[Page]:
    app = create_app(memory_config(tmp_path), home=tmp_path / "home")
    chat.install(app)
    with LiveServer(app) as server, watched_page(browser, server.base_url) as page:
        yield page


def send(page: Page, message: str) -> None:
    page.get_by_label("Message").fill(message)
    page.get_by_label("Message").press("Enter")


def test_replies_stream_into_the_log_on_one_thread(
    chat_page: Page, chat: ScriptedChat, screenshot: Screenshot
) -> None:
    page = chat_page
    log = page.get_by_role("log", name="Conversation")
    send(page, "I prefer tea")
    expect(log.locator(".chat-agent").last).to_have_text("Agent: You said: I prefer tea")
    expect(page.get_by_label("Message")).to_be_focused()
    expect(page.get_by_label("Message")).to_have_value("")

    send(page, "and green tea most")
    expect(log.locator(".chat-agent").last).to_have_text("Agent: You said: and green tea most")
    expect(log.locator(".chat-user")).to_have_text(["You: I prefer tea", "You: and green tea most"])
    screenshot(page, "conversation")
    thread = page.locator("#chat-thread").inner_text()
    assert [(t, a) for t, a, _ in chat.turns] == [(thread, None), (thread, None)]

    page.get_by_role("button", name="New thread").click()
    expect(log.locator("p")).to_have_count(0)
    page.get_by_label("Agent bucket").fill("coder")
    page.get_by_label("Agent bucket").press("Enter")
    send(page, "hello")
    expect(log.locator(".chat-agent")).to_have_text(["Agent: You said: hello"])
    new_thread, agent, _ = chat.turns[-1]
    assert new_thread != thread
    assert new_thread == page.locator("#chat-thread").inner_text()
    assert agent == "coder"


def test_a_failed_or_cut_turn_is_shown_as_such(
    chat_page: Page, chat: ScriptedChat, screenshot: Screenshot
) -> None:
    page = chat_page
    log = page.get_by_role("log", name="Conversation")
    send(page, "fail")
    expect(log.locator(".chat-agent.chat-error")).to_have_text(
        "Agent: Let me The turn failed: boom"
    )
    send(page, "cut")
    expect(log.locator(".chat-agent.chat-error").last).to_have_text(
        "Agent: Half a The reply was cut off before it ended."
    )
    screenshot(page, "failures")
