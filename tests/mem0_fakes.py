"""Stand-ins for the mem0 backend's tests: models for mem0's real engine, and a mem0 REST server.

`HashingEmbeddings` is a hashing bag of words: texts that share words get similar vectors, so
mem0's real vector search finds what a lexical search would. `ScriptedExtractor` answers mem0's
extraction call with the memories it was given. `FakeMem0Server` serves, on 127.0.0.1, the routes
of mem0's Platform API that the backend's `http` transport uses, with the Platform's shapes
(`Authorization: Token`, `filters: {"AND": [...]}`, paginated listing).
"""

from __future__ import annotations

import json
import math
import re
import threading
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from langchain_core.embeddings import Embeddings
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from pydantic import Field

DIMS = 256
API_KEY = "m0-test-key-4f1b2c3d"
HERE = "tests.mem0_fakes"


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class HashingEmbeddings(Embeddings):
    """Each word adds 1 to one of `DIMS` dimensions; the vector is normalised."""

    def embed_query(self, text: str) -> list[float]:
        vector = [0.0] * DIMS
        for word in _words(text):
            vector[zlib.crc32(word.encode()) % DIMS] += 1.0
        norm = math.sqrt(sum(value * value for value in vector)) or 1.0
        return [value / norm for value in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]


class BrokenEmbeddings(HashingEmbeddings):
    """An embedding service that is down."""

    def embed_query(self, text: str) -> list[float]:
        raise ConnectionError("embedding service unreachable")


class ScriptedExtractor(FakeListChatModel):
    """Answers every extraction call of mem0 with `memories`, in mem0's JSON format."""

    responses: list[str] = Field(default_factory=list)
    memories: list[str] = Field(default_factory=list)

    def model_post_init(self, context: Any, /) -> None:
        self.responses = [json.dumps({"memory": [{"text": text} for text in self.memories]})]


def local_config(storage_path: Any, **overrides: Any) -> dict[str, Any]:
    """A `transport: local` backend_config on the fakes above, mem0 extracting `memories`."""
    return {
        "storage_path": str(storage_path),
        "transport": "local",
        "embedder": {"use": f"{HERE}:HashingEmbeddings"},
        "embedding_dims": DIMS,
        "model": {"use": f"{HERE}:ScriptedExtractor", "memories": ["The user likes green tea."]},
        **overrides,
    }


