"""`DeerMemMemoryManager`: the default backend, over files and a SQLite FTS5 index.

With `retrieval_embeddings` the index also holds fact vectors of the shipped local model, and
search, relevance-aware injection and near-duplicate detection use them.
"""

from __future__ import annotations

import json
import logging
import operator
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self, TypeVar

from pydantic import PrivateAttr

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig, parse_config
from deerflow.agents.memory.backends.deermem.deermem.context import format_context
from deerflow.agents.memory.backends.deermem.deermem.core.changes import (
    ChangeSet,
    CommitResult,
    MemorySnapshot,
)
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import (
    read_fact_file,
    render_fact,
)
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    DEFAULT_USER,
    bucket_name,
    safe_user_id,
    validate_fact_id,
)
from deerflow.agents.memory.backends.deermem.deermem.core.storage import (
    FileMemoryStorage,
    MemoryStorage,
    load_storage,
)
from deerflow.agents.memory.backends.deermem.deermem.core.token_cache import TokenCache
from deerflow.agents.memory.backends.deermem.deermem.core.tokens import TokenCounter
from deerflow.agents.memory.backends.deermem.deermem.governance import (
    CapacityPolicy,
    capacity_evictions,
    normalized,
    refuse_duplicate,
)
from deerflow.agents.memory.backends.deermem.deermem.migrate import (
    find_legacy,
    migrate,
    migrate_if_needed,
)
from deerflow.agents.memory.backends.deermem.deermem.usage import FactUsage, capacity_heat
from deerflow.agents.memory.backends.deermem.deermem.views import RecordViews
from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactNotFoundError,
    MemoryConflictError,
    MemoryManager,
    MemoryMode,
    MemoryUnsupportedError,
    check_revision,
    checked_id,
    searchable_query,
    utc_now,
    validate_category,
    validate_confidence,
    validate_content,
    validate_summary,
)

if TYPE_CHECKING:
    from deerflow.agents.memory.backends.deermem.deermem.core.index import (
        IndexedFact,
        RetrievalIndex,
        SearchHit,
    )
    from deerflow.agents.memory.backends.deermem.deermem.embeddings import Embedder
    from deerflow.agents.memory.backends.deermem.deermem.pipeline.writer import MemoryWriter

# Modules only writes, search, history, audit or migration need are imported where they are
# used, so that a process that only reads (a cold start's first get_context) does not import
# them, and the retrieval index is opened on first use.

__all__ = ["DeerMemMemoryManager"]

logger = logging.getLogger(__name__)
_FACT: Final = operator.attrgetter("fact")  # a context entry's fact, read in C

# Snapshot-derived writes (create with capacity, clear, import, revert) recompute on conflict.
MAX_ATTEMPTS: Final = 5
# Snapshot-derived writes of one user from this process take turns on one of these locks (users
# share a lock by hash): bounded, and a collision only makes two users wait for each other.
WRITE_TURN_STRIPES: Final = 64
CONTEXT_CACHE_SIZE: Final = 4096
T = TypeVar("T")
# What a cached context text was made from: the bucket's facts and the two summary parts.
_ContextSource = tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]


