"""`MemoryEdits`: the contract's writes of facts and summaries, over a `RecordStore`.

Each write is derived from a snapshot and committed against the snapshot's revision; a conflict
(another writer came first) recomputes it on the newer state, a bounded number of times. With a
caller's `expected_revision` the write holds exactly at that revision or is refused.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet, MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    DEFAULT_USER,
    safe_user_id,
    validate_fact_id,
)
from deerflow.agents.memory.backends.deermem.deermem.governance import (
    CapacityPolicy,
    capacity_evictions,
    normalized,
    refuse_duplicate,
)
from deerflow.agents.memory.backends.deermem.deermem.records import RecordStore, agent_of
from deerflow.agents.memory.backends.deermem.deermem.usage import capacity_heat
from deerflow.agents.memory.backends.deermem.deermem.views import RecordViews
from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactNotFoundError,
    MemoryConflictError,
    check_revision,
    refuse_secrets,
    utc_now,
    validate_category,
    validate_confidence,
    validate_content,
    validate_summary,
)

__all__ = ["MemoryEdits"]

# Snapshot-derived writes (create with capacity, clear, import, revert) recompute on conflict.
MAX_ATTEMPTS: Final = 5
# Snapshot-derived writes of one user from this process take turns on one of these locks (users
# share a lock by hash): bounded, and a collision only makes two users wait for each other.
WRITE_TURN_STRIPES: Final = 64
T = TypeVar("T")
Document = dict[str, Any]


class MemoryEdits:
    """Creates, updates, deletes, clears, imports, summary edits and undo."""

    def __init__(self, store: RecordStore, config: DeerMemConfig, views: RecordViews) -> None:
        self._store = store
        self._config = config
        self._views = views
        self._turns = tuple(threading.Lock() for _ in range(WRITE_TURN_STRIPES))

    def document(self, user_id: str | None, agent_name: str | None) -> Document:
        return self._views.document(self._store.load(user_id, agent_name))

    def create_fact(
        self,
        content: str,
        category: str,
        confidence: float,
        fact_id: str | None,
        *,
        user_id: str | None,
        agent_name: str | None,
        expected_revision: int | None = None,
    ) -> tuple[Document, str]:
        """Store a fact. Without `expected_revision`, a create that another writer overtook is
        redone on the newer revision inside the commit (duplicates and capacity checked again
        there), not refused: creates commute."""
        text = validate_content(content)
        refuse_secrets(text)
        category = validate_category(category)
        confidence = validate_confidence(confidence)
        if fact_id is not None:
            validate_fact_id(fact_id)

        def attempt() -> tuple[Document, str]:
            snapshot = self._store.load(user_id, agent_name)
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
                self._store.engine.usage, self._config, snapshot.user_id, snapshot.bucket, moment
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
            self._store.commit(snapshot.user_id, changes)
            return self.document(user_id, agent_name), record["id"]

        return self._retrying(user_id, attempt)

    def update_fact(
        self,
        fact_id: str,
        content: str | None,
        category: str | None,
        confidence: float | None,
        *,
        user_id: str | None,
        agent_name: str | None,
        expected_revision: int | None,
    ) -> Document:
        text = None if content is None else validate_content(content)
        if text is not None:
            refuse_secrets(text)
        category = None if category is None else validate_category(category)
        confidence = None if confidence is None else validate_confidence(confidence)

        def attempt() -> Document:
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
                self._store.commit(
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
            return self.document(user_id, agent_name)

        return self._retrying(user_id, attempt)

    def delete_fact(
        self,
        fact_id: str,
        *,
        user_id: str | None,
        agent_name: str | None,
        expected_revision: int | None,
    ) -> Document:
        def attempt() -> Document:
            snapshot, current = self._existing(fact_id, user_id, agent_name, expected_revision)
            self._store.commit(
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
            return self.document(user_id, agent_name)

        return self._retrying(user_id, attempt)

    def clear(
        self, *, user_id: str | None, agent_name: str | None, expected_revision: int | None
    ) -> Document:
        def attempt() -> Document:
            snapshot = self._store.load(user_id, agent_name)
            check_revision(snapshot.revision, expected_revision)
            buckets = [snapshot.bucket] if agent_name is not None else list(snapshot.buckets)
            # Read past the cache: a fact file added by hand must go too.
            deletes = [
                (bucket, fact_id)
                for bucket in buckets
                for fact_id in self._store.reload(user_id, agent_of(bucket)).facts
            ]
            if not deletes and snapshot.revision == 0:  # nothing stored: leave no trace
                return self.document(user_id, agent_name)
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
            self._store.commit(snapshot.user_id, changes)
            return self.document(user_id, agent_name)

        return self._retrying(user_id, attempt)

    def import_memory(
        self,
        data: dict[str, Any],
        *,
        user_id: str | None,
        agent_name: str | None,
        expected_revision: int | None,
    ) -> Document:
        from deerflow.agents.memory.backends.deermem.deermem.imports import imported_changes

        def attempt() -> Document:
            snapshot = self._store.reload(user_id, agent_name)  # hand-added files go too
            check_revision(snapshot.revision, expected_revision)
            changes = imported_changes(data, snapshot, max_facts=self._config.max_facts)
            self._store.commit(snapshot.user_id, changes)
            return self.document(user_id, agent_name)

        return self._retrying(user_id, attempt)

    def update_summary(
        self,
        part: str,
        section: str,
        text: str,
        *,
        user_id: str | None,
        agent_name: str | None,
        expected_revision: int | None,
    ) -> Document:
        part, section, summary = validate_summary(part, section, text)

        def attempt() -> Document:
            snapshot = self._store.load(user_id, agent_name)
            check_revision(snapshot.revision, expected_revision)
            if snapshot.summaries[part][section]["summary"] != summary:
                changes = ChangeSet(
                    actor="manual",
                    reason=f"update_summary {part}.{section}",
                    summaries={part: {section: summary}},
                    expected_revision=snapshot.revision,
                )
                self._store.commit(snapshot.user_id, changes)
            return self.document(user_id, agent_name)

        return self._retrying(user_id, attempt)

    def revert(
        self, change_id: str, *, user_id: str | None, expected_revision: int | None
    ) -> dict[str, Any]:
        from deerflow.agents.memory.backends.deermem.deermem.history import (
            check_restorable,
            public_entry,
            revert_changes,
        )

        raw_user = DEFAULT_USER if user_id is None else user_id

        def attempt() -> dict[str, Any]:
            snapshot = self._store.load(raw_user, None)
            check_revision(snapshot.revision, expected_revision)
            entries = self._store.read_history(raw_user)
            changes = revert_changes(
                entries, change_id, raw_user, snapshot.revision, snapshot.summaries
            )
            buckets = {bucket for bucket, _ in changes.raw_writes}
            check_restorable(
                changes,
                raw_user,
                {b: self._store.load(raw_user, agent_of(b)).facts for b in sorted(buckets)},
                self._config.max_facts,
            )
            result = self._store.commit(raw_user, changes)
            recorded = next(
                e for e in self._store.read_history(raw_user) if e["change_id"] == result.change_id
            )
            return public_entry(recorded, raw_user)

        return self._retrying(user_id, attempt)

    def _existing(
        self, fact_id: str, user_id: str | None, agent_name: str | None, expected_revision: Any
    ) -> tuple[MemorySnapshot, dict[str, Any]]:
        """The snapshot, checked to be at `expected_revision` (None: any), and the fact."""
        validate_fact_id(fact_id)
        snapshot = self._store.load(user_id, agent_name)
        check_revision(snapshot.revision, expected_revision)
        current = snapshot.facts.get(fact_id)
        if current is None:
            raise FactNotFoundError(fact_id)
        return snapshot, dict(current)

    def _retrying(self, user_id: str | None, attempt: Callable[[], T]) -> T:
        """Run a snapshot-derived write, again on conflict, a bounded number of times.

        Writes of one user from this process take turns (a gateway's concurrent requests would
        otherwise keep invalidating each other's snapshot until the attempts run out), so only
        another process's commit can make an attempt conflict.
        """
        user_key = safe_user_id(DEFAULT_USER if user_id is None else user_id)
        with self._turns[hash(user_key) % WRITE_TURN_STRIPES]:
            for _ in range(MAX_ATTEMPTS - 1):
                try:
                    return attempt()
                except MemoryConflictError:
                    continue
            return attempt()
