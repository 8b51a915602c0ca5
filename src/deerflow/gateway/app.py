"""`create_app`: the FastAPI application of `deerflow serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.routing import Match, Mount
from starlette.types import Scope

from deerflow.agents.memory.manager import MemoryManager
from deerflow.config import AppConfig, runtime_home
from deerflow.gateway import chat_routes, memory_routes, transfer_routes
from deerflow.gateway.chat_routes import ChatAgents
from deerflow.gateway.errors import install_error_handlers
from deerflow.gateway.lifecycle import GatewayState, health_router, lifespan
from deerflow.gateway.tokens import TokenStore, tokens_path
from deerflow.version import package_version

__all__ = ["STATIC_DIR", "create_app"]

STATIC_DIR: Final = Path(__file__).parent / "static"
DOCS_ASSETS: Final = "/docs-assets"
FAVICON: Final = "/favicon.ico"

DESCRIPTION: Final = """\
The memory of DeerFlow over HTTP. Every memory route acts on the caller's own memory: the user
comes from the bearer token (`auth.mode: token`) or is `default` (`auth.mode: none`), never
from the request. `agent_name` selects an agent's bucket of facts.

Errors are `{"error": code, "detail": text}`: 400 bad input, 401 no or unknown token,
403 foreign host or origin, 404 unknown fact, 409 duplicate or conflict (reload and retry),
422 request does not match this schema, 500 corrupted storage or a bug (fixed text),
501 the backend does not support the operation, 503 memory off, not yet warm, or a required
read failed.
"""


def create_app(
    config: AppConfig, *, manager: MemoryManager | None = None, home: Path | None = None
) -> FastAPI:
    """The gateway for `config`.

    `manager`: serve this backend instead of building one at startup; the gateway flushes and
    closes it at shutdown either way. `home`: the runtime home (default
    `$DEER_FLOW_HOME`), where the token file and custom agents live.

    Raises:
        ValueError: with `auth.mode: token`, the token file exists but cannot be read.
    """
    home = home or runtime_home()
    tokens = None
    if config.auth.mode == "token":
        tokens = TokenStore(tokens_path(home))
        tokens.records()  # a broken token file stops startup, not the first request
    # Swagger UI (/docs) and ReDoc (/redoc) from the files fastapi-offline ships, not a CDN: the
    # gateway often runs where the internet is not reachable.
    app = FastAPIOffline(
        title="DeerFlow Memory",
        version=package_version(),
        description=DESCRIPTION,
        lifespan=lifespan,
        static_url=DOCS_ASSETS,
        favicon_url=FAVICON,
        redoc_url=None,
    )
    app.get("/redoc", include_in_schema=False)(redoc_page)
    app.state.gateway = GatewayState(config=config, home=home, tokens=tokens, manager=manager)
    app.state.chat_agents = ChatAgents()
    install_error_handlers(app)
    app.include_router(health_router)
    app.include_router(memory_routes.router)
    app.include_router(transfer_routes.router)
    app.include_router(chat_routes.router)
    app.router.routes.append(
        PageMount("/", StaticFiles(directory=STATIC_DIR, html=True, check_dir=False), name="page")
    )
    return app


async def redoc_page() -> HTMLResponse:
    """ReDoc from the local files. Its sidebar shows a logo from the ReDoc CDN: the page's
    policy keeps images local, so no request leaves the machine (the logo hides itself)."""
    page = get_redoc_html(
        openapi_url="/openapi.json",
        title="DeerFlow Memory - ReDoc",
        redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
        redoc_favicon_url=FAVICON,
        with_google_fonts=False,
    )
    page.headers["Content-Security-Policy"] = "img-src 'self' data:"
    return page


class PageMount(Mount):
    """The page's files at `/`, leaving `/api` alone.

    A plain mount at `/` matches every path, so `GET /api/memory/import` (a POST-only route)
    would get the static 404 instead of a 405 naming the allowed methods.
    """

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        path = scope.get("path", "")
        if path == "/api" or path.startswith("/api/"):
            return Match.NONE, {}
        return super().matches(scope)
