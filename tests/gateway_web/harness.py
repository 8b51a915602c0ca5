"""Driving the page and the gateway from tests: a live gateway, a watched browser page, locators."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx
from playwright.sync_api import Browser, ConsoleMessage, Locator, Page, Route

from deerflow.config import AppConfig
from deerflow.gateway.app import create_app
from tests.gateway.live import LiveServer

# Chromium logs every 4xx/5xx answer to the console; the tests provoke those on purpose.
_HTTP_ERROR_LOG: Final = "Failed to load resource"
CONFLICT_TEXT: Final = "The memory changed since you loaded it: reload and retry."


def memory_config(tmp_path: Path, **extra: Any) -> AppConfig:
    """DeerMem in `tmp_path`, plus any other top-level sections or memory keys in `extra`."""
    memory = {"backend_config": {"storage_path": str(tmp_path / "memory")}}
    memory.update(extra.pop("memory", {}))
    return AppConfig.model_validate({"memory": memory, **extra})


class Gateway:
    """A live gateway, and an HTTP client acting as another writer, behind the page's back."""

    def __init__(self, server: LiveServer, http: httpx.Client) -> None:
        self.base_url = server.base_url
        self.http = http

    def add_fact(
        self, content: str, category: str = "context", confidence: float = 0.7, agent: str = ""
    ) -> dict[str, Any]:
        answer = self.http.post(
            "/api/memory/facts",
            params=_agent(agent),
            json={"content": content, "category": category, "confidence": confidence},
        )
        assert answer.status_code == 201, answer.text
        fact: dict[str, Any] = answer.json()
        return fact

    def facts(self, agent: str = "") -> list[dict[str, Any]]:
        answer = self.http.get("/api/memory", params=_agent(agent))
        assert answer.status_code == 200, answer.text
        facts: list[dict[str, Any]] = answer.json()["facts"]
        return facts

    def contents(self, agent: str = "") -> set[str]:
        return {fact["content"] for fact in self.facts(agent)}


def _agent(agent: str) -> dict[str, str]:
    return {"agent_name": agent} if agent else {}


@contextmanager
def live_gateway(config: AppConfig, home: Path, token: str | None = None) -> Iterator[Gateway]:
    """`create_app(config)` served on a free loopback port; `token` authenticates the client."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with (
        LiveServer(create_app(config, home=home)) as server,
        httpx.Client(base_url=server.base_url, headers=headers) as http,
    ):
        yield Gateway(server, http)


class PageWatch:
    """What the page did wrong: script errors and requests to anywhere but the gateway."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.outside: list[str] = []

    def console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not message.text.startswith(_HTTP_ERROR_LOG):
            self.errors.append(message.text)

    def route(self, route: Route) -> None:
        url = urlsplit(route.request.url)
        if url.scheme in {"http", "https", "ws", "wss"} and url.hostname != "127.0.0.1":
            self.outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    def check(self) -> None:
        assert self.errors == [], f"script errors on the page: {self.errors}"
        assert self.outside == [], f"the page reached beyond the gateway: {self.outside}"


@contextmanager
def watched_context(browser: Browser, base_url: str) -> Iterator[tuple[Page, PageWatch]]:
    """A page in a fresh browser context on the gateway, and what it did wrong so far."""
    context = browser.new_context(
        base_url=base_url, viewport={"width": 1280, "height": 1000}, accept_downloads=True
    )
    watch = PageWatch()
    context.route("**/*", watch.route)
    page = context.new_page()
    page.on("console", watch.console)
    page.on("pageerror", lambda error: watch.errors.append(str(error)))
    try:
        yield page, watch
    finally:
        context.close()


@contextmanager
def watched_page(browser: Browser, base_url: str) -> Iterator[Page]:
    """The page in a fresh browser context, once its first load has finished.

    Leaving fails the test if a script error happened or the page requested anything but the
    gateway (the page must work with no internet: no CDN, no fonts from elsewhere).
    """
    with watched_context(browser, base_url) as (page, watch):
        page.goto("/")
        page.wait_for_selector("body[data-ready=true]")
        yield page
    watch.check()


def reload(page: Page) -> None:
    """Load the page again and wait until it has read everything."""
    page.reload()
    page.wait_for_selector("body[data-ready=true]")


def fact_item(page: Page, content: str) -> Locator:
    """The card of the fact whose content is exactly `content`."""
    return page.locator("#fact-list li.fact").filter(has=page.get_by_text(content, exact=True))


def shown_contents(page: Page) -> list[str]:
    """The fact contents the list shows, in display order."""
    return page.locator("#fact-list .fact-content").all_inner_texts()
