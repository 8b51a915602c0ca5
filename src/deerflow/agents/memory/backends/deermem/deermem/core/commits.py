"""What committing a `ChangeSet` does to a user's memory, whichever engine stores it.

Every engine holds each fact as a record whose canonical bytes are its fact file
(`render_fact`): preconditions and undo compare those bytes, and the audit entry keeps them, so
the files engine and the PostgreSQL engine check, stamp and record a change alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet, FactKey
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import (
    SCHEMA_VERSION,
    render_fact,
)
from deerflow.agents.memory.manager import (
    FactNotFoundError,
    MemoryConflictError,
    empty_document,
)

__all__ = [
    "DOCUMENT_VERSION",
    "Commit",
    "Stored",
    "changed_facts",
    "changed_summaries",
    "check_history_entry",
    "check_preconditions",
    "check_summaries",
    "prepare_commit",
    "rebased",
    "stored_bytes",
]

DOCUMENT_VERSION: Final = "2.0"
# Fields whose change alone does not make a new fact revision.
_BOOKKEEPING: Final = frozenset({"revision", "updatedAt"})
# The summary sections of a user's document, by part.
_SUMMARY_SECTIONS: Final = {part: tuple(empty_document()[part]) for part in ("user", "history")}
_ENTRY_KEYS: Final = ("change_id", "at", "actor", "reason", "revision", "before", "after")

Stored = tuple[bytes, dict[str, Any]]
"""A stored fact: its canonical file bytes and its record."""


def new_change_id() -> str:
    return f"chg_{uuid.uuid4().hex}"


def rebased(
    changes: ChangeSet, revision: int, facts_of: Callable[[str], Mapping[str, Mapping[str, Any]]]
) -> ChangeSet:
    """`changes`, a create computed at an older revision, redone by its `rebase_onto` against
    the current facts of its bucket (`facts_of(bucket)`, read under the user's lock) to
    commit on `revision`.

    Raises:
        ValueError: `changes` does not add facts to exactly one bucket.
    """
    buckets = {record["agent_name"] for record in changes.upserts}
    if changes.rebase_onto is None or len(buckets) != 1 or changes.summaries:
        raise ValueError("rebase_onto: only a change that adds facts to one bucket rebases")
    (bucket,) = buckets
    redone = changes.rebase_onto(facts_of(bucket))
    return replace(redone, expected_revision=revision, rebase_onto=None)


def stored_bytes(stored: Stored | None) -> bytes | None:
    return None if stored is None else stored[0]


def check_preconditions(
    changes: ChangeSet, revision: int, current: Mapping[FactKey, Stored | None], user_key: str
) -> None:
    """Refuse `changes` when a fact precondition, an expected file or the expected revision
    no longer holds (a point operation with `rebase` commits on a newer revision).

    Raises:
        MemoryConflictError: naming what changed.
    """
    for key, wanted in changes.preconditions.items():
        stored = current.get(key)
        have = None if stored is None else stored[1]["revision"]
        if have != wanted:
            raise MemoryConflictError(
                f"fact {key[1]} changed concurrently (revision {have}, expected {wanted}); "
                "reload and retry"
            )
    for key, wanted_bytes in changes.expected_files.items():
        if stored_bytes(current.get(key)) != wanted_bytes:
            raise MemoryConflictError(f"fact {key[1]} has changed since; refused")
    if changes.expected_revision is None or changes.expected_revision == revision:
        return
    point_operation = changes.rebase and not changes.summaries
    if point_operation and changes.touched() <= set(changes.preconditions):
        return
    raise MemoryConflictError(
        f"memory of {user_key} changed concurrently (revision {revision}, expected "
        f"{changes.expected_revision}); reload and retry"
    )


def changed_facts(
    changes: ChangeSet,
    raw_user: str,
    current: Mapping[FactKey, Stored | None],
    parse: Callable[[FactKey, bytes], dict[str, Any]],
) -> tuple[dict[FactKey, bytes | None], list[dict[str, Any]]]:
    """The new bytes of each fact `changes` really changes (None: deleted), and the records
    it writes. `parse` reads the bytes of an undo's raw write as a record of its bucket.

    Raises:
        FactNotFoundError: a delete names a fact that does not exist.
    """
    after: dict[FactKey, bytes | None] = dict(changes.raw_writes)
    upserted = [parse(key, data) for key, data in changes.raw_writes.items() if data is not None]
    for record in changes.upserts:
        key = (record["agent_name"], record["id"])
        stored = current[key]
        new = _stamped(record, raw_user, stored)
        if stored is None or _material(new) != _material(stored[1]):
            after[key] = render_fact(new)
            upserted.append(new)
    for key in changes.deletes:
        if current[key] is None:
            raise FactNotFoundError(key[1])
        after[key] = None
    changed = {key: data for key, data in after.items() if data != stored_bytes(current[key])}
    return changed, upserted


def _stamped(record: Mapping[str, Any], raw_user: str, current: Stored | None) -> dict[str, Any]:
    stamped = dict(record)
    stamped.setdefault("status", "active")
    stamped.update(user_id=raw_user, schemaVersion=SCHEMA_VERSION)
    stamped["revision"] = 1 if current is None else current[1]["revision"] + 1
    return stamped


def _material(record: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in _BOOKKEEPING}


def changed_summaries(
    document: Mapping[str, Any], wanted: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """The sections of `wanted` whose text differs from `document`'s.

    Raises:
        ValueError: an unknown section.
    """
    changed: dict[str, dict[str, str]] = {}
    for part, sections in wanted.items():
        for section, text in sections.items():
            if part not in ("user", "history") or section not in document[part]:
                raise ValueError(f"summaries: unknown section {part}.{section}")
            if document[part][section]["summary"] != text:
                changed.setdefault(part, {})[section] = text
    return changed


@dataclass(frozen=True, slots=True)
class Commit:
    """What a commit writes besides the facts: the new revision, its change id, the summaries
    with the change's texts, and the audit log's entry."""

    revision: int
    change_id: str
    summaries: dict[str, Any]
    entry: dict[str, Any]


def prepare_commit(
    changes: ChangeSet,
    *,
    revision: int,
    summaries: Mapping[str, Any],
    texts: dict[str, dict[str, str]],
    current: Mapping[FactKey, Stored | None],
    after: Mapping[FactKey, bytes | None],
    now: str,
) -> Commit:
    """The commit of `changes` on top of `revision`: `summaries` (a document, or its summary
    parts) with the summary `texts` written at `now`, and the audit entry of those texts and
    of the fact files from `current` to `after`."""
    new_revision = revision + 1
    change_id = new_change_id()
    written, replaced = with_summaries(summaries, texts, now)
    entry = audit_entry(
        changes,
        change_id=change_id,
        now=now,
        revision=new_revision,
        summaries=(replaced, texts),
        files=({key: stored_bytes(current[key]) for key in after}, after),
    )
    return Commit(new_revision, change_id, written, entry)


def with_summaries(
    document: Mapping[str, Any], summaries: Mapping[str, Mapping[str, str]], now: str
) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """`document` with the `summaries` texts written at `now`, and the texts they replace.

    Copied on write: a part no summary changes stays the very same mapping, so what callers
    derived from it holds (a JSON round trip of the whole document took 12.5 us).
    """
    new = dict(document)
    before: dict[str, dict[str, str]] = {}
    for part, sections in summaries.items():
        new[part] = dict(new[part])
        for section, text in sections.items():
            before.setdefault(part, {})[section] = new[part][section]["summary"]
            new[part][section] = {"summary": text, "updatedAt": now}
    return new, before


def audit_entry(
    changes: ChangeSet,
    *,
    change_id: str,
    now: str,
    revision: int,
    summaries: tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]],
    files: tuple[Mapping[FactKey, bytes | None], Mapping[FactKey, bytes | None]],
) -> dict[str, Any]:
    """The audit log's entry of a commit: `summaries` and `files` are (before, after)."""
    return {
        "change_id": change_id,
        "at": now,
        "actor": changes.actor,
        "reason": changes.reason,
        "revision": revision,
        "reverts": changes.reverts,
        "before": _history_side(summaries[0], files[0]),
        "after": _history_side(summaries[1], files[1]),
    }


def _history_side(
    summaries: dict[str, dict[str, str]], files: Mapping[FactKey, bytes | None]
) -> dict[str, Any]:
    return {
        "summaries": summaries,
        "facts": [
            {"agent": key[0], "id": key[1], "file": None if data is None else data.decode("utf-8")}
            for key, data in files.items()
        ],
    }


def check_summaries(document: Mapping[str, Any]) -> None:
    """Raise `ValueError` naming the first summary section of `document` (a user's document,
    or its `{user, history}` parts) that is missing or not `{summary: text, ...}`."""
    for part, sections in _SUMMARY_SECTIONS.items():
        if not isinstance(document.get(part), dict):
            raise ValueError(f"{part}: not an object of summaries")
        for section in sections:
            entry = document[part].get(section)
            if not isinstance(entry, dict) or not isinstance(entry.get("summary"), str):
                raise ValueError(f"{part}.{section}: not a summary ({{summary, updatedAt}})")


def check_history_entry(entry: Any) -> dict[str, Any]:
    """`entry`, checked to have the shape `audit_entry` gives.

    Raises:
        ValueError: naming what is wrong with it.
    """
    if not isinstance(entry, dict):
        raise ValueError("not an audit entry (not a JSON object)")
    if missing := [key for key in _ENTRY_KEYS if key not in entry]:
        raise ValueError(f"not an audit entry (without {', '.join(missing)})")
    sides = entry["before"], entry["after"]
    for name, side in zip(("before", "after"), sides, strict=True):
        if not (
            isinstance(side, dict)
            and isinstance(side.get("summaries"), dict)
            and isinstance(side.get("facts"), list)
            and all(map(_is_history_fact, side["facts"]))
        ):
            raise ValueError(f"{name}: not one side of a change")
    if [(f["agent"], f["id"]) for f in sides[0]["facts"]] != [
        (f["agent"], f["id"]) for f in sides[1]["facts"]
    ]:
        raise ValueError("before and after name different facts")
    return entry


def _is_history_fact(fact: Any) -> bool:
    return (
        isinstance(fact, dict)
        and isinstance(fact.get("agent"), str)
        and isinstance(fact.get("id"), str)
        and isinstance(fact.get("file"), str | None)
    )
