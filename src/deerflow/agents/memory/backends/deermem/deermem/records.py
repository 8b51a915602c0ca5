"""`RecordStore`: an engine's records with its search index kept in step with every commit.

What the manager and the write pipeline read and commit through. The index is derived data:
each commit is applied to it after the storage committed, a user whose indexed revision is
behind is replaced from the storage before a search, and an index found unreadable is recreated
(each user then rebuilt at its next search). A failed index update never fails the commit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from deerflow.agents.memory.backends.deermem.deermem.core.changes import (
    ChangeSet,
    CommitResult,
    MemorySnapshot,
)
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    DEFAULT_USER,
    bucket_name,
    safe_user_id,
)
from deerflow.agents.memory.backends.deermem.deermem.engine import MemoryEngine, SearchIndex

if TYPE_CHECKING:
    from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
    from deerflow.agents.memory.backends.deermem.deermem.embeddings import Embedder
    from deerflow.agents.memory.backends.deermem.deermem.engine import MemoryStorage
    from deerflow.agents.memory.backends.deermem.deermem.retrieval import IndexedFact, SearchHit

__all__ = ["RecordStore", "agent_of"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


def agent_of(bucket: str) -> str | None:
    """The agent name that selects `bucket`."""
    return None if bucket == bucket_name(None) else bucket


class RecordStore:
    """The engine's storage, search index and usage counts, used as one."""

    def __init__(
        self, engine: MemoryEngine, config: DeerMemConfig, embedder: Embedder | None
    ) -> None:
        self.engine = engine
        self._config = config
        self._embedder = embedder
        self._opened: SearchIndex | None = None
        self._lock = threading.Lock()

    @property
    def storage(self) -> MemoryStorage:
        return self.engine.storage

    # -- records ---------------------------------------------------------------------------------

    def load(self, user_id: str | None, agent_name: str | None) -> MemorySnapshot:
        return self.engine.storage.load(user_id, agent_name)

    def reload(self, user_id: str | None, agent_name: str | None) -> MemorySnapshot:
        """The stored state past every cache; the index re-reads the user at its next search
        (files edited by hand leave the revision alone)."""
        snapshot = self.engine.storage.reload(user_id, agent_name)
        self._with_index(lambda index: index.mark_dirty(safe_user_id(snapshot.user_id)))
        return snapshot

    def commit(self, user_id: str, changes: ChangeSet) -> CommitResult:
        """Commit `changes` atomically, then bring the index up to date."""
        result = self.engine.storage.save(user_id, changes)
        if result.change_id is not None:
            self._update_index(safe_user_id(user_id), result)
        return result

    def read_history(self, user_id: str) -> list[dict[str, Any]]:
        return self.engine.storage.read_history(user_id)

    # -- search ----------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int,
        *,
        user_id: str | None,
        agent_name: str | None,
        category: str | None,
    ) -> list[tuple[Mapping[str, Any], float]]:
        """The best `limit` facts of the bucket for `query`, with their scores, best first."""
        user_key = safe_user_id(DEFAULT_USER if user_id is None else user_id)
        bucket = bucket_name(agent_name)
        storage = self.engine.storage
        # Reading only the hits keeps a user's first search from parsing the whole bucket.
        revision, _ = storage.load_facts(user_id, agent_name, ())

        def lookup(index: SearchIndex) -> list[SearchHit]:
            if index.indexed_revision(user_key) != revision:
                self._reindex_user(index, storage.load(user_id, agent_name))
            return index.search(
                user_key,
                bucket,
                query,
                category=category,
                limit=limit,
                semantic_weight=self._config.retrieval_semantic_weight,
                thread_context=self._config.retrieval_thread_context,
            )

        hits = self._with_index(lookup)
        _, records = storage.load_facts(user_id, agent_name, [hit.fact_id for hit in hits])
        # A hit missing from the storage means the index ran ahead; it heals on the next commit.
        found = [(records[hit.fact_id], hit.score) for hit in hits if hit.fact_id in records]
        if self._config.fact_eviction_policy == "hybrid-v1":
            self._record_access(user_id, bucket, [str(record["id"]) for record, _ in found])
        return found

    def similarities(self, snapshot: MemorySnapshot, query: str) -> dict[str, float] | None:
        """Each fact's cosine similarity to `query`; None without embeddings."""
        if self._embedder is None:
            return None
        user_key = safe_user_id(snapshot.user_id)

        def lookup(index: SearchIndex) -> dict[str, float]:
            if index.indexed_revision(user_key) != snapshot.revision:
                self._reindex_user(index, snapshot)
            return index.similarities(user_key, snapshot.bucket, query)

        return self._with_index(lookup)

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild the whole index from the storage; return how many facts it holds.

        Raises:
            MemoryUnsupportedError: the storage cannot list its users.
        """
        from deerflow.agents.memory.backends.deermem.deermem.retrieval import IndexedFact

        engine = self.engine

        def users() -> Iterator[tuple[str, int, Iterator[IndexedFact]]]:
            for user_id in engine.user_ids():
                revision, records = engine.scan(user_id)
                yield safe_user_id(user_id), revision, map(IndexedFact.from_record, records)

        return self._with_index(lambda index: index.rebuild(users(), progress=progress))

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        """Open the index now rather than at the first search."""
        self._index  # noqa: B018

    def close(self) -> None:
        with self._lock:
            if self._opened is not None:
                self._opened.close()
        self.engine.storage.close()
        self.engine.close()

    # -- internals -------------------------------------------------------------------------------

    @property
    def _index(self) -> SearchIndex:
        """The index, opened on first use (an unreadable one is recreated: it is derived)."""
        index = self._opened
        if index is not None:
            return index
        from deerflow.agents.memory.backends.deermem.deermem.retrieval import (
            IndexCorruptionError,
        )

        with self._lock:
            if self._opened is None:
                try:
                    self._opened = self.engine.open_index(self._embedder)
                except IndexCorruptionError as exc:
                    logger.warning(
                        "retrieval index is unreadable; recreating it from the files: %s", exc
                    )
                    self._opened = self.engine.open_index(self._embedder, reset=True)
            return self._opened

    def _with_index(self, use: Callable[[SearchIndex], T]) -> T:
        """`use(index)`; an index found unreadable while open is recreated from nothing and
        `use` runs again, as does a `use` whose index another thread recreated under it."""
        from deerflow.agents.memory.backends.deermem.deermem.retrieval import (
            IndexClosedError,
            IndexCorruptionError,
        )

        index = self._index
        try:
            return use(index)
        except IndexClosedError:
            if self._opened is not index:
                return use(self._index)  # on the index that replaced the one `use` failed on
            raise  # closed with the store, not replaced
        except IndexCorruptionError as exc:
            with self._lock:
                if self._opened is index:
                    logger.warning(
                        "retrieval index is unreadable; recreating it from the files: %s", exc
                    )
                    index.close()
                    self._opened = self.engine.open_index(self._embedder, reset=True)
            return use(self._index)

    def _update_index(self, user_key: str, result: CommitResult) -> None:
        from deerflow.agents.memory.backends.deermem.deermem.embeddings import EmbeddingError
        from deerflow.agents.memory.backends.deermem.deermem.retrieval import (
            IndexCorruptionError,
            IndexedFact,
        )

        derived: tuple[type[Exception], ...] = (
            EmbeddingError,
            IndexCorruptionError,
            *self.engine.derived_data_errors,
        )
        try:
            self._with_index(
                lambda index: index.apply(
                    user_key,
                    result.revision,
                    [IndexedFact.from_record(record) for record in result.upserted],
                    list(result.deleted),
                )
            )
        except derived:
            # The storage is the truth and the commit has happened: it must not be reported as
            # failed. The update is one transaction, so the user's indexed revision stayed
            # behind, and the next search of this user rebuilds the rows (and raises if the
            # embedding model, or the index, is still broken then).
            logger.warning(
                "retrieval index update failed for %s; its next search rebuilds it",
                user_key,
                exc_info=True,
            )

    def _reindex_user(self, index: SearchIndex, snapshot: MemorySnapshot) -> None:
        index.replace_user(
            safe_user_id(snapshot.user_id), snapshot.revision, self._user_facts(snapshot)
        )

    def _user_facts(self, snapshot: MemorySnapshot) -> Iterable[IndexedFact]:
        from deerflow.agents.memory.backends.deermem.deermem.retrieval import IndexedFact

        storage = self.engine.storage
        for bucket in snapshot.buckets:
            records = storage.load(snapshot.user_id, agent_of(bucket)).facts.values()
            yield from map(IndexedFact.from_record, records)

    def _record_access(self, user_id: str | None, bucket: str, fact_ids: list[str]) -> None:
        """Count a search hit of each fact for `hybrid-v1`; usage data never fails a search."""
        raw_user = DEFAULT_USER if user_id is None else user_id
        try:
            self.engine.usage.record(
                raw_user,
                bucket,
                fact_ids,
                datetime.now(UTC),
                self._config.eviction_access_half_life_days,
            )
        except self.engine.derived_data_errors:
            logger.warning("could not record fact usage of %s/%s", raw_user, bucket, exc_info=True)