class FakeMem0Server:
    """mem0's REST routes over an in-memory list of records, with failures on request.

    Attributes:
        records: the stored memories, in mem0's record shape.
        requests: (method, path, query, json body) of every request, in order.
        fail_status: when set, every request is answered with this status.
    """

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.fail_status: int | None = None
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def seed(self, content: str, **ids: str) -> dict[str, Any]:
        """Store a memory directly, as if another client had written it."""
        now = datetime.now(UTC).isoformat()
        record = {
            "id": str(uuid.uuid4()),
            "memory": content,
            "metadata": {},
            "created_at": now,
            "updated_at": now,
            "user_id": None,
            "agent_id": None,
            "run_id": None,
            **ids,
        }
        with self._lock:
            self.records.append(record)
        return record

    def paths(self) -> list[str]:
        return [f"{method} {path}" for method, path, _, _ in self.requests]

    @contextmanager
    def running(self) -> Iterator[FakeMem0Server]:
        thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._httpd.shutdown()
            self._httpd.server_close()
            thread.join()

    # -- routes ----------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        """Return (status, JSON answer) for one request."""
        with self._lock:
            route = (method, path)
            if route == ("GET", "/v1/ping/"):
                return 200, {"status": "ok", "org_id": "org", "project_id": "proj"}
            if route == ("POST", "/v3/memories/add/"):
                return 200, self._add(body)
            if route == ("POST", "/v3/memories/"):
                return self._list(body, query)
            if route == ("POST", "/v3/memories/search/"):
                return self._search(body)
            if route == ("DELETE", "/v1/memories/"):
                return self._delete_all(query)
            match = re.fullmatch(r"/v1/memories/([^/]+)/", path)
            if match:
                return self._one(method, match.group(1), body)
            return 404, {"detail": "no such route"}

    def _add(self, body: dict[str, Any]) -> Any:
        ids = {key: body.get(key) for key in ("user_id", "agent_id", "run_id")}
        new = []
        for message in body["messages"]:
            now = datetime.now(UTC).isoformat()
            record = {
                "id": str(uuid.uuid4()),
                "memory": message["content"],
                "metadata": dict(body.get("metadata") or {}),
                "created_at": now,
                "updated_at": now,
                **ids,
            }
            self.records.append(record)
            new.append({"id": record["id"], "event": "ADD", "data": {"memory": record["memory"]}})
        if body.get("infer", True):
            # The Platform infers later and answers with a queued event, without memory ids.
            return [{"message": "queued", "status": "PENDING", "event_id": str(uuid.uuid4())}]
        return {"results": new}

    def _matches(self, record: dict[str, Any], filters: Any) -> bool:
        conditions = filters["AND"] if isinstance(filters, dict) and "AND" in filters else None
        if not isinstance(conditions, list) or not conditions:
            raise ValueError(f"unsupported filters: {filters!r}")
        for condition in conditions:
            [(key, value)] = condition.items()
            if key == "metadata":
                if any(record["metadata"].get(k) != v for k, v in value.items()):
                    return False
            elif key in ("user_id", "agent_id", "run_id"):
                if record.get(key) != value:
                    return False
            else:
                raise ValueError(f"unsupported filter key: {key!r}")
        return True

    def _list(self, body: dict[str, Any], query: dict[str, list[str]]) -> Any:
        page = int(query["page"][0])
        size = int(query["page_size"][0])
        try:
            found = [r for r in self.records if self._matches(r, body.get("filters"))]
        except ValueError as exc:
            return 400, {"detail": str(exc)}
        found.sort(key=lambda record: record["created_at"], reverse=True)
        chunk = found[(page - 1) * size : page * size]
        more = page * size < len(found)
        next_page = f"{self.base_url}/v3/memories/?page={page + 1}&page_size={size}"
        return 200, {
            "count": len(found),
            "next": next_page if more else None,
            "previous": None,
            "results": chunk,
        }

    def _search(self, body: dict[str, Any]) -> Any:
        wanted = set(_words(body["query"]))
        try:
            found = [r for r in self.records if self._matches(r, body.get("filters"))]
        except ValueError as exc:
            return 400, {"detail": str(exc)}
        scored = []
        for record in found:
            words = set(_words(record["memory"]))
            score = len(wanted & words) / math.sqrt(len(wanted) * len(words) or 1)
            if score >= body.get("threshold", 0.1):
                scored.append({**record, "score": score})
        scored.sort(key=lambda record: -record["score"])
        return 200, {"results": scored[: body.get("top_k", 10)]}

    def _delete_all(self, query: dict[str, list[str]]) -> Any:
        wanted = {key: values[0] for key, values in query.items()}
        if "user_id" not in wanted:
            return 400, {"detail": "an entity id is required"}
        self.records = [r for r in self.records if any(r.get(k) != v for k, v in wanted.items())]
        return 200, {"message": "Memories deleted successfully!"}

    def _one(self, method: str, memory_id: str, body: Any) -> Any:
        record = next((r for r in self.records if r["id"] == memory_id), None)
        if record is None:
            return 404, {"detail": "Memory not found"}
        if method == "GET":
            return 200, record
        if method == "PUT":
            if body.get("text") is not None:
                record["memory"] = body["text"]
            if body.get("metadata") is not None:
                record["metadata"] = dict(body["metadata"])
            record["updated_at"] = datetime.now(UTC).isoformat()
            return 200, {"message": "Memory updated successfully!"}
        if method == "DELETE":
            self.records.remove(record)
            return 200, {"message": "Memory deleted successfully!"}
        return 405, {"detail": "method not allowed"}


def _handler(server: FakeMem0Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            server.requests.append((self.command, url.path, query, body))
            if server.fail_status is not None:
                status, answer = server.fail_status, {"detail": "injected failure"}
            elif self.headers.get("Authorization") != f"Token {API_KEY}":
                status, answer = 401, {"detail": "Invalid API key"}
            else:
                status, answer = server.handle(self.command, url.path, query, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the tests read `server.requests` instead."""

    return Handler


def http_config(server: FakeMem0Server, **overrides: Any) -> dict[str, Any]:
    """A `transport: http` backend_config pointing at `server`, the key in $MEM0_TEST_KEY."""
    return {
        "transport": "http",
        "base_url": server.base_url,
        "api_key_env": "MEM0_TEST_KEY",
        "timeout_seconds": 5,
        **overrides,
    }
