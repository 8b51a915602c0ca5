"""A small Honcho v3 server for tests: the routes the honcho backend uses, with real state.

It runs under uvicorn on a free 127.0.0.1 port in a thread. Shapes follow Honcho 3's API schemas
(ids `^[a-zA-Z0-9_-]+$` up to 512 characters, 100 messages per request, `Page` listings).
Honcho's deriver is an LLM; here a peer's representation is simply what it said, one line per
message, most relevant to the search query first. Tests read and change `FakeHoncho.state`.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

import uvicorn
from fastapi import Body, FastAPI, Request, Response
from fastapi.responses import JSONResponse

__all__ = ["FakeHoncho", "FakeState", "closed_port_url", "serve_fake_honcho"]

ID_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,512}$")
MAX_MESSAGE_SIZE = 25_000


@dataclass
class FakeWorkspace:
    peers: dict[str, dict[str, Any]] = field(default_factory=dict)  # peer -> configuration
    sessions: dict[str, set[str]] = field(default_factory=dict)  # session -> its peers
    messages: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FakeState:
    workspaces: dict[str, FakeWorkspace] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)  # "METHOD /path"
    api_key: str | None = None
    delay_seconds: float = 0.0  # every /v3 answer is sent this long after the work is done
    fail_status: int | None = None  # every /v3 request is answered with this status

    def session_messages(self, workspace: str, session: str) -> list[dict[str, Any]]:
        return [m for m in self.workspaces[workspace].messages if m["session_id"] == session]


class _NotFound(Exception):
    pass


class _Invalid(Exception):
    pass


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _check_id(value: Any) -> str:
    if not isinstance(value, str) or not ID_PATTERN.match(value):
        raise _Invalid(f"id {value!r} must match ^[a-zA-Z0-9_-]+$ (1..512)")
    return value


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def build_app(state: FakeState) -> FastAPI:
    # Every handler is `async def` without awaits: they run one at a time on the event loop, so
    # the state needs no lock even when clients write concurrently.
    app = FastAPI()

    @app.middleware("http")
    async def faults(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        state.requests.append(f"{request.method} {request.url.path}")
        if not request.url.path.startswith("/v3/"):
            return await call_next(request)
        sent = request.headers.get("authorization", "")
        if state.fail_status is not None:
            # A careless server that echoes the credentials it received.
            detail = f"simulated failure; you sent {sent!r}"
            return JSONResponse({"detail": detail}, status_code=state.fail_status)
        if state.api_key is not None and sent != f"Bearer {state.api_key}":
            return JSONResponse({"detail": "Invalid API key"}, status_code=401)
        response = await call_next(request)
        # After the work: a client that gives up has not stopped the write.
        await asyncio.sleep(state.delay_seconds)
        return response

    @app.exception_handler(_NotFound)
    async def not_found(request: Request, exc: _NotFound) -> JSONResponse:
        return JSONResponse({"detail": f"{exc} not found"}, status_code=404)

    @app.exception_handler(_Invalid)
    async def invalid(request: Request, exc: _Invalid) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    def workspace(name: str) -> FakeWorkspace:
        if name not in state.workspaces:
            raise _NotFound(f"workspace {name}")
        return state.workspaces[name]

    def session_of(name: str, session: str) -> FakeWorkspace:
        found = workspace(name)
        if session not in found.sessions:
            raise _NotFound(f"session {session}")
        return found

    def add_peer(found: FakeWorkspace, peer: Any, configuration: dict[str, Any]) -> None:
        found.peers.setdefault(_check_id(peer), configuration)

    def message_out(message: dict[str, Any]) -> dict[str, Any]:
        return {**message, "token_count": len(message["content"].split())}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v3/workspaces")
    async def get_or_create_workspace(body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        name = _check_id(body.get("id"))
        state.workspaces.setdefault(name, FakeWorkspace())
        return {"id": name, "metadata": {}, "configuration": {}, "created_at": _now()}

    @app.post("/v3/workspaces/{name}/peers")
    async def get_or_create_peer(
        name: str, body: Annotated[dict[str, Any], Body()]
    ) -> dict[str, Any]:
        found = workspace(name)
        add_peer(found, body.get("id"), dict(body.get("configuration") or {}))
        peer = body["id"]
        return {
            "id": peer,
            "workspace_id": name,
            "created_at": _now(),
            "metadata": {},
            "configuration": found.peers[peer],
        }

    @app.post("/v3/workspaces/{name}/sessions")
    async def get_or_create_session(
        name: str, body: Annotated[dict[str, Any], Body()]
    ) -> dict[str, Any]:
        found = workspace(name)
        session = _check_id(body.get("id"))
        members = found.sessions.setdefault(session, set())
        for peer, _config in (body.get("peers") or {}).items():
            add_peer(found, peer, {})
            members.add(peer)
        return {
            "id": session,
            "is_active": True,
            "workspace_id": name,
            "metadata": {},
            "configuration": {},
            "created_at": _now(),
        }

    @app.post("/v3/workspaces/{name}/sessions/{session}/peers")
    async def add_session_peers(
        name: str,
        session: str,
        body: Annotated[dict[str, Any], Body()],
    ) -> dict[str, Any]:
        found = session_of(name, session)
        for peer in body:
            add_peer(found, peer, {})
            found.sessions[session].add(peer)
        return {
            "id": session,
            "is_active": True,
            "workspace_id": name,
            "metadata": {},
            "configuration": {},
            "created_at": _now(),
        }

    @app.post("/v3/workspaces/{name}/sessions/{session}/messages")
    async def create_messages(
        name: str,
        session: str,
        body: Annotated[dict[str, Any], Body()],
    ) -> list[dict[str, Any]]:
        found = session_of(name, session)
        batch = body.get("messages") or []
        if not 1 <= len(batch) <= 100:
            raise _Invalid("messages: 1 to 100 per request")
        created = []
        for item in batch:
            if len(item["content"]) > MAX_MESSAGE_SIZE:
                raise _Invalid("content longer than MAX_MESSAGE_SIZE")
            add_peer(found, item["peer_id"], {})
            found.sessions[session].add(item["peer_id"])
            created.append(
                {
                    "id": uuid.uuid4().hex[:21],
                    "content": item["content"],
                    "peer_id": item["peer_id"],
                    "session_id": session,
                    "workspace_id": name,
                    "metadata": item.get("metadata") or {},
                    "created_at": _now(),
                }
            )
        found.messages.extend(created)
        return [message_out(m) for m in created]

    @app.post("/v3/workspaces/{name}/sessions/{session}/messages/list")
    async def list_messages(
        name: str, session: str, page: int = 1, size: int = 50
    ) -> dict[str, Any]:
        session_of(name, session)
        if not 1 <= size <= 100:
            raise _Invalid("size: 1 to 100")
        items = state.session_messages(name, session)
        pages = max(1, -(-len(items) // size))
        chosen = items[(page - 1) * size : page * size]
        return {
            "items": [message_out(m) for m in chosen],
            "total": len(items),
            "page": page,
            "size": size,
            "pages": pages,
        }

    @app.post("/v3/workspaces/{name}/peers/{peer}/representation")
    async def representation(
        name: str,
        peer: str,
        body: Annotated[dict[str, Any] | None, Body()] = None,
    ) -> dict[str, str]:
        found = workspace(name)
        if peer not in found.peers:
            raise _NotFound(f"peer {peer}")
        if found.peers[peer].get("observe_me") is False:
            return {"representation": ""}
        said = [m["content"] for m in found.messages if m["peer_id"] == peer]
        wanted = _words((body or {}).get("search_query") or "")
        said.sort(key=lambda text: -len(wanted & _words(text)))
        lines = "\n".join(f"- {text}" for text in said)
        return {"representation": f"Explicit observations:\n{lines}" if said else ""}

    @app.post("/v3/workspaces/{name}/search")
    async def search(name: str, body: Annotated[dict[str, Any], Body()]) -> list[dict[str, Any]]:
        found = workspace(name)
        wanted = _words(body.get("query") or "")
        scored = [(len(wanted & _words(m["content"])), m) for m in found.messages]
        hits = [m for score, m in sorted(scored, key=lambda pair: -pair[0]) if score]
        return [message_out(m) for m in hits[: body.get("limit", 10)]]

    return app


@dataclass
class FakeHoncho:
    url: str
    state: FakeState

    def reset(self) -> None:
        """Forget every workspace and request, and clear the faults and the key."""
        self.state.workspaces.clear()
        self.state.requests.clear()
        self.state.api_key = None
        self.state.delay_seconds = 0.0
        self.state.fail_status = None


@contextmanager
def serve_fake_honcho() -> Iterator[FakeHoncho]:
    """Run the fake on a free loopback port until the block ends."""
    state = FakeState()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(build_app(state), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the fake Honcho server did not start")
            threading.Event().wait(0.01)
        yield FakeHoncho(f"http://127.0.0.1:{port}", state)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def closed_port_url() -> str:
    """The URL of a loopback port nobody listens on: a server that is down."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
