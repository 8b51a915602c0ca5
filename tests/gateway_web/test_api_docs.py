"""Swagger UI and ReDoc render in a browser that can reach nothing but the gateway."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.gateway_web.conftest import Screenshot
from tests.gateway_web.harness import Gateway, watched_context

# ReDoc's sidebar asks its CDN for a logo; the page's policy blocks it before it leaves.
REDOC_LOGO_BLOCKED = "Loading the image 'https://cdn.redoc.ly/redoc/logo-mini.svg' violates"


def test_swagger_ui_and_redoc_render_offline(
    browser: Browser, gateway: Gateway, screenshot: Screenshot
) -> None:
    with watched_context(browser, gateway.base_url) as (page, watch):
        page.goto("/docs")
        operation = page.locator(".opblock-summary-path", has_text="/api/memory/facts/{fact_id}")
        expect(operation.first).to_be_visible()
        screenshot(page, "swagger-ui")

        page.goto("/redoc")
        expect(page.get_by_role("heading", name="Store one fact")).to_be_visible()
        expect(page.locator("img[alt='redocly logo']")).to_have_count(0)
        screenshot(page, "redoc")
    assert watch.outside == [], "nothing was requested beyond the gateway"
    assert [e for e in watch.errors if not e.startswith(REDOC_LOGO_BLOCKED)] == []


def test_the_page_has_an_icon(page: Page) -> None:
    href = page.locator("link[rel=icon]").get_attribute("href")
    assert href is not None
    icon = page.request.get(href)
    assert icon.status == 200
    assert "icon" in icon.headers["content-type"]
    assert icon.body()[:4] == b"\0\0\1\0", "an ICO file"
