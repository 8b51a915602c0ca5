"""`DeerMemMemoryManager`: the default backend, as the `MemoryManager` contract sees it.

The memory lives in an engine (`engine.py`): files under `storage_path` by default, or a
PostgreSQL database that several replicas share (`storage: postgres`). The manager adapts the
contract to it: reads and the injected context here, writes in `MemoryEdits`, the write pipeline
in `MemoryWriter`, search and the index kept in step in `RecordStore`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import PrivateAttr

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig, parse_config
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    DEFAULT_USER,
    bucket_name,
    safe_user_id,
)
from deerflow.agents.memory.backends.deermem.deermem.core.storage import MemoryStorage
from deerflow.agents.memory.backends.deermem.deermem.core.tokens import TokenCounter
from deerflow.agents.memory.backends.deermem.deermem.edits import MemoryEdits
from deerflow.agents.memory.backends.deermem.deermem.engine import MemoryEngine
from deerflow.agents.memory.backends.deermem.deermem.engines import open_engine
from deerflow.agents.memory.backends.deermem.deermem.injection import ContextInjector
from deerflow.agents.memory.backends.deermem.deermem.records import RecordStore, agent_of
from deerflow.agents.memory.backends.deermem.deermem.views import RecordViews
from deerflow.agents.memory.manager import (
    MemoryManager,
    MemoryMode,
    MemoryUnsupportedError,
    checked_id,
    searchable_query,
    validate_category,
)

if TYPE_CHECKING:
    from deerflow.agents.memory.backends.deermem.deermem.core.file_engine import FileEngine
    from deerflow.agents.memory.backends.deermem.deermem.embeddings import Embedder
    from deerflow.agents.memory.backends.deermem.deermem.pipeline.writer import MemoryWriter

# Modules only writes, search, history, audit or migration need are imported where they are
# used, so that a process that only reads (a cold start's first get_context) does not import
# them, and the search index is opened on first use.

__all__ = ["DeerMemMemoryManager"]


class DeerMemMemoryManager(MemoryManager):
    """Summaries and facts in a DeerMem engine (files by default), searched lexically and by
    meaning."""

    supports_search: ClassVar[bool] = True
    supports_expected_revision: ClassVar[bool] = True

    _config: DeerMemConfig = PrivateAttr()
    _store: RecordStore = PrivateAttr()
    _edits: MemoryEdits = PrivateAttr()
    _embedder: Embedder | None = PrivateAttr(default=None)
    _tokens: TokenCounter = PrivateAttr()
    _views: RecordViews = PrivateAttr(default_factory=RecordViews)
    _hooks: dict[str, Any] = PrivateAttr(default_factory=dict)
    _built_writer: MemoryWriter | None = PrivateAttr(default=None)
    _writer_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _injector: ContextInjector = PrivateAttr()

    # DeerMem has no `failure_policy` (its config warns the key is ignored): a failed read is
    # logged and the turn goes on; a refused add() (a full queue) is logged too.
    @classmethod
    def read_failures_are_fatal_for_config(cls, backend_config: Mapping[str, Any] | None) -> bool:
        return False

    @classmethod
    def write_failures_are_fatal_for_config(cls, backend_config: Mapping[str, Any] | None) -> bool:
        return False

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
        # Set up after pydantic's validation, so a bad setting surfaces as a plain ValueError.
        # `host_hooks` is not a field: hooks are the host's callables, not configuration.
        hooks = data.pop("host_hooks", {})
        super().__init__(**data)
        self._config = parse_config(self.backend_config)
        self._embedder = None
        if self._config.retrieval_embeddings:
            from deerflow.agents.memory.backends.deermem.deermem.embeddings import Embedder

            # Checked now, so that a broken install fails at start-up, but loaded by `warm()`
            # or the first search or write: importing numpy and reading the model take about
            # a second, which a process that only reads (a cold start's first get_context)
            # must not pay. Loading holds the GIL for a good part of that, so an asyncio host
            # calls `warm()` (`awarm()`) before it serves, as the gateway does.
            self._embedder = Embedder()
            self._embedder.check()
        engine = open_engine(self._config)
        self._store = RecordStore(engine, self._config, self._embedder)
        self._edits = MemoryEdits(self._store, self._config, self._views)
        self._tokens = TokenCounter(cache=engine.open_token_store())
        self._injector = ContextInjector(self._store, self._config, self._views, self._tokens)
        self._hooks = hooks

    @property
    def _writer(self) -> MemoryWriter:
        """The write pipeline, built on first use."""
        from deerflow.agents.memory.backends.deermem.deermem.pipeline.writer import MemoryWriter

        with self._writer_lock:
            if self._built_writer is None:
                self._built_writer = MemoryWriter(
                    self._config,
                    self._store,
                    views=self._views,
                    callbacks=self.callbacks,
                    hooks=self._hooks,
                    similarity=None if self._embedder is None else self._embedder.text_similarities,
                )
            return self._built_writer

    @property
    def engine(self) -> MemoryEngine:
        """Where the memory lives, for tools that move or rebuild a whole store."""
        return self._store.engine

    @property
    def storage(self) -> MemoryStorage:
        """The engine's record storage, for tools that work below the contract."""
        return self._store.storage

    # -- writes through the pipeline ---------------------------------------------------------

    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        """Filter the conversation and queue it durably; extraction runs after the debounce."""
        _refuse_bad_scope(thread_id, user_id, agent_name)
        self._writer.add(
            thread_id,
            messages,
            user_id=user_id,
            agent_name=agent_name,
            trace_id=trace_id,
            urgent=False,
        )

    def add_nowait(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
    ) -> None:
        """Queue for extraction at once (before summarisation drops these messages)."""
        _refuse_bad_scope(thread_id, user_id, agent_name)
        self._writer.add(
            thread_id, messages, user_id=user_id, agent_name=agent_name, trace_id=None, urgent=True
        )

    def shutdown_flush(self, timeout: float) -> bool:
        """Extract everything queued within `timeout` seconds; False if something is left."""
        return self._writer.flush(timeout)

    def cancel_pending(self, *, user_id: str | None, agent_name: str | None = None) -> int:
        return self._writer.cancel_pending(user_id=user_id, agent_name=agent_name)

    # -- reads ---------------------------------------------------------------------------------

    def get_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        return self._edits.document(user_id, agent_name)

    def export_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def reload_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        self._injector.forget()
        return self._views.document(self._store.reload(user_id, agent_name))

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        query = None if query is None else searchable_query(query)
        return self._injector.text(user_id, agent_name, query, facts=self.mode == "middleware")

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        query = searchable_query(query)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k: must be a positive integer, got {top_k!r}")
        if category is not None:
            validate_category(category)
        found = self._store.search(
            query, top_k, user_id=user_id, agent_name=agent_name, category=category
        )
        return [self._views.public(record) | {"score": score} for record, score in found]

    # -- fact CRUD -----------------------------------------------------------------------------

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
        """Store a fact. Without `expected_revision`, a create that another writer overtook is
        redone on the newer revision inside the commit, not refused: creates commute."""
        return self._edits.create_fact(
            content,
            category,
            confidence,
            None,
            user_id=user_id,
            agent_name=agent_name,
            expected_revision=expected_revision,
        )

    def create_fact_with_id(
        self,
        fact_id: str,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
    ) -> dict[str, Any]:
        """`create_fact` under an id the caller chose (the `FactsWithChosenIds` extension).

        Raises:
            ValueError: as `create_fact`, or `fact_id` is not `fact_` followed by 8 to 64
                lowercase hex digits.
            DuplicateFactError: the id is taken in this bucket (`existing_fact_id` is the id),
                or the same content is stored under another id.
        """
        document, _ = self._edits.create_fact(
            content, category, confidence, fact_id, user_id=user_id, agent_name=agent_name
        )
        return document

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
        return self._edits.update_fact(
            fact_id,
            content,
            category,
            confidence,
            user_id=user_id,
            agent_name=agent_name,
            expected_revision=expected_revision,
        )

    def delete_fact(
        self,
        fact_id: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        return self._edits.delete_fact(
            fact_id, user_id=user_id, agent_name=agent_name, expected_revision=expected_revision
        )

    def clear_memory(
        self,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        return self._edits.clear(
            user_id=user_id, agent_name=agent_name, expected_revision=expected_revision
        )

    def import_memory(
        self,
        data: dict[str, Any],
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        return self._edits.import_memory(
            data, user_id=user_id, agent_name=agent_name, expected_revision=expected_revision
        )

    def update_summary(
        self,
        part: str,
        section: str,
        text: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        return self._edits.update_summary(
            part,
            section,
            text,
            user_id=user_id,
            agent_name=agent_name,
            expected_revision=expected_revision,
        )

    # -- audit log and undo ----------------------------------------------------------------------

    def get_history(
        self, *, user_id: str | None = None, agent_name: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        from deerflow.agents.memory.backends.deermem.deermem.history import (
            public_entry,
            touches_bucket,
        )

        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit: must be a positive integer, got {limit!r}")
        bucket = bucket_name(agent_name)
        raw_user = DEFAULT_USER if user_id is None else user_id
        entries = [e for e in self._store.read_history(raw_user) if touches_bucket(e, bucket)]
        return [public_entry(entry, raw_user, bucket) for entry in reversed(entries[-limit:])]

    def revert_change(
        self, change_id: str, *, user_id: str | None = None, expected_revision: int | None = None
    ) -> dict[str, Any]:
        return self._edits.revert(change_id, user_id=user_id, expected_revision=expected_revision)

    # -- DeerMem's own tools (CLI, gateway) -------------------------------------------------------

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the whole search index from the memory; return how many facts it holds.

        Raises:
            MemoryUnsupportedError: the storage cannot list its users.
        """
        return self._store.reindex(progress)

    def export_markdown(
        self, destination: Path, *, user_id: str | None = None, agent_name: str | None = None
    ) -> int:
        """Write the summaries (`memory.json`) and one Markdown file per fact into `destination`.

        Returns the number of facts written. `import_markdown` reads the folder back.
        """
        from deerflow.agents.memory.backends.deermem.deermem.markdown_export import write_export

        snapshot = self._store.load(user_id, agent_name)
        return write_export(self._views.document(snapshot), snapshot.facts, destination)

    def import_markdown(
        self,
        source: Path,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Replace the summaries and the bucket's facts with a folder made by `export_markdown`.

        Raises:
            ValueError: the folder is not an export, or a fact in it is invalid.
        """
        from deerflow.agents.memory.backends.deermem.deermem.markdown_export import read_export

        return self.import_memory(
            read_export(source),
            user_id=user_id,
            agent_name=agent_name,
            expected_revision=expected_revision,
        )

    def change_ids(self, *, user_id: str | None = None) -> list[str]:
        """Every change id recorded for the user, oldest first, whichever bucket it touched (the
        `ChangeListing` extension)."""
        raw_user = DEFAULT_USER if user_id is None else user_id
        return [str(entry["change_id"]) for entry in self._store.read_history(raw_user)]

    def agent_names(self, *, user_id: str | None = None) -> list[str]:
        """The agents (bucket names) whose buckets hold facts of the user, the default excluded."""
        # The files engine keeps a bucket's folder when its last fact goes: ask for its facts.
        agents = map(agent_of, self._store.load(user_id, None).buckets)
        return sorted(
            agent
            for agent in agents
            if agent is not None and self._store.load(user_id, agent).facts
        )

    def audit(
        self,
        *,
        user_id: str | None = None,
        staleness_age_days: int = 90,
        near_duplicate_threshold: float = 0.7,
    ) -> list[dict[str, Any]]:
        """The memory audit of every bucket of the user that holds facts."""
        from deerflow.agents.memory.backends.deermem.deermem.audit import audit_bucket

        now = datetime.now(UTC)
        buckets = self._store.load(user_id, None).buckets or (bucket_name(None),)
        return [
            audit_bucket(
                self._store.load(user_id, agent_of(bucket)),
                now=now,
                staleness_age_days=staleness_age_days,
                near_duplicate_threshold=near_duplicate_threshold,
            ).as_dict()
            for bucket in buckets
        ]

    def legacy_sources(self) -> list[str]:
        """Files of the old single-file layout that `migrate` would move, relative to the root.

        Raises:
            MemoryUnsupportedError: the memory is not in the files engine's own storage.
        """
        return self._file_engine("migrate").legacy_sources()

    def migrate(
        self, *, dry_run: bool = False, progress: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """Migrate every user's old single-file memory; the report per user.
        `progress` is called with the number of users done after each one.

        Raises:
            MemoryUnsupportedError: the memory is not in the files engine's own storage.
        """
        return self._file_engine("migrate").migrate(dry_run=dry_run, progress=progress)

    def _file_engine(self, operation: str) -> FileEngine:
        from deerflow.agents.memory.backends.deermem.deermem.core.file_engine import FileEngine

        engine = self._store.engine
        if not isinstance(engine, FileEngine):  # named as the user configured it
            raise MemoryUnsupportedError(f"DeerMem with storage: {self._config.storage}", operation)
        return engine

    # -- lifecycle -------------------------------------------------------------------------------

    def warm(self) -> bool:
        """Load the tokenizer and the embedding model, open the search index and start the
        write queue (conversations left by a crash run)."""
        if self._embedder is not None:
            self._embedder.load()
        self._store.open()
        self._writer.queue  # noqa: B018 - opening the queue starts its worker
        return self._tokens.load()

    def close(self) -> None:
        if self._built_writer is not None:
            self._built_writer.close()
        self._tokens.close()
        self._store.close()


def _refuse_bad_scope(thread_id: str, user_id: str | None, agent_name: str | None) -> None:
    """Refuse a bad thread id, user id or agent name when it is queued: in the worker, an item
    that can never be written would stay queued for ever.

    Raises:
        ValueError: naming the bad id.
    """
    checked_id(thread_id, "thread_id")
    safe_user_id(user_id)
    bucket_name(agent_name)
