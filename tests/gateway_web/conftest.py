"""The memory page in a real headless Chromium, against a real gateway on a loopback port.

Chromium is Debian's `/usr/bin/chromium` (another binary: `DEERFLOW_CHROMIUM`), driven by
Playwright through `executable_path`; without it these tests skip. Every test runs its own
gateway over DeerMem in `tmp_path`. Screenshots of each state the tests reach are kept in
`tests/artifacts/gateway_web/<test name>/` (git-ignored; CI uploads the folder).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.gateway_web.harness import Gateway, live_gateway, memory_config, watched_page

CHROMIUM: Final = Path(os.environ.get("DEERFLOW_CHROMIUM", "/usr/bin/chromium"))
# Root in a container, no GPU, no network: Chromium must not try to phone home.
CHROMIUM_FLAGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS: Final = Path(__file__).resolve().parents[1] / "artifacts" / "gateway_web"

Screenshot = Callable[[Page, str], Path]


# Package scope: while Playwright's sync API is started, its event loop counts as running in this
# thread, so `asyncio.run` in tests of other folders would fail.
@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(
            f"headless Chromium not found at {CHROMIUM}: install Debian's chromium "
            "(apt-get install chromium), as CI does, or set DEERFLOW_CHROMIUM"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True
        )
        yield browser
        browser.close()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    with live_gateway(memory_config(tmp_path), tmp_path / "home") as gateway:
        yield gateway


@pytest.fixture
def page(browser: Browser, gateway: Gateway) -> Iterator[Page]:
    """The page on the `gateway`; see `watched_page` for what fails the test."""
    with watched_page(browser, gateway.base_url) as page:
        yield page


@pytest.fixture
def screenshot(request: pytest.FixtureRequest) -> Screenshot:
    """`screenshot(page, "state")` keeps a full-page PNG, numbered in the order taken."""
    folder = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    taken: list[Path] = []

    def take(page: Page, state: str) -> Path:
        path = folder / f"{len(taken) + 1:02d}-{state}.png"
        page.screenshot(path=str(path), full_page=True)
        taken.append(path)
        return path

    return take
