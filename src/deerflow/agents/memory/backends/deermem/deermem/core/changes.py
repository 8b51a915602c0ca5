"""What the storage layer reads and writes: snapshots in, change sets out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChangeSet", "CommitResult", "FactKey", "MemorySnapshot"]

FactKey = tuple[str, str]  # (bucket, fact_id)


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """One user's summaries and one agent bucket's facts, as of `revision`.

    `facts` maps fact id to the stored record (front matter keys plus `content`). Treat it as
    read-only: it may be shared with the storage's cache. A storage never changes a mapping or
    a record it handed out (a snapshot stays as of its revision); a change makes new ones.

    `changed_from`, for caches of what is derived from the facts, may name the `facts` mapping
    of an earlier snapshot of the same bucket and the ids changed since, in the order they
    were changed as a dict changes (removed, replaced in place, or added at the end): every
    other id maps to the very same record object, in the same order. None: unknown.
    """

    user_id: str
    bucket: str
    revision: int
    last_updated: str
    summaries: Mapping[str, Mapping[str, Mapping[str, str]]]  # {"user": {...}, "history": {...}}
    facts: Mapping[str, Mapping[str, Any]]
    buckets: tuple[str, ...]  # every bucket of this user that holds facts
    changed_from: tuple[Mapping[str, Mapping[str, Any]], tuple[str, ...]] | None = None


@dataclass(slots=True)
class ChangeSet:
    """One atomic change of one user's memory, recorded as one audit entry.

    Attributes:
        actor: who made it (`manual`, `extraction`, `import`, `clear`, `revert`, `migration`).
        reason: why, for the audit log.
        summaries: new text per section, e.g. `{"user": {"workContext": "..."}}`.
        upserts: fact records (front matter keys plus `content` and `agent_name`, the bucket);
            the storage assigns `revision`, `user_id` and `schemaVersion`.
        deletes: facts to remove.
        raw_writes: exact file bytes per fact (None removes it); used by undo to restore a file
            byte for byte.
        expected_revision: the user revision this change was computed from (None: unchecked).
        preconditions: per fact, the revision it must have (None: it must not exist).
        expected_files: per fact, the exact bytes its file must hold (None: it must not exist);
            undo uses it, since restoring a file's bytes takes its revision back too.
        rebase: a point operation may commit on a newer revision when every fact it touches
            meets its precondition.
        rebase_onto: for a change that adds facts to one bucket (a create): when the revision
            has moved past `expected_revision`, it is called under the storage lock with that
            bucket's current facts and returns the change redone against them (raising, e.g.
            `DuplicateFactError`, when it no longer applies), which commits on the current
            revision. None: the change is refused with `MemoryConflictError` instead.
        reverts: the change id this change undoes.
    """

    actor: str
    reason: str
    summaries: dict[str, dict[str, str]] = field(default_factory=dict)
    upserts: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[FactKey] = field(default_factory=list)
    raw_writes: dict[FactKey, bytes | None] = field(default_factory=dict)
    expected_revision: int | None = None
    preconditions: dict[FactKey, int | None] = field(default_factory=dict)
    expected_files: dict[FactKey, bytes | None] = field(default_factory=dict)
    rebase: bool = False
    rebase_onto: Callable[[Mapping[str, Mapping[str, Any]]], ChangeSet] | None = None
    reverts: str | None = None

    def touched(self) -> set[FactKey]:
        upserted = {(record["agent_name"], record["id"]) for record in self.upserts}
        return upserted | set(self.deletes) | set(self.raw_writes)


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit did. `change_id` is None when the change set changed nothing."""

    revision: int
    change_id: str | None
    last_updated: str
    upserted: tuple[Mapping[str, Any], ...] = ()
    deleted: tuple[FactKey, ...] = ()
