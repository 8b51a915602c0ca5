"""Migration of the old single-file memory layout into the current one (docs/data-format.md).

Three kinds of legacy file hold a memory document with inline `facts`:

* `{root}/memory.json`, from before memory was per user: it becomes user `default`, its facts
  the `__default__` bucket;
* `{root}/agents/{agent}/memory.json`: also user `default`, facts in that agent's bucket;
* `{root}/users/{safe id}/memory.json` whose `version` is not "2.0" or that has `facts`: that
  user, facts in `__default__`.

A file is migrated only whole: every fact is validated first (content, confidence, secrets,
id clashes) and every summary must fit (the stored section is empty or says the same), else
nothing is written and the error names each problem for an operator to fix. Then each source
gets a byte-identical `<name>.v1.bak`, and one `actor="migration"` commit writes the facts and
summaries, so the migration is in `history.jsonl` and revertible. The root and per-agent files
are removed after that commit; a per-user file is removed just before it, because the commit
writes the new `memory.json` in its place. Until that commit lands, its `.v1.bak` without a
`memory.json` next to it marks the migration as unfinished, and the next run resumes from it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from deerflow.agents.memory.backends.deermem.deermem.core.atomic import atomic_write, fsync_dir
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet, FactKey
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import parse_fact
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    DEFAULT_AGENT,
    DEFAULT_USER,
    FACT_ID_PATTERN,
    UserPaths,
    bucket_name,
    safe_user_id,
    user_paths,
)
from deerflow.agents.memory.backends.deermem.deermem.core.storage import FileMemoryStorage
from deerflow.agents.memory.manager import (
    FACT_CATEGORIES,
    MemoryCorruptionError,
    MemoryManagerError,
    empty_document,
    utc_now,
    validate_confidence,
    validate_content,
)

__all__ = [
    "LegacySource",
    "MigrationError",
    "MigrationReport",
    "UserMigration",
    "find_legacy",
    "migrate",
    "migrate_if_needed",
]

BACKUP_SUFFIX: Final = ".v1.bak"
CURRENT_VERSION: Final = "2.0"
_SOURCE_TYPES: Final = ("conversation", "manual", "consolidation", "import", "unknown")
# Front matter the storage owns, never carried over from a legacy fact.
_STORAGE_KEYS: Final = frozenset({"status", "revision", "user_id", "agent_name", "schemaVersion"})
_FACT_KEYS: Final = frozenset({"id", "content", "category", "confidence", "source"})
# Fields that may differ between a legacy fact and the same fact already stored.
_BOOKKEEPING: Final = _STORAGE_KEYS | {"createdAt", "updatedAt"}

SourceKind = Literal["root", "agent", "user"]
_Summaries = dict[str, dict[str, str]]


class MigrationError(MemoryCorruptionError):
    """A user's legacy memory cannot be migrated as it is; nothing was changed.

    Attributes:
        problems: one line per problem, each naming the file and the fact or section.
    """

    def __init__(self, user_id: str, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            f"legacy memory of user {user_id!r} was not migrated (nothing changed): "
            + "; ".join(problems)
        )


@dataclass(frozen=True, slots=True)
class LegacySource:
    """One legacy file to migrate.

    Attributes:
        kind: `root`, `agent` or `user` (see the module docstring).
        path: the legacy file. For an unfinished per-user migration it no longer exists and
            its backup is read instead.
        user_key: the user's directory name under `users/`.
        user_id: the raw user id, or None when it cannot be told from a hashed directory name.
        agent: the agent directory name of an `agent` source.
    """

    kind: SourceKind
    path: Path
    user_key: str
    user_id: str | None
    agent: str | None = None

    @property
    def backup(self) -> Path:
        return self.path.with_name(self.path.name + BACKUP_SUFFIX)

    @property
    def resumed(self) -> bool:
        """An unfinished per-user migration: `memory.json` was already replaced by its backup."""
        return self.kind == "user" and not self.path.exists()

    def read(self) -> bytes:
        return (self.backup if self.resumed else self.path).read_bytes()


@dataclass(slots=True)
class UserMigration:
    """What migrating one user did (or, in a dry run, would do)."""

    user_id: str
    sources: list[Path] = field(default_factory=list)
    buckets: dict[str, int] = field(default_factory=dict)  # facts moved into each bucket
    summaries: list[str] = field(default_factory=list)  # sections adopted, e.g. user.workContext
    backups: list[Path] = field(default_factory=list)
    change_id: str | None = None
    error: str | None = None

    @property
    def facts(self) -> int:
        return sum(self.buckets.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "sources": [str(path) for path in self.sources],
            "facts": self.facts,
            "buckets": dict(self.buckets),
            "summaries": list(self.summaries),
            "backups": [str(path) for path in self.backups],
            "change_id": self.change_id,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class MigrationReport:
    """The outcome per user of `migrate`; `ok` is False if any user failed."""

    dry_run: bool
    users: tuple[UserMigration, ...]

    @property
    def ok(self) -> bool:
        return all(user.error is None for user in self.users)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "ok": self.ok,
            "users": [user.as_dict() for user in self.users],
        }


# -- finding legacy files ------------------------------------------------------------------------


def find_legacy(root: Path) -> list[LegacySource]:
    """Every legacy file under the storage root: what `migrate` would migrate."""
    sources = _root_sources(root)
    users = root / "users"
    if users.is_dir():
        for directory in sorted(users.iterdir()):
            source = _user_source(root, directory.name, None) if directory.is_dir() else None
            if source is not None:
                sources.append(source)
    return sources


def _root_sources(root: Path) -> list[LegacySource]:
    """The user-less files, which belong to user `default`.

    Nothing of the current layout lives there, so an unreadable one is listed too, to be
    refused with its error rather than ignored.
    """
    key = safe_user_id(DEFAULT_USER)
    sources = []
    if _is_legacy(root / "memory.json", unreadable=True):
        sources.append(LegacySource("root", root / "memory.json", key, DEFAULT_USER))
    agents = root / "agents"
    if agents.is_dir():
        for directory in sorted(agents.iterdir()):
            path = directory / "memory.json"
            if _is_legacy(path, unreadable=True):
                sources.append(LegacySource("agent", path, key, DEFAULT_USER, directory.name))
    return sources


def _user_source(root: Path, user_key: str, user_id: str | None) -> LegacySource | None:
    paths = user_paths(root, user_key)
    source = LegacySource("user", paths.manifest, user_key, user_id)
    # An unreadable memory.json here is not legacy but corruption, which the storage reports.
    legacy = _is_legacy(paths.manifest, unreadable=False)
    if not legacy and not (source.resumed and source.backup.is_file()):
        return None
    if user_id is None:
        document = _json_object(source.read())
        stored_id = None if document is None else document.get("userId")
        if isinstance(stored_id, str) and stored_id and safe_user_id(stored_id) == user_key:
            user_id = stored_id
        elif safe_user_id(user_key) == user_key:  # a plain id names its own directory
            user_id = user_key
        source = LegacySource("user", paths.manifest, user_key, user_id)
    return source


def _sources_of(root: Path, user_id: str) -> list[LegacySource]:
    user_key = safe_user_id(user_id)
    own = _user_source(root, user_key, user_id)
    shared = _root_sources(root) if user_key == safe_user_id(DEFAULT_USER) else []
    return ([own] if own is not None else []) + shared


def _is_legacy(path: Path, *, unreadable: bool) -> bool:
    """Whether `path` holds a memory document with inline facts or an old version.

    Args:
        path: a `memory.json`; a missing one is not legacy.
        unreadable: the answer for a file that is not a JSON object.
    """
    if not path.is_file():
        return False
    document = _json_object(path.read_bytes())
    if document is None:
        return unreadable
    return document.get("version") != CURRENT_VERSION or "facts" in document


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


# -- migrating -------------------------------------------------------------------------------------


def migrate(
    root: Path,
    storage: FileMemoryStorage,
    *,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> MigrationReport:
    """Migrate every legacy file under `root` (the storage's root), one commit per user.

    A user that fails is reported with its error and left as it was; the others still migrate.
    With `dry_run`, nothing on disk changes (not even a lock file). `progress` is called with
    the number of users done after each one.

    Raises:
        ValueError: `root` is not the storage's root.
    """
    if root.resolve() != storage.root.resolve():
        raise ValueError(f"root: {root} is not the storage root {storage.root}")
    by_user: dict[str, list[LegacySource]] = {}
    for source in find_legacy(root):
        by_user.setdefault(source.user_key, []).append(source)
    results = []
    for user_key, sources in by_user.items():
        user_id = sources[0].user_id
        if user_id is None:
            results.append(
                UserMigration(
                    user_key,
                    sources=[source.path for source in sources],
                    error=f"cannot tell the user id of users/{user_key} (a hashed name and no "
                    "userId in the file); it migrates on that user's first read",
                )
            )
            continue
        try:
            results.append(_migrate_user(storage, user_id, dry_run=dry_run))
        except (MemoryManagerError, OSError) as exc:
            paths = [source.path for source in sources]
            results.append(UserMigration(user_id, sources=paths, error=str(exc)))
        if progress is not None:
            progress(len(results))
    return MigrationReport(dry_run, tuple(results))


def migrate_if_needed(storage: FileMemoryStorage, user_id: str) -> UserMigration | None:
    """Migrate this user's legacy memory, if any: the storage's `open_user`, which runs before
    the storage first reads or writes the user (a legacy file put there later is migrated by
    `migrate` or the next process).

    Returns:
        What was migrated, or None when there was nothing to do.

    Raises:
        MigrationError: the legacy memory needs an operator; it was left as it was.
    """
    if not _sources_of(storage.root, user_id):
        return None
    report = _migrate_user(storage, user_id, dry_run=False)
    return report if report.sources else None  # another process may have migrated it meanwhile


def _migrate_user(storage: FileMemoryStorage, user_id: str, *, dry_run: bool) -> UserMigration:
    paths = user_paths(storage.root, safe_user_id(user_id))
    # Hold the user's lock throughout, so no other writer sees a half-migrated user; the storage's
    # own lock object, because it is re-entrant and `save` below takes it again.
    held: AbstractContextManager[None] = (
        nullcontext() if dry_run else storage.user_lock(user_id).hold()
    )
    with held, storage.opening(user_id):
        if not dry_run and paths.journal.exists():
            storage.reload(user_id, None)  # finish or undo an interrupted commit first
        plan = _Plan.build(
            paths, user_id, _sources_of(storage.root, user_id), storage.config.max_facts
        )
        if plan.problems:
            raise MigrationError(user_id, plan.problems)
        if not dry_run and plan.sources:
            plan.apply(storage, paths)
        return plan.report


@dataclass(slots=True)
class _Plan:
    """The single change that migrates one user, checked before anything is written."""

    user_id: str
    sources: list[LegacySource]
    replaces_manifest: bool  # a per-user legacy file: the commit writes memory.json anew
    revision: int
    stored_summaries: _Summaries
    summaries: _Summaries = field(default_factory=dict)
    upserts: dict[FactKey, dict[str, Any]] = field(default_factory=dict)
    backups: dict[Path, bytes] = field(default_factory=dict)
    stored: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    report: UserMigration = field(init=False)

    def __post_init__(self) -> None:
        self.report = UserMigration(self.user_id, sources=[s.path for s in self.sources])

    @classmethod
    def build(
        cls, paths: UserPaths, user_id: str, sources: list[LegacySource], max_facts: int
    ) -> _Plan:
        replaces = any(source.kind == "user" for source in sources)
        manifest = None if replaces or not paths.manifest.exists() else paths.manifest.read_bytes()
        document = _json_object(manifest) if manifest is not None else None
        if document is None:
            document = dict(empty_document())
        revision = document.get("revision")
        revision = revision if isinstance(revision, int) else 0  # the commit reports a bad one
        plan = cls(user_id, sources, replaces, revision, _texts(document))
        for source in sources:
            plan._add(source, paths)
        plan._check_capacity(max_facts)
        return plan

    def _check_capacity(self, max_facts: int) -> None:
        """A bucket over `max_facts` would lose its excess to eviction at its next write."""
        for bucket, stored in self.stored.items():
            total = len(stored) + sum(1 for key in self.upserts if key[0] == bucket)
            if total > max_facts:
                self.problems.append(
                    f"bucket {bucket}: {total} facts exceed max_facts={max_facts}, and the next "
                    "write would evict the rest; raise max_facts (at most 10000) or remove facts "
                    "from the legacy file, then migrate again"
                )

    def _add(self, source: LegacySource, paths: UserPaths) -> None:
        try:
            data = source.read()
            document = _json_object(data)
            if document is None:
                raise ValueError("not a JSON object")
            bucket = DEFAULT_AGENT if source.agent is None else bucket_name(source.agent)
        except (OSError, ValueError) as exc:
            self.problems.append(f"{source.path}: {exc}")
            return
        if not source.resumed:
            self._back_up(source, data)
        self._adopt_summaries(source.path, document)
        facts = document.get("facts", [])
        if not isinstance(facts, list):
            self.problems.append(f"{source.path}: facts: must be a list")
            return
        if bucket not in self.stored:
            self.stored[bucket] = _stored_facts(paths, self.user_id, bucket)
        for number, raw in enumerate(facts):
            self._add_fact(source, number, raw, bucket)

    def _back_up(self, source: LegacySource, data: bytes) -> None:
        if not source.backup.exists():
            self.backups[source.backup] = data
            self.report.backups.append(source.backup)
        elif source.backup.read_bytes() != data:
            self.problems.append(
                f"{source.backup} exists and differs from {source.path.name}; move it away "
                "(it may be an earlier backup worth keeping), then migrate again"
            )

    def _adopt_summaries(self, path: Path, document: Mapping[str, Any]) -> None:
        # Imported here: only a migration scans for secrets, not each read that looks for one.
        from deerflow.agents.memory.backends.deermem.deermem.core.scrub import find_secret

        for part, sections in self.stored_summaries.items():
            entries = document.get(part) or {}
            if not isinstance(entries, Mapping):
                self.problems.append(f"{path}: {part}: must be an object")
                continue
            for section in sections:
                where = f"{path}: summary {part}.{section}"
                entry = entries.get(section)
                text = entry.get("summary", "") if isinstance(entry, Mapping) else entry or ""
                if not isinstance(text, str):
                    self.problems.append(f"{where}: must be text")
                    continue
                text = text.strip()
                current = self.summaries.get(part, {}).get(section, sections[section])
                secret = find_secret(text)
                if secret is not None:
                    self.problems.append(f"{where}: {secret}; edit the legacy file first")
                elif current and text and current != text:
                    self.problems.append(
                        f"{where} differs from the one already stored; the legacy file is kept "
                        "for an operator to reconcile"
                    )
                elif text and not current:
                    self.summaries.setdefault(part, {})[section] = text
                    self.report.summaries.append(f"{part}.{section}")

    def _add_fact(self, source: LegacySource, number: int, raw: Any, bucket: str) -> None:
        where = f"{source.path}: facts[{number}]"
        if isinstance(raw, Mapping) and raw.get("id") is not None:
            where += f" (id {raw['id']!r})"
        try:
            record = _record(raw, bucket, _new_id(source, number, raw))
        except ValueError as exc:
            self.problems.append(f"{where}: {exc}")
            return
        key = (bucket, record["id"])
        existing = self.upserts.get(key) or self.stored[bucket].get(record["id"])
        if existing is None:
            self.upserts[key] = record
            self.report.buckets[bucket] = self.report.buckets.get(bucket, 0) + 1
        elif _material(existing) != _material(record):
            self.problems.append(
                f"{where}: fact {record['id']} already exists in bucket {bucket} with other "
                "content or fields"
            )

    def apply(self, storage: FileMemoryStorage, paths: UserPaths) -> None:
        for backup, data in self.backups.items():
            atomic_write(backup, data)
        if self.replaces_manifest and paths.manifest.exists():
            # The bytes are safe in the backup; the commit writes the v2 memory.json afresh.
            paths.manifest.unlink()
            fsync_dir(paths.dir)
        names = ", ".join(str(s.path.relative_to(storage.root)) for s in self.sources)
        result = storage.save(
            self.user_id,
            ChangeSet(
                actor="migration",
                reason=f"migration of legacy memory ({self.report.facts} facts from {names})",
                summaries=self.summaries,
                upserts=list(self.upserts.values()),
                expected_revision=0 if self.replaces_manifest else self.revision,
            ),
        )
        self.report.change_id = result.change_id
        if self.replaces_manifest and not paths.manifest.exists():
            # An empty legacy document makes no commit, yet must not look unfinished.
            atomic_write(paths.manifest, _empty_manifest(self.user_id))
        for source in self.sources:
            if source.kind != "user":
                source.path.unlink()
                fsync_dir(source.path.parent)


def _texts(document: Mapping[str, Any]) -> _Summaries:
    """The summary text of every known section of a v2 document ("" where it has none)."""
    template = empty_document()
    texts: _Summaries = {}
    for part in ("user", "history"):
        stored = document.get(part)
        sections = stored if isinstance(stored, Mapping) else {}
        texts[part] = {
            section: str(entry.get("summary") or "") if isinstance(entry, Mapping) else ""
            for section in template[part]
            for entry in (sections.get(section),)
        }
    return texts


def _stored_facts(paths: UserPaths, user_id: str, bucket: str) -> dict[str, dict[str, Any]]:
    # Read directly rather than through the storage: a legacy memory.json may not be loadable.
    files = sorted(paths.facts_dir(bucket).glob("*/fact_*.md"))
    records = (parse_fact(p.read_bytes(), p, user_id=user_id, bucket=bucket) for p in files)
    return {record["id"]: record for record in records}


def _new_id(source: LegacySource, number: int, raw: Any) -> str:
    """A fact id derived from where the fact sits, so that a rerun gives the same id."""
    legacy_id = raw.get("id") if isinstance(raw, Mapping) else None
    seed = f"{source.kind}\x00{source.user_key}\x00{source.agent}\x00{number}\x00{legacy_id!r}"
    return f"fact_{hashlib.sha256(seed.encode('utf-8')).hexdigest()[:32]}"


def _record(raw: Any, bucket: str, new_id: str) -> dict[str, Any]:
    """The storage record of one legacy fact.

    Raises:
        ValueError: the fact is unusable (no content, bad confidence) or holds a secret.
    """
    from deerflow.agents.memory.backends.deermem.deermem.core.scrub import fact_secret

    if not isinstance(raw, Mapping):
        raise ValueError("must be an object")
    content = validate_content(raw.get("content"))
    secret = fact_secret({**raw, "content": content})
    if secret is not None:
        field, reason = secret
        raise ValueError(f"{field} {reason}; remove or edit the fact in the legacy file first")
    confidence = validate_confidence(raw.get("confidence"))
    record = {key: value for key, value in raw.items() if key not in _STORAGE_KEYS | _FACT_KEYS}
    category = raw.get("category") or "context"
    if not isinstance(category, str):
        raise ValueError(f"category: {category!r} is not text")
    if category not in FACT_CATEGORIES:
        record["categoryExtension"] = category
        category = "other"
    fact_id = raw.get("id")
    if not (isinstance(fact_id, str) and FACT_ID_PATTERN.fullmatch(fact_id)):
        if fact_id is not None:
            record["legacyId"] = fact_id
        fact_id = new_id
    created = raw.get("createdAt") if isinstance(raw.get("createdAt"), str) else None
    updated = raw.get("updatedAt") if isinstance(raw.get("updatedAt"), str) else None
    record.update(
        id=fact_id,
        category=category,
        confidence=confidence,
        createdAt=created or utc_now(),
        updatedAt=updated or created or utc_now(),
        source=_source(raw.get("source")),
        agent_name=bucket,
        content=content,
    )
    return record


def _source(value: Any) -> dict[str, Any]:
    """Structured provenance; a legacy fact without one is honestly of `unknown` source."""
    if isinstance(value, Mapping) and value.get("type") in _SOURCE_TYPES:
        return {"type": value["type"], "threadId": value.get("threadId")}
    if isinstance(value, str) and value:
        if value in _SOURCE_TYPES:
            return {"type": value, "threadId": None}
        return {"type": "conversation", "threadId": value}
    return {"type": "unknown", "threadId": None}


def _material(record: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in _BOOKKEEPING}


def _empty_manifest(user_id: str) -> bytes:
    document: dict[str, Any] = dict(empty_document())
    del document["facts"]
    document["userId"] = user_id
    return (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