class DeerMemMemoryManager(MemoryManager):
    """Memory in Markdown files and JSON summaries under `storage_path`, searched through FTS5."""

    supports_search: ClassVar[bool] = True
    supports_expected_revision: ClassVar[bool] = True

    _config: DeerMemConfig = PrivateAttr()
    _storage: MemoryStorage = PrivateAttr()
    _opened_index: RetrievalIndex | None = PrivateAttr(default=None)
    _index_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _embedder: Embedder | None = PrivateAttr(default=None)
    _tokens: TokenCounter = PrivateAttr()
    _views: RecordViews = PrivateAttr(default_factory=RecordViews)
    _hooks: dict[str, Any] = PrivateAttr(default_factory=dict)
    _built_writer: MemoryWriter | None = PrivateAttr(default=None)
    _writer_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _usage: FactUsage = PrivateAttr()
    # (user, bucket) → (source, text): the last injection text, reused while nothing changed.
    _context_cache: dict[tuple[str, str], tuple[_ContextSource, str]] = PrivateAttr(
        default_factory=dict
    )
    _cache_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _write_turns: tuple[threading.Lock, ...] = PrivateAttr(
        default_factory=lambda: tuple(threading.Lock() for _ in range(WRITE_TURN_STRIPES))
    )

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
        self._storage = load_storage(self._config, open_user=migrate_if_needed)
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
        self._tokens = TokenCounter(
            cache=TokenCache(Path(self._config.storage_path) / ".retrieval" / "tokens.sqlite3")
        )
        self._usage = FactUsage(Path(self._config.storage_path))
        self._hooks = hooks

    @property
    def _index(self) -> RetrievalIndex:
        """The retrieval index, opened on first use (an unreadable one is rebuilt, since the
        fact files are the truth)."""
        index = self._opened_index
        if index is not None:
            return index
        from deerflow.agents.memory.backends.deermem.deermem.core.index import (
            IndexCorruptionError,
            RetrievalIndex,
        )

        with self._index_lock:
            if self._opened_index is None:
                path = Path(self._config.storage_path) / ".retrieval" / "index.sqlite3"
                try:
                    self._opened_index = RetrievalIndex(path, self._embedder)
                except IndexCorruptionError:
                    logger.warning(
                        "retrieval index %s is unreadable; recreating it from the files", path
                    )
                    self._opened_index = RetrievalIndex.reset(path, self._embedder)
            return self._opened_index

    @property
    def _writer(self) -> MemoryWriter:
        """The write pipeline, built on first use."""
        from deerflow.agents.memory.backends.deermem.deermem.pipeline.writer import MemoryWriter

        with self._writer_lock:
            if self._built_writer is None:
                self._built_writer = MemoryWriter(
                    self._config,
                    self._storage,
                    commit=self._commit,
                    document=self._views.document,
                    callbacks=self.callbacks,
                    hooks=self._hooks,
                    similarity=None if self._embedder is None else self._embedder.text_similarities,
                )
            return self._built_writer

    @property
    def storage(self) -> MemoryStorage:
        """The storage layer, for tools that work below the contract (migration, reindex)."""
        return self._storage

    @property
    def engine(self) -> _TempFileEngine:
        """TEMP until the files engine lands: the user listing, dump and restore of it."""
        return _TempFileEngine(self)

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
        return self._views.document(self._storage.load(user_id, agent_name))

    def export_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def reload_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        with self._cache_lock:
            self._context_cache.clear()
        snapshot = self._storage.reload(user_id, agent_name)
        # Files edited by hand leave the revision alone, so the index would not see the edit.
        self._with_index(lambda index: index.mark_dirty(safe_user_id(snapshot.user_id)))
        return self._views.document(snapshot)

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        query = None if query is None else searchable_query(query)
        snapshot = self._storage.load(user_id, agent_name)
        relevant = bool(query and query.strip() and self._config.retrieval_relevance_enabled)
        key = (safe_user_id(snapshot.user_id), snapshot.bucket)
        # The storage hands out the same objects while the files are unchanged, and new ones
        # when they change, a hand edit that leaves the revision alone included.
        source = (snapshot.facts, snapshot.summaries["user"], snapshot.summaries["history"])
        if not relevant:
            with self._cache_lock:
                cached = self._context_cache.get(key)
            if cached is not None and all(map(operator.is_, cached[0], source)):
                return cached[1]
        entries = self._views.by_confidence(snapshot)
        if relevant:
            from deerflow.agents.memory.backends.deermem.deermem.ranking import rank_for_query

            similarities = self._query_similarities(snapshot, query or "")
            entries = rank_for_query(
                entries,
                query or "",
                text_of=lambda e: str(e.record["content"]),
                confidence_of=lambda e: float(e.record["confidence"]),
                relevance_weight=self._config.retrieval_relevance_weight,
                diversity_weight=self._config.retrieval_diversity_weight,
                similarity_of=(
                    None
                    if similarities is None
                    else lambda e: similarities.get(e.record["id"], 0.0)
                ),
                semantic_weight=self._config.retrieval_semantic_weight,
            )
        text = format_context(
            snapshot.summaries,
            map(_FACT, entries),
            max_tokens=self._config.max_injection_tokens,
            guaranteed_categories=self._config.guaranteed_categories,
            guaranteed_token_budget=self._config.guaranteed_token_budget,
            include_facts=self.mode == "middleware",
            count_tokens=self._tokens.count,
        )
        self._tokens.flush()  # lines counted now need no tokenizer in the next process
        if not relevant:
            with self._cache_lock:
                if len(self._context_cache) >= CONTEXT_CACHE_SIZE:
                    self._context_cache.clear()
                self._context_cache[key] = (source, text)
        return text

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
        user_key = safe_user_id(DEFAULT_USER if user_id is None else user_id)
        bucket = bucket_name(agent_name)
        # Reading only the hits keeps a user's first search from parsing the whole bucket.
        revision, _ = self._storage.load_facts(user_id, agent_name, ())

        def lookup(index: RetrievalIndex) -> list[SearchHit]:
            if index.indexed_revision(user_key) != revision:
                self._reindex_user(index, self._storage.load(user_id, agent_name))
            return index.search(
                user_key,
                bucket,
                query,
                category=category,
                limit=top_k,
                semantic_weight=self._config.retrieval_semantic_weight,
                thread_context=self._config.retrieval_thread_context,
            )

        hits = self._with_index(lookup)
        _, records = self._storage.load_facts(user_id, agent_name, [h.fact_id for h in hits])
        # A hit missing from the files means the index ran ahead; it heals on the next commit.
        found = [hit for hit in hits if hit.fact_id in records]
        if self._config.fact_eviction_policy == "hybrid-v1":
            self._record_access(user_id, bucket, [hit.fact_id for hit in found])
        return [self._views.public(records[hit.fact_id]) | {"score": hit.score} for hit in found]

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
        redone on the newer revision inside the commit (duplicates and capacity checked again
        there), not refused: creates commute."""
        return self._create_fact(
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
        validate_fact_id(fact_id)
        document, _ = self._create_fact(
            content, category, confidence, fact_id, user_id=user_id, agent_name=agent_name
        )
        return document

    def _create_fact(
        self,
        content: str,
        category: str,
        confidence: float,
        fact_id: str | None,
        *,
        user_id: str | None,
        agent_name: str | None,
        expected_revision: int | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        from deerflow.agents.memory.backends.deermem.deermem.core.scrub import refuse_secrets

        text = validate_content(content)
        refuse_secrets(text)
        category = validate_category(category)
        confidence = validate_confidence(confidence)

        def attempt() -> tuple[dict[str, Any], str | None]:
            snapshot = self._storage.load(user_id, agent_name)
            check_revision(snapshot.revision, expected_revision)
            columns = self._views.columns(snapshot)
            if fact_id is not None and fact_id in snapshot.facts:
                raise DuplicateFactError(
                    f"a fact with this id already exists: {fact_id}", existing_fact_id=fact_id
                )
            refuse_duplicate(columns.ids, columns.normalized, text)
            now = utc_now()
            record: dict[str, Any] = {
                "id": fact_id or f"fact_{uuid.uuid4().hex}",
                "category": category,
                "confidence": confidence,
                "createdAt": now,
                "updatedAt": now,
                "source": {"type": "manual", "threadId": None},
                "agent_name": snapshot.bucket,
                "content": text,
            }
            moment = datetime.now(UTC)
            policy = CapacityPolicy.from_config(self._config)
            heat = capacity_heat(
                self._usage, self._config, snapshot.user_id, snapshot.bucket, moment
            )
            evicted = capacity_evictions(
                snapshot.facts, record, policy, now=moment, heat=heat, order_keys=columns.order_keys
            )

            def creation(new: dict[str, Any], evicted: list[str]) -> ChangeSet:
                return ChangeSet(
                    actor="manual",
                    reason="create_fact"
                    + (f"; capacity evicted {', '.join(evicted)}" if evicted else ""),
                    upserts=[new],
                    deletes=[(snapshot.bucket, fact_id) for fact_id in evicted],
                    expected_revision=snapshot.revision,
                )

            def rebase_onto(facts: Mapping[str, Mapping[str, Any]]) -> ChangeSet:
                if record["id"] in facts:  # the new fact's id must still be free
                    raise DuplicateFactError(
                        f"a fact with this id already exists: {record['id']}",
                        existing_fact_id=record["id"],
                    )
                texts = [normalized(fact["content"]) for fact in facts.values()]
                refuse_duplicate(list(facts), texts, text)
                # Stamped anew: the facts committed meanwhile must not make it look older.
                later = utc_now()
                new = record | {"createdAt": later, "updatedAt": later}
                return creation(new, capacity_evictions(facts, new, policy, now=moment, heat=heat))

            changes = creation(record, evicted)
            if expected_revision is None:  # a caller's condition is never rebased
                changes.rebase_onto = rebase_onto
            self._commit(snapshot.user_id, changes)
            return self.get_memory(user_id=user_id, agent_name=agent_name), record["id"]

        return self._retrying(user_id, attempt)

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
        from deerflow.agents.memory.backends.deermem.deermem.core.scrub import refuse_secrets

        text = None if content is None else validate_content(content)
        if text is not None:
            refuse_secrets(text)
        category = None if category is None else validate_category(category)
        confidence = None if confidence is None else validate_confidence(confidence)

        def attempt() -> dict[str, Any]:
            snapshot, current = self._existing(fact_id, user_id, agent_name, expected_revision)
            updated = dict(current)
            if text is not None:
                columns = self._views.columns(snapshot)
                refuse_duplicate(columns.ids, columns.normalized, text, ignore_id=fact_id)
                updated["content"] = text
            if category is not None:
                updated["category"] = category
            if confidence is not None:
                updated["confidence"] = confidence
            if updated != current:
                updated["updatedAt"] = utc_now()
                self._commit(
                    snapshot.user_id,
                    ChangeSet(
                        actor="manual",
                        reason="update_fact",
                        upserts=[updated],
                        expected_revision=snapshot.revision,
                        preconditions={(snapshot.bucket, fact_id): current["revision"]},
                        rebase=expected_revision is None,  # a caller's condition holds exactly
                    ),
                )
            return self.get_memory(user_id=user_id, agent_name=agent_name)

        return self._retrying(user_id, attempt)

    def delete_fact(
        self,
        fact_id: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        def attempt() -> dict[str, Any]:
            snapshot, current = self._existing(fact_id, user_id, agent_name, expected_revision)
            self._commit(
                snapshot.user_id,
                ChangeSet(
                    actor="manual",
                    reason="delete_fact",
                    deletes=[(snapshot.bucket, fact_id)],
                    expected_revision=snapshot.revision,
                    preconditions={(snapshot.bucket, fact_id): current["revision"]},
                    rebase=expected_revision is None,
                ),
            )
            return self.get_memory(user_id=user_id, agent_name=agent_name)

        return self._retrying(user_id, attempt)

    def clear_memory(
        self,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        def attempt() -> dict[str, Any]:
            snapshot = self._storage.load(user_id, agent_name)
            check_revision(snapshot.revision, expected_revision)
            buckets = [snapshot.bucket] if agent_name is not None else list(snapshot.buckets)
            # Read from the files, not the cache: a fact file added by hand must go too.
            deletes = [
                (bucket, fact_id)
                for bucket in buckets
                for fact_id in self._storage.reload(user_id, _agent(bucket)).facts
            ]
            if not deletes and snapshot.revision == 0:  # nothing stored: leave no directory
                return self.get_memory(user_id=user_id, agent_name=agent_name)
            summaries = (
                {}
                if agent_name is not None
                else {
                    part: dict.fromkeys(sections, "")
                    for part, sections in snapshot.summaries.items()
                }
            )
            scope = f"agent {snapshot.bucket}" if agent_name is not None else "all agents"
            changes = ChangeSet(
                actor="clear",
                reason=f"clear_memory ({scope})",
                summaries=summaries,
                deletes=deletes,
                expected_revision=snapshot.revision,
            )
            self._commit(snapshot.user_id, changes)
            return self.get_memory(user_id=user_id, agent_name=agent_name)

        return self._retrying(user_id, attempt)

    def import_memory(
        self,
        data: dict[str, Any],
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        from deerflow.agents.memory.backends.deermem.deermem.imports import imported_changes

        def attempt() -> dict[str, Any]:
            snapshot = self._storage.reload(user_id, agent_name)  # hand-added files go too
            check_revision(snapshot.revision, expected_revision)
            changes = imported_changes(data, snapshot, max_facts=self._config.max_facts)
            self._commit(snapshot.user_id, changes)
            return self.get_memory(user_id=user_id, agent_name=agent_name)

        return self._retrying(user_id, attempt)

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
        part, section, summary = validate_summary(part, section, text)

        def attempt() -> dict[str, Any]:
            snapshot = self._storage.load(user_id, agent_name)
            check_revision(snapshot.revision, expected_revision)
            if snapshot.summaries[part][section]["summary"] != summary:
                changes = ChangeSet(
                    actor="manual",
                    reason=f"update_summary {part}.{section}",
                    summaries={part: {section: summary}},
                    expected_revision=snapshot.revision,
                )
                self._commit(snapshot.user_id, changes)
            return self.get_memory(user_id=user_id, agent_name=agent_name)

        return self._retrying(user_id, attempt)

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
        entries = [e for e in self._storage.read_history(raw_user) if touches_bucket(e, bucket)]
        return [public_entry(entry, raw_user, bucket) for entry in reversed(entries[-limit:])]

    def revert_change(
        self, change_id: str, *, user_id: str | None = None, expected_revision: int | None = None
    ) -> dict[str, Any]:
        from deerflow.agents.memory.backends.deermem.deermem.history import (
            check_restorable,
            public_entry,
            revert_changes,
        )

        raw_user = DEFAULT_USER if user_id is None else user_id

        def attempt() -> dict[str, Any]:
            snapshot = self._storage.load(raw_user, None)
            check_revision(snapshot.revision, expected_revision)
            entries = self._storage.read_history(raw_user)
            changes = revert_changes(
                entries, change_id, raw_user, snapshot.revision, snapshot.summaries
            )
            buckets = {bucket for bucket, _ in changes.raw_writes}
            check_restorable(
                changes,
                raw_user,
                {b: self._storage.load(raw_user, _agent(b)).facts for b in sorted(buckets)},
                self._config.max_facts,
            )
            result = self._commit(raw_user, changes)
            recorded = next(
                e
                for e in self._storage.read_history(raw_user)
                if e["change_id"] == result.change_id
            )
            return public_entry(recorded, raw_user)

        return self._retrying(user_id, attempt)

    # -- DeerMem's own tools (CLI, gateway) -------------------------------------------------------

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the whole retrieval index from the files; return how many facts it holds.

        Raises:
            MemoryUnsupportedError: the storage cannot list its users.
        """
        from deerflow.agents.memory.backends.deermem.deermem.core.index import IndexedFact

        storage = self._file_storage("reindex")

        def users() -> Iterator[tuple[str, int, Iterator[IndexedFact]]]:
            for user_id in storage.user_ids():
                revision, records = storage.scan(user_id)
                yield safe_user_id(user_id), revision, map(IndexedFact.from_record, records)

        return self._with_index(lambda index: index.rebuild(users(), progress=progress))

    def export_markdown(
        self, destination: Path, *, user_id: str | None = None, agent_name: str | None = None
    ) -> int:
        """Write the summaries (`memory.json`) and one Markdown file per fact into `destination`.

        Returns the number of facts written. `import_markdown` reads the folder back.
        """
        document = self.export_memory(user_id=user_id, agent_name=agent_name)
        snapshot = self._storage.load(user_id, agent_name)
        destination.mkdir(parents=True, exist_ok=True)
        summaries = {key: document[key] for key in ("version", "user", "history")}
        (destination / "memory.json").write_text(
            json.dumps(summaries, indent=2, ensure_ascii=False)
        )
        facts = destination / "facts"
        facts.mkdir(exist_ok=True)
        for fact_id, record in snapshot.facts.items():
            (facts / f"{fact_id}.md").write_bytes(render_fact(dict(record)))
        return len(snapshot.facts)

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
        manifest = source / "memory.json"
        if not manifest.is_file():
            raise ValueError("not a DeerMem Markdown export (no memory.json)")
        try:
            document = json.loads(manifest.read_text(encoding="utf-8"))
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"memory.json: unreadable: {exc}") from None
        # `export_markdown` writes a version; without one this is some other memory.json, and
        # reading it as an export without facts would empty the bucket. (A zip of an export
        # of no facts has no `facts` folder: zips keep files, not empty folders.)
        if not isinstance(document, dict) or "version" not in document:
            raise ValueError("not a DeerMem Markdown export (memory.json has no version)")
        paths = sorted((source / "facts").glob("*.md"))
        if odd := next((path for path in paths if not path.is_file()), None):
            raise ValueError(f"facts/{odd.name}: not a fact file")
        # The whole record, not the public dict: the front matter's unknown keys and the
        # structured source come back too (the fact's scope and bookkeeping are set anew).
        document["facts"] = [read_fact_file(path, shown=f"facts/{path.name}") for path in paths]
        return self.import_memory(
            document, user_id=user_id, agent_name=agent_name, expected_revision=expected_revision
        )

    def agent_names(self, *, user_id: str | None = None) -> list[str]:
        """The agents (bucket names) whose buckets hold facts of the user, the default excluded."""
        buckets = self._storage.load(user_id, None).buckets
        return sorted(name for name in map(_agent, buckets) if name is not None)

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
        buckets = self._storage.load(user_id, None).buckets or (bucket_name(None),)
        return [
            audit_bucket(
                self._storage.load(user_id, _agent(bucket)),
                now=now,
                staleness_age_days=staleness_age_days,
                near_duplicate_threshold=near_duplicate_threshold,
            ).as_dict()
            for bucket in buckets
        ]

    def legacy_sources(self) -> list[str]:
        """Files of the old single-file layout that `migrate` would move, relative to the root."""
        storage = self._file_storage("migrate")
        return [str(source.path.relative_to(storage.root)) for source in find_legacy(storage.root)]

    def migrate(
        self, *, dry_run: bool = False, progress: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """Migrate every user's old single-file memory; the report per user.
        `progress` is called with the number of users done after each one.

        Raises:
            MemoryUnsupportedError: the storage is not the file storage.
        """
        storage = self._file_storage("migrate")
        return migrate(storage.root, storage, dry_run=dry_run, progress=progress).as_dict()

    def _file_storage(self, operation: str) -> FileMemoryStorage:
        if not isinstance(self._storage, FileMemoryStorage):
            raise MemoryUnsupportedError(type(self._storage).__name__, operation)
        return self._storage

    # -- lifecycle -------------------------------------------------------------------------------

    def warm(self) -> bool:
        """Load the tokenizer and the embedding model, open the retrieval index and start the
        write queue (conversations left by a crash run)."""
        if self._embedder is not None:
            self._embedder.load()
        self._index  # noqa: B018 - opened here rather than by the first search
        self._writer.queue  # noqa: B018 - opening the queue starts its worker
        return self._tokens.load()

    def close(self) -> None:
        if self._built_writer is not None:
            self._built_writer.close()
        with self._index_lock:
            if self._opened_index is not None:
                self._opened_index.close()
        self._tokens.close()
        self._storage.close()

    # -- internals -------------------------------------------------------------------------------

    def _existing(
        self, fact_id: str, user_id: str | None, agent_name: str | None, expected_revision: Any
    ) -> tuple[MemorySnapshot, dict[str, Any]]:
        """The snapshot, checked to be at `expected_revision` (None: any), and the fact."""
        validate_fact_id(fact_id)
        snapshot = self._storage.load(user_id, agent_name)
        check_revision(snapshot.revision, expected_revision)
        current = snapshot.facts.get(fact_id)
        if current is None:
            raise FactNotFoundError(fact_id)
        return snapshot, dict(current)

    def _record_access(self, user_id: str | None, bucket: str, fact_ids: list[str]) -> None:
        """Count a search hit of each fact for `hybrid-v1`; usage data never fails a search."""
        raw_user = DEFAULT_USER if user_id is None else user_id
        try:
            self._usage.record(
                raw_user,
                bucket,
                fact_ids,
                datetime.now(UTC),
                self._config.eviction_access_half_life_days,
            )
        except OSError:
            logger.warning("could not record fact usage of %s/%s", raw_user, bucket, exc_info=True)

    def _retrying(self, user_id: str | None, attempt: Callable[[], T]) -> T:
        """Run a snapshot-derived write, again on conflict, a bounded number of times.

        Writes of one user from this process take turns (a gateway's concurrent requests would
        otherwise keep invalidating each other's snapshot until the attempts run out), so only
        another process's commit can make an attempt conflict.
        """
        user_key = safe_user_id(DEFAULT_USER if user_id is None else user_id)
        with self._write_turns[hash(user_key) % WRITE_TURN_STRIPES]:
            for _ in range(MAX_ATTEMPTS - 1):
                try:
                    return attempt()
                except MemoryConflictError:
                    continue
            return attempt()

    def _commit(self, user_id: str, changes: ChangeSet) -> CommitResult:
        result = self._storage.save(user_id, changes)
        if result.change_id is not None:
            self._update_index(safe_user_id(user_id), result)
        return result

    def _update_index(self, user_key: str, result: CommitResult) -> None:
        from deerflow.agents.memory.backends.deermem.deermem.core.index import (
            IndexCorruptionError,
            IndexedFact,
        )
        from deerflow.agents.memory.backends.deermem.deermem.embeddings import EmbeddingError

        try:
            self._with_index(
                lambda index: index.apply(
                    user_key,
                    result.revision,
                    [IndexedFact.from_record(record) for record in result.upserted],
                    list(result.deleted),
                )
            )
        except (sqlite3.Error, EmbeddingError, IndexCorruptionError):
            # The files are the truth and the commit has happened: it must not be reported as
            # failed. The update is one transaction, so the user's indexed revision stayed
            # behind, and the next search of this user rebuilds the rows (and raises if the
            # embedding model, or the index, is still broken then).
            logger.warning(
                "retrieval index update failed for %s; its next search rebuilds it",
                user_key,
                exc_info=True,
            )

    def _with_index(self, use: Callable[[RetrievalIndex], T]) -> T:
        """`use(index)`; an index found unreadable while open is recreated from nothing (it is
        derived: each user is rebuilt from the files at its next search) and `use` runs again.
        So does a `use` whose index another thread closed and recreated under it."""
        from deerflow.agents.memory.backends.deermem.deermem.core.index import (
            IndexClosedError,
            IndexCorruptionError,
            RetrievalIndex,
        )

        index = self._index
        try:
            return use(index)
        except IndexClosedError:
            if self._opened_index is index:
                raise  # closed with the manager, not replaced
        except IndexCorruptionError:
            with self._index_lock:
                if self._opened_index is index:
                    logger.warning(
                        "retrieval index %s is unreadable; recreating it from the files",
                        index.path,
                    )
                    index.close()
                    self._opened_index = RetrievalIndex.reset(index.path, self._embedder)
        return use(self._index)  # on the index that replaced the one `use` failed on

    def _query_similarities(self, snapshot: MemorySnapshot, query: str) -> dict[str, float] | None:
        """Each fact's cosine similarity to `query` from the index; None without embeddings."""
        if self._embedder is None:
            return None
        user_key = safe_user_id(snapshot.user_id)

        def lookup(index: RetrievalIndex) -> dict[str, float]:
            if index.indexed_revision(user_key) != snapshot.revision:
                self._reindex_user(index, snapshot)
            return index.similarities(user_key, snapshot.bucket, query)

        return self._with_index(lookup)

    def _reindex_user(self, index: RetrievalIndex, snapshot: MemorySnapshot) -> None:
        user_key = safe_user_id(snapshot.user_id)
        index.replace_user(user_key, snapshot.revision, self._user_facts(snapshot))

    def _user_facts(self, snapshot: MemorySnapshot) -> Iterator[IndexedFact]:
        from deerflow.agents.memory.backends.deermem.deermem.core.index import IndexedFact

        for bucket in snapshot.buckets:
            records = self._storage.load(snapshot.user_id, _agent(bucket)).facts.values()
            yield from map(IndexedFact.from_record, records)


def _refuse_bad_scope(thread_id: str, user_id: str | None, agent_name: str | None) -> None:
    """Refuse a bad thread id, user id or agent name when it is queued: in the worker, an item
    that can never be written would stay queued for ever.

    Raises:
        ValueError: naming the bad id.
    """
    checked_id(thread_id, "thread_id")
    safe_user_id(user_id)
    bucket_name(agent_name)


def _agent(bucket: str) -> str | None:
    """The agent name that selects `bucket`."""
    return None if bucket == bucket_name(None) else bucket


class _TempFileEngine:
    """TEMP: what `deerflow memory copy` asks of an engine, over the files storage."""

    def __init__(self, manager: DeerMemMemoryManager) -> None:
        self._manager = manager

    def user_ids(self) -> Iterator[str]:
        return self._manager._file_storage("copy").user_ids()

    def dump_user(self, user_id: str) -> Any:
        from deerflow.agents.memory.backends.deermem.deermem.core.dump import dump_file_user

        return dump_file_user(self._manager._file_storage("copy"), user_id)

    def restore_user(self, dump: Any) -> None:
        from deerflow.agents.memory.backends.deermem.deermem.core.dump import restore_file_user

        restore_file_user(self._manager._file_storage("copy"), dump)
