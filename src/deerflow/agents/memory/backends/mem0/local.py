"""`transport: local`: mem0's open-source engine (`mem0.Memory`) inside this process.

mem0 is imported at construction (a second or more, once per process), so that a missing extra
stops startup and no request pays for it. The engine is built on first use, because its default
store (Qdrant on disk) locks its folder for one client per process: a manager that is built and
closed unused must not take the lock. Calls run one at a time behind a lock: the engine is not
documented as thread-safe, and the contract's async twins call from worker threads.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult

from deerflow.agents.memory.backends.mem0.transport import (
    Mem0NotFoundError,
    Mem0Record,
    Mem0TransportError,
    Scope,
)
from deerflow.redaction import redact_text

__all__ = ["COLLECTION", "LocalTransport", "import_mem0"]

COLLECTION = "deerflow"


def import_mem0(root: Path) -> Any:
    """Import mem0 with its process-wide settings made safe, naming the extra when it is missing.

    mem0 reads `MEM0_TELEMETRY` and `MEM0_DIR` once, at its first import. Telemetry goes off (it
    would phone home and open a second Qdrant store) and mem0's own files go under `root`, unless
    the operator set either variable. mem0 logs memory text at INFO, so its logger starts at
    WARNING unless the operator gave it a level.

    Raises:
        ValueError: mem0ai is not installed.
    """
    if importlib.util.find_spec("mem0") is None:
        raise ValueError(
            "memory.backend_config.transport: 'local' runs mem0's engine in this process and "
            "needs the mem0 extra, which is not installed: pip install 'deerflow-memory[mem0]' "
            "(or uv sync --extra mem0)"
        )
    os.environ.setdefault("MEM0_TELEMETRY", "false")
    os.environ.setdefault("MEM0_DIR", str(root))
    mem0_logger = logging.getLogger("mem0")
    if mem0_logger.level == logging.NOTSET:
        mem0_logger.setLevel(logging.WARNING)
    return importlib.import_module("mem0")


class _NoChatModel(BaseChatModel):
    """Given to mem0, which insists on an LLM, when `infer: false` means none is ever called."""

    @property
    def _llm_type(self) -> str:
        return "deerflow-no-llm"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        raise RuntimeError("mem0 called its LLM although infer is false and no model is set")


class LocalTransport:
    """mem0's `Memory` with a LangChain embedder and LLM, storing under `root`."""

    def __init__(
        self,
        root: Path,
        *,
        embedder: Any,
        embedding_dims: int,
        llm: BaseChatModel | None,
        vector_store: dict[str, Any] | None,
    ) -> None:
        self._mem0 = import_mem0(root)
        self._root = root
        self._embedder = embedder
        self._dims = embedding_dims
        self._llm = llm or _NoChatModel()
        self._vector_store = vector_store
        self._lock = threading.RLock()
        self._memory: Any = None
        self._client: Any = None  # the Qdrant client we opened, when the store is our default

    # -- the engine ----------------------------------------------------------------------------

    def _engine(self) -> Any:
        if self._memory is None:
            try:
                self._memory = self._build()
            except Exception as exc:
                # A half-built engine may hold the Qdrant folder lock; release it so a retry works.
                self._close_client()
                raise _wrap("building mem0's engine", exc) from exc
        return self._memory

    def _build(self) -> Any:
        self._root.mkdir(parents=True, exist_ok=True)
        config = {
            "vector_store": self._vector_store or self._default_store(),
            "embedder": {
                "provider": "langchain",
                "config": {"model": self._embedder, "embedding_dims": self._dims},
            },
            "llm": {"provider": "langchain", "config": {"model": self._llm}},
            "history_db_path": str(self._root / "history.db"),
        }
        return self._mem0.Memory.from_config(config)

    def _default_store(self) -> dict[str, Any]:
        qdrant_client = importlib.import_module("qdrant_client")
        self._client = qdrant_client.QdrantClient(path=str(self._root / "qdrant"))
        return {
            "provider": "qdrant",
            "config": {
                "collection_name": COLLECTION,
                "client": self._client,
                "embedding_model_dims": self._dims,
            },
        }

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _call(self, what: str, operation: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            engine = self._engine()
            try:
                return getattr(engine, operation)(*args, **kwargs)
            except Exception as exc:
                raise _wrap(what, exc) from exc

    # -- Transport -------------------------------------------------------------------------------

    def ping(self) -> None:
        with self._lock:
            self._engine()

    def add(
        self,
        messages: list[dict[str, str]],
        scope: Scope,
        *,
        metadata: dict[str, Any],
        infer: bool,
    ) -> list[str]:
        answer = self._call(
            "adding memories",
            "add",
            messages,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            run_id=scope.run_id,
            metadata=metadata,
            infer=infer,
        )
        return [str(item["id"]) for item in _results(answer) if item.get("id")]

    def get_all(self, scope: Scope, *, limit: int) -> list[Mem0Record]:
        answer = self._call("listing memories", "get_all", filters=_filters(scope), top_k=limit)
        return _results(answer)

    def search(
        self, query: str, scope: Scope, *, top_k: int, threshold: float, category: str | None
    ) -> list[Mem0Record]:
        filters = _filters(scope) | ({"category": category} if category else {})
        answer = self._call(
            "searching memories",
            "search",
            query,
            top_k=top_k,
            filters=filters,
            threshold=threshold,
        )
        return _results(answer)

    def get(self, memory_id: str) -> Mem0Record | None:
        record = self._call("reading a memory", "get", memory_id)
        return record if isinstance(record, dict) else None

    def update(self, memory_id: str, *, text: str | None, metadata: dict[str, Any]) -> None:
        with self._lock:
            if self.get(memory_id) is None:
                raise Mem0NotFoundError(f"no memory {memory_id!r}")
            self._call("updating a memory", "update", memory_id, text=text, metadata=metadata)

    def delete(self, memory_id: str) -> None:
        with self._lock:
            if self.get(memory_id) is None:
                raise Mem0NotFoundError(f"no memory {memory_id!r}")
            self._call("deleting a memory", "delete", memory_id)

    def delete_all(self, user_id: str, agent_id: str | None) -> None:
        self._call("deleting memories", "delete_all", user_id=user_id, agent_id=agent_id)

    def close(self) -> None:
        with self._lock:
            memory, self._memory = self._memory, None
            if memory is not None:
                memory.close()
            self._close_client()


def _filters(scope: Scope) -> dict[str, Any]:
    return {"user_id": scope.user_id, "agent_id": scope.agent_id}


def _results(answer: Any) -> list[Mem0Record]:
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        raise Mem0TransportError(f"mem0 answered without a results list: {type(answer).__name__}")
    return [item for item in results if isinstance(item, dict)]


def _wrap(what: str, exc: Exception) -> Mem0TransportError:
    if isinstance(exc, Mem0TransportError):
        return exc
    return Mem0TransportError(f"{what} failed: {redact_text(f'{type(exc).__name__}: {exc}')}")
