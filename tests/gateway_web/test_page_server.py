"""The page against other server setups: a backend with fewer operations, secrets in the
configuration, token auth, and no chat route."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from deerflow.gateway import chat_routes
from deerflow.gateway.tokens import TokenStore, tokens_path
from tests.gateway_web.conftest import Screenshot
from tests.gateway_web.harness import fact_item, live_gateway, memory_config, watched_page

SECRET = "sk-test-4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"


def test_a_backend_without_the_operations_says_so(
    browser: Browser, tmp_path: Path, screenshot: Screenshot
) -> None:
    config = memory_config(tmp_path, memory={"manager_class": "noop"})
    with (
        live_gateway(config, tmp_path / "home") as gateway,
        watched_page(browser, gateway.base_url) as page,
    ):
        expect(page.get_by_role("alert")).to_contain_text(
            "This backend does not support reading memory."
        )
        # Controls of missing operations are replaced by a note, not left to fail.
        expect(page.locator("#add-form")).to_be_hidden()
        expect(page.locator("#import-form")).to_be_hidden()
        for feature in ("adding facts", "history", "export", "import"):
            expect(page.get_by_text(f"This backend does not support {feature}.")).to_be_visible()
        expect(page.locator("#server-status")).to_have_text("Backend noop · user default")
        # Without a document to show, the operations the backend has still work.
        page.get_by_label("Sort by").select_option("confidence")
        page.get_by_label("Search facts").fill("tea")
        page.get_by_label("Search facts").press("Enter")
        expect(page.locator("#facts-caption")).to_have_text("0 results for “tea”")
        screenshot(page, "noop")


def test_secrets_in_the_configuration_never_reach_the_page(
    browser: Browser, tmp_path: Path, screenshot: Screenshot
) -> None:
    config = memory_config(
        tmp_path,
        memory={
            "backend_config": {
                "storage_path": str(tmp_path / "memory"),
                "model": {"provider": "openai", "model": "gpt-4o-mini", "api_key": SECRET},
            }
        },
    )
    with (
        live_gateway(config, tmp_path / "home") as gateway,
        watched_page(browser, gateway.base_url) as page,
    ):
        page.get_by_text("Show configuration").click()
        view = page.locator("#config-view")
        expect(view).to_contain_text('"model": "gpt-4o-mini"')
        expect(view).to_contain_text('"api_key": "***"')
        assert SECRET not in page.content()
        assert SECRET not in page.locator("body").inner_text()
        screenshot(page, "config")


def test_token_auth_asks_for_a_token_and_shows_only_that_users_memory(
    browser: Browser, tmp_path: Path, screenshot: Screenshot
) -> None:
    home = tmp_path / "home"
    tokens = TokenStore(tokens_path(home))
    _, alice = tokens.add("alice")
    _, bob = tokens.add("bob")
    config = memory_config(tmp_path, auth={"mode": "token"})
    with live_gateway(config, home, token=bob) as as_bob:
        as_bob.add_fact("Bob prefers coffee")
    with (
        live_gateway(config, home, token=alice) as gateway,
        watched_page(browser, gateway.base_url) as page,
    ):
        gateway.add_fact("Alice prefers tea")
        token_input = page.get_by_label("Access token")
        expect(token_input).to_be_focused()
        expect(page.get_by_role("alert")).to_have_text(
            "This server needs an access token: enter it above."
        )
        screenshot(page, "asks-for-token")

        token_input.fill("not-a-token")
        token_input.press("Enter")
        expect(page.get_by_role("alert")).to_contain_text("The access token was refused")
        expect(page.get_by_label("Access token")).to_be_focused()

        page.get_by_label("Access token").fill(alice)
        page.get_by_label("Access token").press("Enter")
        expect(fact_item(page, "Alice prefers tea")).to_have_count(1)
        expect(fact_item(page, "Bob prefers coffee")).to_have_count(0)
        expect(page.locator("#server-status")).to_have_text("Backend deermem · user alice")
        expect(page.get_by_label("Access token")).to_be_hidden()
        # The token is the only credential the page holds, and it never shows it.
        assert alice not in page.locator("body").inner_text()
        screenshot(page, "signed-in")


def test_chat_says_it_is_not_available_when_no_model_can_run(
    page: Page, screenshot: Screenshot, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No model is configured, and the server never installs the offline one: as on a machine
    # where `make demo` has not installed it yet, whatever this test environment holds.
    monkeypatch.setattr(chat_routes, "local_extra_installed", lambda: False)
    page.get_by_label("Message").fill("Hello")
    page.get_by_label("Message").press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("Chat is not available on this server")
    expect(page.get_by_label("Message")).to_be_focused()
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    screenshot(page, "chat-unavailable")
