"""The API documentation pages and the icon come from the gateway itself, never from a CDN."""

from __future__ import annotations

import re

import httpx

from deerflow.gateway.app import DOCS_ASSETS, STATIC_DIR

ASSET_REFERENCE = re.compile(r"""(?:src|href)=["']([^"']+)["']|url: *['"]([^'"]+)['"]""")


def referenced(html: str) -> list[str]:
    return [a or b for a, b in ASSET_REFERENCE.findall(html)]


def test_swagger_ui_and_redoc_load_only_local_files(client: httpx.Client) -> None:
    for page, script in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
        response = client.get(page)
        assert response.status_code == 200, response.text
        assert "text/html" in response.headers["content-type"]
        assert "://" not in response.text, f"{page} refers to another host"
        urls = referenced(response.text)
        assert f"{DOCS_ASSETS}/{script}" in urls
        for url in urls:
            asset = client.get(url)
            assert asset.status_code == 200, f"{page}: {url} -> {asset.status_code}"
            assert asset.content, url
    assert "openapi" in client.get("/openapi.json").json()


def test_the_favicon_is_served(client: httpx.Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 200
    assert response.content == (STATIC_DIR / "favicon.ico").read_bytes()
    assert response.content[:4] == b"\0\0\1\0", "an ICO file"
    assert '<link rel="icon" href="/favicon.ico">' in client.get("/").text
    assert "/favicon.ico" in referenced(client.get("/docs").text)
