"""The `mem0` backend: memory kept by mem0, in this process (`local`) or on a server (`http`).

Identity: DeerFlow's user_id is mem0's `user_id`, the agent is `agent_id` and the thread is
`run_id`. mem0 matches only the ids a read names, so the default agent bucket needs an id of its
own (`default_agent_id`); otherwise it would see every agent's memories. Reads never filter by
thread: memory carries across conversations. `run_id` gives mem0 the thread on writes, which its
extraction uses as session context.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from pydantic import PrivateAttr

from deerflow.agents.memory.backends.mem0 import records
from deerflow.agents.memory.backends.mem0.config import (
    HttpConfig,
    LocalConfig,
    Mem0Config,
    parse_config,
)
from deerflow.agents.memory.backends.mem0.conversation import (
    KeepHidden,
    SentTurns,
    conversation_turns,
)
from deerflow.agents.memory.backends.mem0.http import HttpTransport
from deerflow.agents.memory.backends.mem0.local import LocalTransport
from deerflow.agents.memory.backends.mem0.transport import (
    Mem0AuthError,
    Mem0NotFoundError,
    Mem0Record,
    Mem0TransportError,
    Scope,
    Transport,
)
from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactNotFoundError,
    MemoryAccessError,
    MemoryManager,
    MemoryManagerError,
    MemoryMode,
    MemoryReadError,
    validate_category,
    validate_confidence,
    validate_content,
)

__all__ = ["DEFAULT_USER", "Mem0MemoryManager"]

logger = logging.getLogger(__name__)

DEFAULT_USER = "default"
T = TypeVar("T")
TraceContext = Callable[[str | None], AbstractContextManager[None]]


class Mem0MemoryManager(MemoryManager):
    """mem0 behind the contract: search, documents of facts, and fact CRUD.

    Keys (`memory.backend_config`) are documented in docs/backend-mem0.md. Writes go to mem0 when
    `add()` is called (no queue), off the event loop through the contract's async twins.
    """

    supports_search: ClassVar[bool] = True
    # mem0 learns from every conversation, also when the model has the memory tools.
    requires_passive_writes_in_tool_mode: ClassVar[bool] = True

    _settings: Mem0Config = PrivateAttr()
    _transport: Transport = PrivateAttr()
    _keep_hidden: KeepHidden | None = PrivateAttr(default=None)
    _trace: TraceContext | None = PrivateAttr(default=None)
    _sent: SentTurns = PrivateAttr(default_factory=SentTurns)

    @classmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **host_hooks: Any
    ) -> Self:
        return cls(
            backend_config=backend_config,
            mode=mode,
            callbacks=host_hooks.get("callbacks"),
            host_hooks=host_hooks,
        )

    def __init__(self, /, **data: Any) -> None:
        # Host hooks are the host's callables, not configuration, so they are not a field.
        hooks: dict[str, Any] = data.pop("host_hooks", {})
        super().__init__(**data)
        self._settings = parse_config(self.backend_config)
        self._transport = _build_transport(self._settings, hooks)
        self._keep_hidden = hooks.get("should_keep_hidden_message")
        self._trace = hooks.get("trace_context_manager")

    # -- writes from conversations -------------------------------------------------------------

    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        """Send the turns of `messages` that were not sent before to mem0.

        Raises:
            MemoryManagerError: mem0 failed and `failure_policy.write` is `raise`
                (`MemoryAccessError` when it refused the credentials).
        """
        scope = self._scope(user_id, agent_name, thread_id)
        thread = (scope.user_id, scope.agent_id, thread_id)
        new = self._sent.claim(thread, conversation_turns(messages, self._keep_hidden))
        if not new:
            return
        trace = self._trace(trace_id) if self._trace else nullcontext()
        try:
            with trace:
                self._transport.add(
                    [turn.as_mem0() for turn in new],
                    scope,
                    metadata={"source": "conversation", "category": "context"},
                    infer=self._settings.infer,
                )
        except Mem0TransportError as exc:
            self._sent.release(thread, new)
            if self._settings.failure_policy.write == "raise":
                raise self._error(exc, "writing a conversation", MemoryManagerError) from exc
            logger.error(
                "mem0 dropped %d message(s) of thread %s (failure_policy.write: log_and_drop): %s",
                len(new),
                thread_id,
                self._explain(exc),
            )

    def warm(self) -> bool:
        """Check that mem0 answers: builds the local engine, or pings the server.

        Raises:
            MemoryReadError: mem0 is not ready and `startup_policy` is `fail_fast`
                (`MemoryAccessError` when it refused the credentials).
        """
        try:
            self._transport.ping()
        except Mem0TransportError as exc:
            if self._settings.startup_policy == "fail_fast":
                raise self._error(exc, "starting up", MemoryReadError) from exc
            logger.warning("mem0 is not ready (startup_policy: tolerate): %s", self._explain(exc))
            return False
        return True

    # -- reads -----------------------------------------------------------------------------------

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        """The memories most relevant to `query` (else the newest) within `max_injection_chars`.

        Raises:
            MemoryReadError: mem0 failed and `failure_policy.read` is `fail_closed`.
        """
        scope = self._scope(user_id, agent_name)
        top_k = self._settings.context_top_k
        if query and query.strip():
            found = self._policy_read("reading context", lambda: self._search(query, scope, top_k))
        else:
            found = self._policy_read("reading context", lambda: self._newest(scope)[:top_k])
        if found is None:
            return ""
        return records.render_context(found, self._settings.max_injection_chars)

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        """mem0's search in one bucket, as facts with a `score`, best first.

        Raises:
            ValueError: an empty query or an unknown category.
            MemoryReadError: mem0 failed and `failure_policy.read` is `fail_closed`.
        """
        query = validate_content(query)
        if category is not None:
            validate_category(category)
        scope = self._scope(user_id, agent_name)
        if top_k <= 0:
            return []
        found = self._policy_read("searching", lambda: self._search(query, scope, top_k, category))
        hits = records.facts(found or [])
        return sorted(hits, key=lambda fact: -float(fact.get("score", 0.0)))

    def get_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """The bucket's memories as a document of facts (mem0 keeps no summaries).

        Raises:
            MemoryReadError: mem0 failed (whatever the read policy: an empty document would lie).
            MemoryAccessError: mem0 refused the credentials.
        """
        scope = self._scope(user_id, agent_name)
        return records.document(self._explicit("reading memory", lambda: self._newest(scope)))

    def reload_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """Same as `get_memory`: nothing is cached."""
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def export_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """Same as `get_memory`."""
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    # -- explicit writes -------------------------------------------------------------------------

    def create_fact(
        self,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        """Store `content` as it is (no extraction); return the document and the new id.

        The id is None when the server stores asynchronously and has not said it yet.

        Raises:
            ValueError: empty content, unknown category, confidence outside 0..1.
            DuplicateFactError: the bucket already holds the same text.
            MemoryUnsupportedError: `expected_revision` is given (mem0 keeps no revision).
        """
        self._refuse_expected_revision("create_fact", expected_revision)
        content = validate_content(content)
        metadata = {
            "category": validate_category(category),
            "confidence": validate_confidence(confidence),
            "source": "manual",
        }
        scope = self._scope(user_id, agent_name)
        existing = self._explicit("reading memory", lambda: self._newest(scope))
        key = records.normalized(content)
        for record in existing:
            if records.normalized(record.get("memory", "")) == key:
                raise DuplicateFactError(
                    f"a fact with this content exists: {record.get('id')}",
                    existing_fact_id=str(record.get("id")),
                )
        message = [{"role": "user", "content": content}]
        ids = self._explicit(
            "creating a fact",
            lambda: self._transport.add(message, scope, metadata=metadata, infer=False),
            MemoryManagerError,
        )
        return self.get_memory(user_id=user_id, agent_name=agent_name), ids[0] if ids else None

    def update_fact(
        self,
        fact_id: str,
        content: str | None = None,
        category: str | None = None,
        confidence: float | None = None,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Change the given fields of a memory of this bucket; return the document.

        Raises:
            FactNotFoundError: no such memory in this bucket.
            ValueError: an invalid new value.
            MemoryUnsupportedError: `expected_revision` is given (mem0 keeps no revision).
        """
        self._refuse_expected_revision("update_fact", expected_revision)
        text = None if content is None else validate_content(content)
        changes: dict[str, Any] = {}
        if category is not None:
            changes["category"] = validate_category(category)
        if confidence is not None:
            changes["confidence"] = validate_confidence(confidence)
        scope = self._scope(user_id, agent_name)
        record = self._owned(fact_id, scope)
        metadata = {**(record.get("metadata") or {}), **changes}
        self._explicit(
            "updating a fact",
            lambda: self._transport.update(fact_id, text=text, metadata=metadata),
            MemoryManagerError,
            fact_id=fact_id,
        )
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def delete_fact(
        self,
        fact_id: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Delete a memory of this bucket; return the document.

        Raises:
            FactNotFoundError: no such memory in this bucket.
            MemoryUnsupportedError: `expected_revision` is given (mem0 keeps no revision).
        """
        self._refuse_expected_revision("delete_fact", expected_revision)
        scope = self._scope(user_id, agent_name)
        self._owned(fact_id, scope)
        self._explicit(
            "deleting a fact",
            lambda: self._transport.delete(fact_id),
            MemoryManagerError,
            fact_id=fact_id,
        )
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def clear_memory(
        self,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Delete one agent's memories of the user, or, without `agent_name`, all of them.

        Raises:
            MemoryUnsupportedError: `expected_revision` is given (mem0 keeps no revision).
        """
        self._refuse_expected_revision("clear_memory", expected_revision)
        scope = self._scope(user_id, agent_name)
        agent_id = scope.agent_id if agent_name else None
        self._explicit(
            "clearing memory",
            lambda: self._transport.delete_all(scope.user_id, agent_id),
            MemoryManagerError,
        )
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def close(self) -> None:
        self._transport.close()

    # -- internals -------------------------------------------------------------------------------

    def _scope(
        self, user_id: str | None, agent_name: str | None, thread_id: str | None = None
    ) -> Scope:
        """mem0's ids for a bucket; an empty user or agent is the default one, as elsewhere.

        Raises:
            ValueError: an id with whitespace, which mem0 cannot store.
        """
        named = (("user_id", user_id), ("agent_name", agent_name), ("thread_id", thread_id))
        for key, value in named:
            if value and any(c.isspace() for c in value):
                raise ValueError(f"{key}: mem0 ids cannot contain whitespace (got {value!r})")
        return Scope(
            user_id=user_id or DEFAULT_USER,
            agent_id=agent_name or self._settings.default_agent_id,
            run_id=thread_id or None,
        )

    def _newest(self, scope: Scope) -> list[Mem0Record]:
        listed = self._transport.get_all(scope, limit=self._settings.list_limit)
        return records.newest_first(listed)

    def _search(
        self, query: str, scope: Scope, top_k: int, category: str | None = None
    ) -> list[Mem0Record]:
        threshold = self._settings.score_threshold
        return self._transport.search(
            query, scope, top_k=top_k, threshold=threshold, category=category
        )

    def _owned(self, fact_id: str, scope: Scope) -> Mem0Record:
        """The memory `fact_id` if it is in `scope`; never reveals another bucket's memory."""
        record = self._explicit("reading a fact", lambda: self._transport.get(fact_id))
        if record is None or not records.belongs_to(record, scope):
            raise FactNotFoundError(fact_id)
        return record

    def _policy_read(self, what: str, read: Callable[[], T]) -> T | None:
        """`read()`, or None after logging when it fails under `fail_open`."""
        try:
            return read()
        except Mem0TransportError as exc:
            if self._settings.failure_policy.read == "fail_closed":
                raise MemoryReadError(f"mem0 failed {what}: {self._explain(exc)}") from exc
            logger.error(
                "mem0 failed %s; going on without memory (failure_policy.read: fail_open): %s",
                what,
                self._explain(exc),
            )
            return None

    def _explicit(
        self,
        what: str,
        call: Callable[[], T],
        error: type[MemoryManagerError] = MemoryReadError,
        *,
        fact_id: str | None = None,
    ) -> T:
        """`call()`, with mem0's failures raised as the contract's errors."""
        try:
            return call()
        except Mem0NotFoundError as exc:
            if fact_id is not None:
                raise FactNotFoundError(fact_id) from exc
            raise self._error(exc, what, error) from exc
        except Mem0TransportError as exc:
            raise self._error(exc, what, error) from exc

    def _error(
        self, exc: Mem0TransportError, what: str, error: type[MemoryManagerError]
    ) -> MemoryManagerError:
        kind = MemoryAccessError if isinstance(exc, Mem0AuthError) else error
        return kind(f"mem0 failed {what}: {self._explain(exc)}")

    def _explain(self, exc: Mem0TransportError) -> str:
        """The error, with where the key comes from when mem0 refused it (never the key)."""
        settings = self._settings
        if isinstance(exc, Mem0AuthError) and isinstance(settings, HttpConfig):
            source = f"${settings.api_key_env}" if settings.api_key_env else "no key configured"
            return f"{exc} (API key from {source})"
        return str(exc)


def _build_transport(settings: Mem0Config, hooks: dict[str, Any]) -> Transport:
    """The transport `settings` ask for; nothing is contacted yet.

    Raises:
        ValueError: naming the key, when the extra, a class, a model or the API key is missing.
    """
    if isinstance(settings, HttpConfig):
        return HttpTransport(
            settings.base_url,
            api_key=_api_key(settings.api_key_env),
            timeout_seconds=settings.timeout_seconds,
        )
    return _local_transport(settings, hooks)


def _local_transport(settings: LocalConfig, hooks: dict[str, Any]) -> LocalTransport:
    embedder = settings.embedder.build("embedder")
    if not isinstance(embedder, Embeddings):
        raise ValueError(
            f"memory.backend_config.embedder.use: {settings.embedder.use} is not a LangChain "
            f"Embeddings class"
        )
    llm = settings.model.build("model") if settings.model else _host_model(hooks)
    if not (llm is None or isinstance(llm, BaseChatModel)):
        raise ValueError(
            f"memory.backend_config.model: {type(llm).__name__} is not a LangChain chat model"
        )
    if llm is None and settings.infer:
        raise ValueError(
            "memory.backend_config.model: mem0 extracts memories with a chat model (infer: true), "
            "and none is configured: set model: {use: pkg.mod:Class, ...}, configure `models:`, "
            "or set infer: false"
        )
    return LocalTransport(
        Path(settings.storage_path) / "mem0",
        embedder=embedder,
        embedding_dims=settings.embedding_dims,
        llm=llm,
        vector_store=settings.vector_store,
    )


def _host_model(hooks: dict[str, Any]) -> Any:
    factory = hooks.get("host_llm_factory")
    return factory() if factory is not None else None


def _api_key(env: str | None) -> str | None:
    if env is None:
        return None
    key = os.environ.get(env, "").strip()
    if not key:
        raise ValueError(
            f"memory.backend_config.api_key_env: environment variable {env} is not set or empty "
            f"(set it, or api_key_env: null for a server without authentication)"
        )
    return key
