"""The Honcho v3 calls this backend makes, over the `honcho-ai` SDK's HTTP layer.

The SDK's HTTP client gives the timeout, the retries (with back-off and `Retry-After`), typed
errors and the route names; its high-level objects are not used, because they create the
workspace on any first call, reads included. Every failure, whether the server is down, slow,
refusing or answering nonsense, leaves this module as one `HonchoCallError` whose text never
holds the API key.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from deerflow.agents.memory.backends.honcho.messages import KEY_FIELD, OutgoingMessage
from deerflow.redaction import REDACTED, redact_text

try:
    from honcho.api_types import MessageResponse, RepresentationResponse
    from honcho.http import HonchoError, HonchoHTTPClient, NotFoundError, routes
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "The honcho memory backend needs the honcho-ai package, which the `honcho` extra "
        "installs: pip install 'deerflow-memory[honcho]' (or: uv sync --extra honcho)."
    ) from exc

__all__ = ["MESSAGES_PER_REQUEST", "HonchoCallError", "HonchoClient", "MessageResponse"]

# Honcho takes at most 100 messages per request and serves at most 100 per page.
MESSAGES_PER_REQUEST: Final = 100
PAGE_SIZE: Final = 100


class HonchoCallError(Exception):
    """A Honcho call failed. `not_found` tells a missing workspace, peer or session apart."""

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


class _Page(BaseModel):
    items: list[MessageResponse]
    page: int
    pages: int


class HonchoClient:
    """One HTTP client for every workspace; safe to share between threads."""

    def __init__(
        self, *, base_url: str, api_key: str | None, timeout: float, max_retries: int
    ) -> None:
        self._api_key = api_key
        self._http = HonchoHTTPClient(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )

    def close(self) -> None:
        self._http.close()

    def check_health(self) -> None:
        """Ask the server's `/health` route, which needs no workspace and no key."""
        with self._call("health check"):
            self._http.get("/health")

    def ensure_workspace(self, workspace: str) -> None:
        with self._call("get or create the workspace"):
            self._http.post(routes.workspaces(), body={"id": workspace})

    def ensure_peer(self, workspace: str, peer: str, *, observed: bool) -> None:
        """Get or create `peer`; Honcho reasons about it only when `observed`."""
        body = {"id": peer, "configuration": {"observe_me": observed}}
        with self._call("get or create a peer"):
            self._http.post(routes.peers(workspace), body=body)

    def ensure_session(self, workspace: str, session: str, peers: Sequence[str]) -> None:
        """Get or create `session` with `peers` in it (Honcho creates missing peers)."""
        body = {"id": session, "peers": {peer: {} for peer in peers}}
        with self._call("get or create the session"):
            self._http.post(routes.sessions(workspace), body=body)

    def add_session_peers(self, workspace: str, session: str, peers: Sequence[str]) -> None:
        with self._call("add peers to the session"):
            self._http.post(
                routes.session_peers(workspace, session), body={peer: {} for peer in peers}
            )

    def message_keys(self, workspace: str, session: str) -> set[str]:
        """The keys (`deerflow_id` metadata) of every message the session holds."""
        keys: set[str] = set()
        page = 1
        with self._call("list the session's messages"):
            while True:
                data = self._http.post(
                    routes.messages_list(workspace, session),
                    query={"page": page, "size": PAGE_SIZE},
                )
                listing = _Page.model_validate(data)
                keys.update(
                    key
                    for item in listing.items
                    if isinstance(key := item.metadata.get(KEY_FIELD), str)
                )
                if listing.page >= listing.pages:
                    return keys
                page = listing.page + 1

    def add_messages(
        self, workspace: str, session: str, messages: Sequence[OutgoingMessage]
    ) -> None:
        """Create up to `MESSAGES_PER_REQUEST` messages in one request."""
        body = {
            "messages": [
                {"peer_id": m.peer_id, "content": m.content, "metadata": {KEY_FIELD: m.key}}
                for m in messages
            ]
        }
        with self._call("add messages"):
            self._http.post(routes.messages(workspace, session), body=body)

    def representation(self, workspace: str, peer: str, query: str | None) -> str:
        """What Honcho has derived about `peer`, curated around `query` when given."""
        body = {"search_query": query} if query else {}
        with self._call("read the representation"):
            data = self._http.post(routes.peer_representation(workspace, peer), body=body)
            text: str = RepresentationResponse.model_validate(data).representation
        return text

    def search(self, workspace: str, query: str, limit: int) -> list[MessageResponse]:
        """Messages of the whole workspace matching `query`, best first."""
        body = {"query": query, "limit": limit}
        with self._call("search"):
            data = self._http.post(routes.workspace_search(workspace), body=body)
            if not isinstance(data, list):
                raise HonchoCallError(f"Honcho search answered {type(data).__name__}, not a list")
            return [MessageResponse.model_validate(item) for item in data]

    @contextmanager
    def _call(self, what: str) -> Iterator[None]:
        """Turn every failure of one call into `HonchoCallError`, the key masked."""
        try:
            yield
        except NotFoundError as exc:
            raise HonchoCallError(self._describe(what, exc), not_found=True) from None
        except (HonchoError, ValidationError) as exc:
            raise HonchoCallError(self._describe(what, exc)) from None

    def _describe(self, what: str, exc: Any) -> str:
        text = f"Honcho could not {what}: {type(exc).__name__}: {exc}"
        if self._api_key:
            text = text.replace(self._api_key, REDACTED)
        return redact_text(text)
