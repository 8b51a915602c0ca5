"""The engine seam: where DeerMem keeps a memory, in records, never in files or SQL.

Everything above it (the manager, the write pipeline, governance, views, context, imports and
the audit log's presentation) works on the records an engine hands out and the change sets it
commits. Two engines implement it: files (`core/file_engine.py`: Markdown facts, `memory.json`,
an FTS5 index and a SQLite queue under `storage_path`) and PostgreSQL (`postgres/engine.py`: one
database that several processes and hosts share).

An engine is four parts plus a storage:
- `storage`: users' documents (summaries, revision), facts, atomic commits of a `ChangeSet`
  against an expected revision, the audit log (`MemoryStorage`);
- a search index over the facts, scoped to (user, agent bucket), lexical with vectors when given
  a model, kept in step with each commit (`SearchIndex`);
- the durable queue of conversations waiting for extraction (`WriteQueue`);
- the access counts of facts (`UsageStore`) and the token counts of context lines (`TokenStore`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from deerflow.agents.memory.backends.deermem.deermem.usage import UsageStore

if TYPE_CHECKING:
    # The storage seam's ABC keeps the import path DeerFlow documents for a custom storage.
    from deerflow.agents.memory.backends.deermem.deermem.core.storage import (
        MemoryStorage as MemoryStorage,
    )
    from deerflow.agents.memory.backends.deermem.deermem.core.token_cache import LineCounts
    from deerflow.agents.memory.backends.deermem.deermem.core.vectors import VectorModel
    from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import (
        QueueItem,
        QueueKey,
    )
    from deerflow.agents.memory.backends.deermem.deermem.retrieval import IndexedFact, SearchHit

__all__ = [
    "MemoryEngine",
    "QueueSettings",
    "SearchIndex",
    "TokenStore",
    "UsageStore",
    "UserDump",
    "WriteQueue",
]


class SearchIndex(Protocol):
    """Lexical (and, with a model, semantic) search over every user's facts, by scope.

    The index is derived from the facts: `indexed_revision` says which revision of a user it
    reflects, and a user found behind is replaced from the storage before a search.
    """

    def indexed_revision(self, user_key: str) -> int | None: ...

    def mark_dirty(self, user_key: str) -> None: ...

    def apply(
        self,
        user_key: str,
        revision: int,
        upserts: Sequence[IndexedFact],
        deletes: Sequence[tuple[str, str]],
    ) -> None: ...

    def replace_user(self, user_key: str, revision: int, facts: Iterable[IndexedFact]) -> None: ...

    def rebuild(
        self,
        users: Iterable[tuple[str, int, Iterable[IndexedFact]]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int: ...

    def search(
        self,
        user_key: str,
        agent: str,
        query: str,
        *,
        category: str | None = None,
        limit: int = 5,
        now: datetime | None = None,
        semantic_weight: float = 0.5,
        thread_context: float = 0.0,
    ) -> list[SearchHit]: ...

    def similarities(self, user_key: str, agent: str, query: str) -> dict[str, float]: ...

    def close(self) -> None: ...


class WriteQueue(Protocol):
    """Conversations waiting for extraction, durable before `put` returns (see
    `pipeline/queue.py` for the semantics every engine's queue keeps)."""

    def put(
        self,
        key: QueueKey,
        turns: list[dict[str, Any]],
        *,
        signals: Iterable[str] = (),
        trace_id: str | None = None,
    ) -> None: ...

    def extend(
        self,
        key: QueueKey,
        turns: list[dict[str, Any]],
        *,
        after: str,
        trace_id: str | None = None,
    ) -> bool: ...

    def cursor(self, key: QueueKey) -> str | None: ...

    def put_now(
        self,
        key: QueueKey,
        turns: list[dict[str, Any]],
        *,
        signals: Iterable[str] = (),
        trace_id: str | None = None,
    ) -> None: ...

    def pending(self) -> list[QueueItem]: ...

    def cancel_pending(
        self, *, user_id: str, agent_name: str | None = None, all_agents: bool = False
    ) -> int: ...

    def run_due(self) -> int: ...

    def flush(self, timeout: float) -> bool: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """What the write pipeline asks of an engine's queue."""

    process: Callable[[QueueItem], None]
    identity: Callable[[dict[str, Any]], str]
    debounce_seconds: float
    max_wait_seconds: float
    max_depth: int


class TokenStore(Protocol):
    """Token counts of context lines, so that a process needs no tokenizer for known lines."""

    def get(self, line: str) -> LineCounts | None: ...

    def put(self, counts: Mapping[str, LineCounts]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class UserDump:
    """All of one user's memory, as `MemoryEngine.dump_user` reads it and `restore_user`
    writes it: what `deerflow memory copy` moves between engines, losing nothing."""

    user_id: str  # as given by the caller (not the storage's escaped key)
    revision: int
    last_updated: str
    summaries: Mapping[str, Mapping[str, Mapping[str, str]]]
    facts: Sequence[Mapping[str, Any]] = ()  # every bucket's records, `agent_name` set
    history: Sequence[Mapping[str, Any]] = ()  # oldest first


class MemoryEngine(ABC):
    """One place a DeerMem memory lives; see the module docstring."""

    derived_data_errors: ClassVar[tuple[type[Exception], ...]] = ()
    """Errors of the derived parts (search index, usage counts) that must not fail a write
    already committed: they are logged, and the index catches up at the user's next search."""

    @property
    @abstractmethod
    def storage(self) -> MemoryStorage:
        """Documents, facts, commits and the audit log."""

    @abstractmethod
    def open_index(self, model: VectorModel | None, *, reset: bool = False) -> SearchIndex:
        """The search index, with vectors of `model` (None: lexical only). `reset` drops an
        index found unreadable first (derived data: every user is rebuilt from the storage)."""

    @abstractmethod
    def open_queue(self, settings: QueueSettings) -> WriteQueue:
        """The durable queue; opening it schedules what an earlier process left."""

    @property
    @abstractmethod
    def usage(self) -> UsageStore:
        """Access counts of facts."""

    @abstractmethod
    def open_token_store(self) -> TokenStore:
        """Token counts of context lines."""

    @abstractmethod
    def user_ids(self) -> Iterator[str]:
        """Every user that has a memory, as the callers gave the ids."""

    @abstractmethod
    def scan(self, user_id: str) -> tuple[int, list[dict[str, Any]]]:
        """The user's revision and every fact of every bucket, read past every cache."""

    @abstractmethod
    def dump_user(self, user_id: str) -> UserDump:
        """Everything of the user: summaries, every bucket's facts and the whole audit log."""

    @abstractmethod
    def restore_user(self, dump: UserDump) -> None:
        """Write a user read by another engine's `dump_user`, keeping revisions, ids and
        history as they are.

        Raises:
            MemoryConflictError: the user already has a memory here (nothing is merged).
        """

    def close(self) -> None:  # noqa: B027 (an engine holding nothing open beyond its storage)
        """Release what the engine holds open; the storage is closed by its owner."""
