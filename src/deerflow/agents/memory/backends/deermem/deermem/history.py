"""The audit log as users see it, and the change that undoes an entry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet, FactKey
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import parse_fact, public_fact
from deerflow.agents.memory.backends.deermem.deermem.governance import normalized, refuse_duplicate
from deerflow.agents.memory.manager import MemoryConflictError

__all__ = ["check_restorable", "public_entry", "revert_changes", "touches_bucket"]


def touches_bucket(entry: Mapping[str, Any], bucket: str) -> bool:
    """Whether an entry changed this bucket's facts or the user's shared summaries."""
    sides = (entry["before"], entry["after"])
    return any(side["summaries"] for side in sides) or any(
        fact["agent"] == bucket for side in sides for fact in side["facts"]
    )


def _facts(side: Mapping[str, Any], user_id: str, bucket: str | None) -> list[dict[str, Any]]:
    return [
        public_fact(_parse(fact, user_id)) | {"agent_name": fact["agent"]}
        for fact in side["facts"]
        if fact["file"] is not None and bucket in (None, fact["agent"])
    ]


def _parse(fact: Mapping[str, Any], user_id: str) -> dict[str, Any]:
    return _parse_file(fact["file"].encode("utf-8"), fact["agent"], fact["id"], user_id)


def _parse_file(data: bytes, bucket: str, fact_id: str, user_id: str) -> dict[str, Any]:
    """A fact file's bytes kept by the audit log, parsed as if it lay in its bucket."""
    return parse_fact(data, Path(bucket) / f"{fact_id}.md", user_id=user_id, bucket=bucket)


def public_entry(
    entry: Mapping[str, Any], user_id: str, bucket: str | None = None
) -> dict[str, Any]:
    """An audit entry with the facts on each side as fact dicts instead of file text: only
    those of `bucket` when given (an agent sees the shared summaries, not others' facts)."""
    return {
        "change_id": entry["change_id"],
        "at": entry["at"],
        "actor": entry["actor"],
        "reason": entry["reason"],
        "revision": entry["revision"],
        "reverts": entry.get("reverts"),
        "before": {
            "summaries": entry["before"]["summaries"],
            "facts": _facts(entry["before"], user_id, bucket),
        },
        "after": {
            "summaries": entry["after"]["summaries"],
            "facts": _facts(entry["after"], user_id, bucket),
        },
    }


def revert_changes(
    entries: Sequence[Mapping[str, Any]],
    change_id: str,
    user_id: str,
    snapshot_revision: int,
    summaries: Mapping[str, Mapping[str, Mapping[str, str]]],
) -> ChangeSet:
    """The change set that restores what `change_id` changed.

    It only applies while every fact it touches is still byte for byte as that change left it
    (checked when the change set commits).

    Raises:
        ValueError: no such change, or it was already reverted.
        MemoryConflictError: a summary it changed has changed again since.
    """
    entry = next((e for e in entries if e["change_id"] == change_id), None)
    if entry is None:
        raise ValueError(f"change_id: no change {change_id!r} in this user's history")
    undone_by = next((e["change_id"] for e in entries if e.get("reverts") == change_id), None)
    if undone_by is not None:
        raise ValueError(f"change {change_id} was already reverted by {undone_by}")
    for part, sections in entry["after"]["summaries"].items():
        for section, text in sections.items():
            if summaries[part][section]["summary"] != text:
                raise MemoryConflictError(
                    f"summary {part}.{section} changed after {change_id}; revert refused"
                )
    raw_writes: dict[FactKey, bytes | None] = {}
    expected_files: dict[FactKey, bytes | None] = {}
    for before, after in zip(entry["before"]["facts"], entry["after"]["facts"], strict=True):
        key = (before["agent"], before["id"])
        raw_writes[key] = _file_bytes(before)
        expected_files[key] = _file_bytes(after)
    return ChangeSet(
        actor="revert",
        reason=f"revert of {change_id} ({entry['reason']})",
        summaries=entry["before"]["summaries"],
        raw_writes=raw_writes,
        expected_revision=snapshot_revision,
        expected_files=expected_files,
        reverts=change_id,
    )


def check_restorable(
    changes: ChangeSet,
    user_id: str,
    buckets: Mapping[str, Mapping[str, Mapping[str, Any]]],
    max_facts: int,
) -> None:
    """Refuse an undo whose restored facts would overfill a bucket or repeat a stored fact.

    Args:
        changes: the undo, from `revert_changes`.
        user_id: the user it belongs to.
        buckets: the current facts of each bucket it touches, by id.
        max_facts: the capacity of a bucket.

    Raises:
        ValueError: a bucket would hold more than `max_facts` facts (and more than it holds).
        DuplicateFactError: a restored fact says exactly what another fact of its bucket says.
    """
    for bucket, current in buckets.items():
        writes = {i: data for (b, i), data in changes.raw_writes.items() if b == bucket}
        after = {i: f for i, f in current.items() if i not in writes}
        restored = {
            fact_id: _parse_file(data, bucket, fact_id, user_id)
            for fact_id, data in writes.items()
            if data is not None
        }
        if len(after) + len(restored) > max(max_facts, len(current)):
            raise ValueError(
                f"revert refused: bucket {bucket} would hold {len(after) + len(restored)} facts, "
                f"over max_facts={max_facts}; delete facts first"
            )
        ids = list(after)
        texts = [normalized(f["content"]) for f in after.values()]
        for fact_id, record in restored.items():
            refuse_duplicate(ids, texts, record["content"])
            ids.append(fact_id)
            texts.append(normalized(record["content"]))


def _file_bytes(fact: Mapping[str, Any]) -> bytes | None:
    return None if fact["file"] is None else fact["file"].encode("utf-8")
