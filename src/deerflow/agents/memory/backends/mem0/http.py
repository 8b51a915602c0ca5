"""`transport: http`: the mem0 Platform's REST API (or a server that speaks it), over httpx.

The routes and payloads are those of mem0's own `MemoryClient` (mem0ai 2.2): entity ids go into
`filters` for listing and search, at the top level for add and delete-all; `Authorization:
Token <key>`. The key is read from the environment once and lives only in the client's headers.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import quote

import httpx

from deerflow.agents.memory.backends.mem0.transport import (
    Mem0AuthError,
    Mem0NotFoundError,
    Mem0Record,
    Mem0TransportError,
    Scope,
)

__all__ = ["PAGE_SIZE", "HttpTransport"]

PAGE_SIZE: Final = 100


class HttpTransport:
    """A thread-safe httpx client for the mem0 routes the manager uses."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        timeout_seconds: float,
    ) -> None:
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Token {api_key}"
        self._client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_seconds)

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        what = f"{method} {path}"
        try:
            response = self._client.request(method, path, json=json, params=params)
        except httpx.HTTPError as exc:
            # The exception text names the URL at most; headers (the key) are never in it.
            raise Mem0TransportError(f"{what}: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status in (401, 403):
            raise Mem0AuthError(f"{what}: mem0 refused the credentials (HTTP {status})")
        if status == 404:
            raise Mem0NotFoundError(f"{what}: not found (HTTP 404)")
        if status >= 400:
            raise Mem0TransportError(f"{what}: HTTP {status}")
        try:
            return response.json()
        except ValueError as exc:
            raise Mem0TransportError(f"{what}: the answer is not JSON") from exc

    def ping(self) -> None:
        self._request("GET", "/v1/ping/")

    def add(
        self,
        messages: list[dict[str, str]],
        scope: Scope,
        *,
        metadata: dict[str, Any],
        infer: bool,
    ) -> list[str]:
        payload: dict[str, Any] = {
            "messages": messages,
            "user_id": scope.user_id,
            "agent_id": scope.agent_id,
            "metadata": metadata,
            "infer": infer,
        }
        if scope.run_id:
            payload["run_id"] = scope.run_id
        answer = self._request("POST", "/v3/memories/add/", json=payload)
        # Without inference the Platform answers with the stored memories; with it, an event
        # that is processed later and carries no ids yet.
        events = answer.get("results") if isinstance(answer, dict) else answer
        if not isinstance(events, list):
            return []
        return [str(event["id"]) for event in events if isinstance(event, dict) and event.get("id")]

    def get_all(self, scope: Scope, *, limit: int) -> list[Mem0Record]:
        records: list[Mem0Record] = []
        page = 1
        while len(records) < limit:
            answer = self._request(
                "POST",
                "/v3/memories/",
                json={"filters": _filters(scope, None)},
                params={"page": page, "page_size": PAGE_SIZE},
            )
            records.extend(_results(answer, "POST /v3/memories/"))
            if not answer.get("next"):
                break
            page += 1
        return records[:limit]

    def search(
        self, query: str, scope: Scope, *, top_k: int, threshold: float, category: str | None
    ) -> list[Mem0Record]:
        payload = {
            "query": query,
            "filters": _filters(scope, category),
            "top_k": top_k,
            "threshold": threshold,
        }
        answer = self._request("POST", "/v3/memories/search/", json=payload)
        return _results(answer, "POST /v3/memories/search/")

    def get(self, memory_id: str) -> Mem0Record | None:
        try:
            record = self._request("GET", _memory_path(memory_id))
        except Mem0NotFoundError:
            return None
        if not isinstance(record, dict):
            raise Mem0TransportError(f"GET {_memory_path(memory_id)}: the answer is not a memory")
        return record

    def update(self, memory_id: str, *, text: str | None, metadata: dict[str, Any]) -> None:
        payload: dict[str, Any] = {"metadata": metadata}
        if text is not None:
            payload["text"] = text
        self._request("PUT", _memory_path(memory_id), json=payload)

    def delete(self, memory_id: str) -> None:
        self._request("DELETE", _memory_path(memory_id))

    def delete_all(self, user_id: str, agent_id: str | None) -> None:
        params = {"user_id": user_id} | ({"agent_id": agent_id} if agent_id else {})
        self._request("DELETE", "/v1/memories/", params=params)

    def close(self) -> None:
        self._client.close()


def _memory_path(memory_id: str) -> str:
    return f"/v1/memories/{quote(memory_id, safe='')}/"


def _filters(scope: Scope, category: str | None) -> dict[str, Any]:
    conditions: list[dict[str, Any]] = [{"user_id": scope.user_id}, {"agent_id": scope.agent_id}]
    if category:
        conditions.append({"metadata": {"category": category}})
    return {"AND": conditions}


def _results(answer: Any, what: str) -> list[Mem0Record]:
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        raise Mem0TransportError(f"{what}: the answer has no results list")
    return [item for item in results if isinstance(item, dict)]
