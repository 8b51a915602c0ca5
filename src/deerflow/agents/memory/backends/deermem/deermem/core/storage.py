"""Where DeerMem keeps memory: `MemoryStorage`, the seam, and `FileMemoryStorage`, the default.

Layout (docs/data-format.md): `users/{safe id}/memory.json` holds the user's summaries and revision;
each fact is `users/{safe id}/agents/{bucket}/facts/{2 hex}/{fact_id}.md`. Every change is one
journaled commit (see `journal.py`) that bumps the revision and appends one audit line to
`history.jsonl`. Readers use a cache that is valid while `memory.json` has the same bytes.
"""

from __future__ import annotations

import json
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.atomic import (
    SyncBatch,
    append_line,
    read_file,
    read_file_and_stat,
)
from deerflow.agents.memory.backends.deermem.deermem.core.changes import (
    ChangeSet,
    CommitResult,
    FactKey,
    MemorySnapshot,
)
from deerflow.agents.memory.backends.deermem.deermem.core.commits import (
    DOCUMENT_VERSION,
    Stored,
    changed_facts,
    changed_summaries,
    check_history_entry,
    check_preconditions,
    check_summaries,
    prepare_commit,
    rebased,
    stored_bytes,
)
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import (
    is_revision,
    parse_fact,
)
from deerflow.agents.memory.backends.deermem.deermem.core.journal import (
    Journal,
    JournalEntry,
    manifest_digest,
)
from deerflow.agents.memory.backends.deermem.deermem.core.locks import UserLock
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    DEFAULT_USER,
    UserPaths,
    bucket_name,
    safe_user_id,
    shard_of,
    user_paths,
)
from deerflow.agents.memory.backends.deermem.deermem.core.record_cache import (
    KeptRecord,
    RecordCache,
    signature,
)
from deerflow.agents.memory.manager import (
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryUnsupportedError,
    empty_document,
    import_object,
    utc_now,
)

__all__ = ["FileMemoryStorage", "MemoryStorage", "UserOpener", "load_storage"]

SINGLES_CACHE_SIZE: Final = 4096
# A first read rewrites the bucket's kept records once it parsed 1/REWRITE_SHARE of its files,
# or REWRITE_FROM / REWRITE_SHARE of them in a larger bucket (32 files, about 1.6 ms).
REWRITE_SHARE: Final = 16
REWRITE_FROM: Final = 512
MANIFESTS_CACHE_SIZE: Final = 4096
# Users remembered as opened; past it the set starts again, and a user forgotten is opened
# again on its next read (the opener finds nothing left to do).
OPENED_USERS_SIZE: Final = 65536


class MemoryStorage(ABC):
    """The storage seam of DeerMem. Subclasses are constructed as `cls(config)`.

    `load` may serve from a cache; `reload` must read the stored state again; `save` commits a
    `ChangeSet` atomically or raises. `read_history` returns the audit log, newest first.
    """

    def __init__(self, config: DeerMemConfig) -> None:
        self.config = config

    @abstractmethod
    def load(self, user_id: str | None, agent_name: str | None) -> MemorySnapshot:
        """The user's summaries and one bucket's facts."""

    @abstractmethod
    def reload(self, user_id: str | None, agent_name: str | None) -> MemorySnapshot:
        """Like `load`, bypassing every cache (sees out-of-band edits of fact files)."""

    @abstractmethod
    def save(self, user_id: str | None, changes: ChangeSet) -> CommitResult:
        """Commit `changes` as one revision.

        Raises:
            MemoryConflictError: `expected_revision` or a precondition no longer holds.
            FactNotFoundError: a delete names a fact that does not exist.
        """

    def read_history(self, user_id: str | None) -> list[dict[str, Any]]:
        """Every audit entry of the user, oldest first."""
        raise MemoryUnsupportedError(type(self).__name__, "read_history")

    def close(self) -> None:  # noqa: B027 (optional: a storage holding nothing open keeps it)
        """Release what the storage holds open; it is not used afterwards."""

    def load_facts(
        self, user_id: str | None, agent_name: str | None, fact_ids: Iterable[str]
    ) -> tuple[int, dict[str, Mapping[str, Any]]]:
        """The user's revision and the named facts of one bucket that exist.

        Override to avoid reading the whole bucket; search needs only its hits.
        """
        snapshot = self.load(user_id, agent_name)
        wanted = {fact_id: snapshot.facts.get(fact_id) for fact_id in fact_ids}
        return snapshot.revision, {k: v for k, v in wanted.items() if v is not None}


@dataclass(frozen=True, slots=True)
class _Manifest:
    raw: bytes
    document: dict[str, Any]

    @property
    def revision(self) -> int:
        return int(self.document["revision"])


@dataclass(slots=True)
class _Bucket:
    manifest: bytes  # the memory.json bytes the facts were read under
    facts: dict[str, dict[str, Any]]
    # Carried over by a commit: the facts before it and the ids it changed (`changed_from`).
    changed_from: tuple[dict[str, dict[str, Any]], tuple[str, ...]] | None = None


UserOpener = Callable[["FileMemoryStorage", str], object]
"""Called with the storage and a raw user id before the storage first reads or writes that
user; DeerMem's manager passes the migration of the legacy layout (`migrate.py`)."""


class FileMemoryStorage(MemoryStorage):
    """Memory as files under `config.storage_path`, safe against crashes and other processes.

    `open_user`, if given, runs once per user and storage object, before the first read or
    write of that user; an opener that raises runs again at the user's next read or write.
    """

    def __init__(self, config: DeerMemConfig, *, open_user: UserOpener | None = None) -> None:
        super().__init__(config)
        self.root = Path(config.storage_path)
        self._open_user = open_user
        self._opened: set[str] = set()
        self._thread = threading.local()  # `opening`: the users this thread is opening
        self._guard = threading.Lock()
        self._locks: dict[str, UserLock] = {}
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        # Facts read one by one (search hits) of buckets not read whole, per memory.json state.
        self._singles: dict[tuple[str, str], _Bucket] = {}
        # Each user's bucket names, per memory.json state (only a commit creates a bucket).
        self._bucket_names: dict[str, tuple[bytes, tuple[str, ...]]] = {}
        # Each user's memory.json as last parsed or written: the same bytes are not parsed
        # again (a create reads them three times). Shared by snapshots, so never changed.
        self._manifests: dict[str, _Manifest] = {}
        # Each user's history.jsonl size after this process's last append: while it is the
        # same, the file ends with that whole line and its end need not be read again.
        self._history_ends: dict[str, int] = {}
        # Parsed fact files kept for the next process's first read of a bucket.
        self._records = RecordCache(self.root / ".retrieval" / "records.sqlite3")

    # -- reading -------------------------------------------------------------------------------

    def load(self, user_id: str | None, agent_name: str | None) -> MemorySnapshot:
        paths, raw_user, bucket = self._scope(user_id, agent_name)
        self._open_once(paths, raw_user)
        manifest = self._peek_manifest(paths)
        cached = self._buckets.get((paths.user_key, bucket))
        if manifest is not None and cached is not None and cached.manifest == manifest.raw:
            return self._snapshot(paths, raw_user, bucket, manifest, cached)
        return self._read_whole(paths, raw_user, bucket, use_kept=True)

    def reload(self, user_id: str | None, agent_name: str | None) -> MemorySnapshot:
        paths, raw_user, bucket = self._scope(user_id, agent_name)
        self._open_once(paths, raw_user)
        return self._read_whole(paths, raw_user, bucket, use_kept=False)

    def close(self) -> None:
        self._records.close()

    def _read_whole(
        self, paths: UserPaths, raw_user: str, bucket: str, *, use_kept: bool
    ) -> MemorySnapshot:
        if _absent(paths):  # nothing stored: a read leaves no lock file (nor directory) behind
            absent = self._peek_manifest(paths)
            if absent is not None and not absent.raw:
                return self._cached_snapshot(paths, raw_user, bucket, absent, {})
        with self._lock(paths).hold():
            manifest = self._recovered_manifest(paths)
            facts, to_keep = self._read_kept(paths, raw_user, bucket, use_kept)
            snapshot = self._cached_snapshot(paths, raw_user, bucket, manifest, facts)
        if to_keep is not None:  # the files' signatures make it valid without the lock
            self._records.put(paths.user_key, bucket, to_keep)
        return snapshot

    def _cached_snapshot(
        self,
        paths: UserPaths,
        raw_user: str,
        bucket: str,
        manifest: _Manifest,
        facts: dict[str, Any],
    ) -> MemorySnapshot:
        """Cache a bucket read whole under `manifest`, and the snapshot of it."""
        read = _Bucket(manifest.raw, facts)
        self._buckets[(paths.user_key, bucket)] = read
        self._singles.pop((paths.user_key, bucket), None)
        self._bucket_names.pop(paths.user_key, None)
        return self._snapshot(paths, raw_user, bucket, manifest, read)

    def load_facts(
        self, user_id: str | None, agent_name: str | None, fact_ids: Iterable[str]
    ) -> tuple[int, dict[str, Mapping[str, Any]]]:
        paths, raw_user, bucket = self._scope(user_id, agent_name)
        self._open_once(paths, raw_user)
        wanted = list(fact_ids)
        key = (paths.user_key, bucket)
        peeked = self._peek_manifest(paths)
        if peeked is not None:
            whole = self._buckets.get(key)
            if whole is not None and whole.manifest == peeked.raw:
                return peeked.revision, _pick(whole.facts, wanted)
            singles = self._singles.get(key)
            fresh = singles is not None and singles.manifest == peeked.raw
            if fresh and singles is not None and all(i in singles.facts for i in wanted):
                return peeked.revision, _pick(singles.facts, wanted)
            if not peeked.raw and _absent(paths):
                return peeked.revision, {}
        with self._lock(paths).hold():  # a half-done commit must be settled before reading
            manifest = self._recovered_manifest(paths)
            singles = self._singles.get(key)
            if singles is None or singles.manifest != manifest.raw:
                if len(self._singles) >= SINGLES_CACHE_SIZE:
                    self._singles.clear()
                singles = self._singles[key] = _Bucket(manifest.raw, {})
            for fact_id in wanted:
                stored = (
                    None
                    if fact_id in singles.facts
                    else self._stored(paths.fact_file(bucket, fact_id), raw_user, bucket)
                )
                if stored is not None:
                    singles.facts[fact_id] = stored[1]
            return manifest.revision, _pick(singles.facts, wanted)

    def read_history(self, user_id: str | None) -> list[dict[str, Any]]:
        paths, raw_user, _ = self._scope(user_id, None)
        self._open_once(paths, raw_user)
        if _absent(paths):
            return []
        with self._lock(paths).hold():
            self._recovered_manifest(paths)
            if not paths.history.exists():
                return []
            entries = []
            for number, line in enumerate(paths.history.read_bytes().splitlines(), 1):
                try:
                    entries.append(_history_entry(line))
                except ValueError as exc:
                    raise MemoryCorruptionError(f"{paths.history}:{number}: {exc}") from exc
            return entries

    def user_ids(self) -> Iterator[str]:
        """The raw id of every user with stored memory, in directory order."""
        users = self.root / "users"
        if not users.is_dir():
            return
        for directory in sorted(users.iterdir()):
            paths = user_paths(self.root, directory.name)
            if paths.manifest.exists():
                user_id = self._settled_manifest(paths).document.get("userId")
                if isinstance(user_id, str):
                    yield user_id
                elif "." not in directory.name:  # a plain id is its own directory name
                    yield directory.name
                else:
                    raise MemoryCorruptionError(
                        f"{paths.manifest}: no userId, and {directory.name} is a hashed name; "
                        "migrate this user by id first"
                    )

    def scan(self, user_id: str) -> tuple[int, list[dict[str, Any]]]:
        """The user's revision and every fact of every bucket, read from the files.

        Bypasses the cache in both directions, so a full reindex does not fill memory.
        """
        paths, raw_user, _ = self._scope(user_id, None)
        self._open_once(paths, raw_user)
        with self._lock(paths).hold():
            manifest = self._recovered_manifest(paths)
            records = [
                record
                for bucket in _buckets_of(paths)
                for record in self._read_bucket(paths, raw_user, bucket).values()
            ]
        return manifest.revision, records

    def _open_once(self, paths: UserPaths, raw_user: str) -> None:
        """Run `open_user` for this user unless it ran already (or is running in this thread:
        the opener reads and commits the user through this storage)."""
        if paths.user_key in self._opened or self._open_user is None:
            return
        if paths.user_key in self._being_opened():
            return
        with self.opening(raw_user):
            self._open_user(self, raw_user)
        if len(self._opened) >= OPENED_USERS_SIZE:
            self._opened.clear()
        self._opened.add(paths.user_key)

    @contextmanager
    def opening(self, user_id: str | None) -> Iterator[None]:
        """Within this block, this thread's reads and writes of the user do not run
        `open_user`: for a migration, which reads and commits through the storage."""
        user_key = self._scope(user_id, None)[0].user_key
        being_opened = self._being_opened()
        if user_key in being_opened:  # an enclosing block of this thread marked it
            yield
            return
        being_opened.add(user_key)
        try:
            yield
        finally:
            being_opened.discard(user_key)

    def _being_opened(self) -> set[str]:
        users: set[str] | None = getattr(self._thread, "opening", None)
        if users is None:
            users = self._thread.opening = set()
        return users

    def _scope(self, user_id: str | None, agent_name: str | None) -> tuple[UserPaths, str, str]:
        raw_user = DEFAULT_USER if user_id is None else user_id
        return user_paths(self.root, safe_user_id(raw_user)), raw_user, bucket_name(agent_name)

    def user_lock(self, user_id: str | None) -> UserLock:
        """The lock that serialises writers of this user (re-entrant within a thread)."""
        return self._lock(self._scope(user_id, None)[0])

    def _lock(self, paths: UserPaths) -> UserLock:
        with self._guard:
            lock = self._locks.get(paths.user_key)
            if lock is None:
                lock = UserLock(paths.lock, self.config.file_lock_timeout_seconds)
                self._locks[paths.user_key] = lock
            return lock

    def _read_manifest(self, paths: UserPaths) -> _Manifest:
        try:
            raw = read_file(paths.manifest)  # os.read: about half the time of Path.read_bytes
        except FileNotFoundError:
            document: dict[str, Any] = dict(empty_document())
            document.pop("facts")
            return _Manifest(b"", document)
        except IsADirectoryError:
            raise MemoryCorruptionError(f"{paths.manifest}: a directory, not a file") from None
        known = self._manifests.get(paths.user_key)
        if known is not None and known.raw == raw:
            return known
        try:
            document = json.loads(raw)
            _check_manifest(document, paths.user_key)
        except ValueError as exc:
            raise MemoryCorruptionError(f"{paths.manifest}: unreadable: {exc}") from exc
        return self._remember(paths.user_key, _Manifest(raw, document))

    def _remember(self, user_key: str, manifest: _Manifest) -> _Manifest:
        if len(self._manifests) >= MANIFESTS_CACHE_SIZE:
            self._manifests.clear()
        self._manifests[user_key] = manifest
        return manifest

    def _peek_manifest(self, paths: UserPaths) -> _Manifest | None:
        """The manifest read without the lock, or None when its bytes do not parse: a commit
        writes `memory.json` in place, so the caller reads it again under the lock."""
        try:
            return self._read_manifest(paths)
        except MemoryCorruptionError:
            return None

    def _settled_manifest(self, paths: UserPaths) -> _Manifest:
        """The manifest, read under the lock only when a lock-free read does not parse."""
        manifest = self._peek_manifest(paths)
        if manifest is None:
            with self._lock(paths).hold():
                manifest = self._recovered_manifest(paths)
        return manifest

    def _recovered_manifest(self, paths: UserPaths) -> _Manifest:
        """The manifest after finishing or undoing an interrupted commit. Hold the lock.

        The journal comes first: an interrupted commit may have left `memory.json` torn.
        """
        journal = Journal.pending(paths.journal)
        if journal is not None:
            try:
                raw = read_file(paths.manifest)
            except FileNotFoundError:
                raw = b""
            journal.recover(
                paths.dir, paths.journal, raw, lambda: self._read_manifest(paths).revision
            )
            self._drop_cache(paths.user_key)
        return self._read_manifest(paths)

    def _read_bucket(self, paths: UserPaths, raw_user: str, bucket: str) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        path = ""
        try:  # around the loop, not in it: a reindex reads 10^5 files through here
            for path in _fact_files(paths.facts_dir(bucket)):
                record = parse_fact(
                    read_file(_in_its_shard(path)), path, user_id=raw_user, bucket=bucket
                )
                facts[record["id"]] = record
        except IsADirectoryError:
            raise _not_a_fact_file(path) from None
        return facts

    def _read_kept(
        self, paths: UserPaths, raw_user: str, bucket: str, use_kept: bool
    ) -> tuple[dict[str, Any], dict[str, KeptRecord] | None]:
        """The bucket's facts, as `_read_bucket` reads them, and what to keep of them for the
        next process (None: keep what is kept; see `record_cache`). With `use_kept`, the records
        kept of files unchanged since are taken rather than parsed: a first read of 500 facts in
        about half the time."""
        facts_dir = paths.facts_dir(bucket)
        below = len(str(facts_dir)) + 1
        kept = self._records.get(paths.user_key, bucket) if use_kept else {}
        read: dict[str, KeptRecord] = {}
        facts: dict[str, Any] = {}
        parsed = 0
        path = ""
        try:  # around the loop, not in it (see `_read_bucket`)
            for path in _fact_files(facts_dir):
                name = path[below:]
                entry = kept.get(name)
                if (
                    entry is None
                    or signature(os.stat(path)) != entry.signature
                    or entry.record.get("id") != os.path.basename(name)[:-3]  # only in a bad row
                ):
                    data, status = read_file_and_stat(_in_its_shard(path))
                    record = parse_fact(data, path, user_id=raw_user, bucket=bucket)
                    entry = KeptRecord(signature(status), record)
                    parsed += 1
                read[name] = entry
                facts[entry.record["id"]] = entry.record
        except IsADirectoryError:
            raise _not_a_fact_file(path) from None
        # A process reads a bucket again after each commit of another process; rewriting the
        # row each time (6 ms at 500 facts) would cost more than parsing the few files changed.
        rewrite = not use_kept or parsed * REWRITE_SHARE >= min(len(read), REWRITE_FROM)
        return facts, read if parsed and rewrite else None

    def _snapshot(
        self,
        paths: UserPaths,
        raw_user: str,
        bucket: str,
        manifest: _Manifest,
        cached: _Bucket,
    ) -> MemorySnapshot:
        document = manifest.document
        return MemorySnapshot(
            user_id=raw_user,
            bucket=bucket,
            revision=manifest.revision,
            last_updated=document.get("lastUpdated", ""),
            summaries={"user": document["user"], "history": document["history"]},
            facts=cached.facts,
            buckets=self._buckets_of(paths, manifest.raw),
            changed_from=cached.changed_from,
        )

    def _buckets_of(self, paths: UserPaths, manifest: bytes) -> tuple[str, ...]:
        cached = self._bucket_names.get(paths.user_key)
        if cached is not None and cached[0] == manifest:
            return cached[1]
        names = _buckets_of(paths)
        self._bucket_names[paths.user_key] = (manifest, names)
        return names

    def _drop_cache(self, user_key: str) -> None:
        for cache in (self._buckets, self._singles):
            for key in [key for key in cache if key[0] == user_key]:
                del cache[key]
        self._bucket_names.pop(user_key, None)

    # -- writing -------------------------------------------------------------------------------

    def save(self, user_id: str | None, changes: ChangeSet) -> CommitResult:
        paths, raw_user, _ = self._scope(user_id, None)
        self._open_once(paths, raw_user)
        with self._lock(paths).hold():
            manifest = self._recovered_manifest(paths)
            if changes.rebase_onto is not None and changes.expected_revision != manifest.revision:
                # Another writer committed since: the bucket is read here, under the lock (an
                # uncontended create reads nothing more).
                changes = rebased(
                    changes,
                    manifest.revision,
                    lambda bucket: self._current_facts(paths, raw_user, bucket, manifest),
                )
            files = {key: paths.fact_file(*key) for key in changes.touched()}
            current = {key: self._stored(path, raw_user, key[0]) for key, path in files.items()}
            self._refuse_if_edited_by_hand(paths.user_key, manifest.raw, current)
            check_preconditions(changes, manifest.revision, current, paths.user_key)
            now = utc_now()
            after, upserted = changed_facts(
                changes,
                raw_user,
                current,
                lambda key, data: parse_fact(data, files[key], user_id=raw_user, bucket=key[0]),
            )
            summaries = changed_summaries(manifest.document, changes.summaries)
            if not after and not summaries:
                return CommitResult(
                    manifest.revision, None, manifest.document.get("lastUpdated", "")
                )
            return self._commit(
                paths, raw_user, manifest, changes, current, files, after, summaries, upserted, now
            )

    def _current_facts(
        self, paths: UserPaths, raw_user: str, bucket: str, manifest: _Manifest
    ) -> Mapping[str, Mapping[str, Any]]:
        """The bucket's facts as of `manifest`, from the cache when it holds them. Hold the lock."""
        cached = self._buckets.get((paths.user_key, bucket))
        if cached is not None and cached.manifest == manifest.raw:
            return cached.facts
        facts, _ = self._read_kept(paths, raw_user, bucket, use_kept=True)
        return self._cached_snapshot(paths, raw_user, bucket, manifest, facts).facts

    def _refuse_if_edited_by_hand(
        self,
        user_key: str,
        manifest: bytes,
        current: Mapping[FactKey, Stored | None],
    ) -> None:
        """Refuse a change that may rest on a cached fact its file no longer matches.

        A hand edit, removal or addition of a fact file leaves `memory.json` alone, so the
        cache outlives it; a change computed from the cache would write over the edit (an
        update), or name a file that is gone (a clear). The cache is dropped, so the retry
        reads the files.

        Raises:
            MemoryConflictError: a touched fact differs from its cached record.
        """
        for (bucket, fact_id), stored in current.items():
            cached = self._buckets.get((user_key, bucket))
            if cached is None or cached.manifest != manifest:
                continue  # not cached as of this revision: the change was not made from it
            record = cached.facts.get(fact_id)
            if record is None and stored is None:
                continue
            # Whole records: what a commit caches is what a parse of the file it wrote gives
            # (rendering is deterministic, `render_fact`), so any difference is an edit.
            if record is None or stored is None or record != stored[1]:
                self._drop_cache(user_key)
                raise MemoryConflictError(
                    f"fact {fact_id} was changed outside DeerMem since it was read; "
                    "read again, retry"
                )

    def _commit(
        self,
        paths: UserPaths,
        raw_user: str,
        manifest: _Manifest,
        changes: ChangeSet,
        current: Mapping[FactKey, Stored | None],
        files: Mapping[FactKey, Path],
        after: dict[FactKey, bytes | None],
        summaries: dict[str, dict[str, str]],
        upserted: list[dict[str, Any]],
        now: str,
    ) -> CommitResult:
        # The parsed document is shared with snapshots and the manifest cache: copied on write.
        commit = prepare_commit(
            changes,
            revision=manifest.revision,
            summaries=manifest.document,
            texts=summaries,
            current=current,
            after=after,
            now=now,
        )
        document = commit.summaries
        document.update(
            version=DOCUMENT_VERSION, revision=commit.revision, lastUpdated=now, userId=raw_user
        )
        history_line = (json.dumps(commit.entry, ensure_ascii=False) + "\n").encode("utf-8")
        new_manifest = (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
        history_size = self._whole_history(paths)
        Journal(
            operation_id=commit.change_id,
            previous_revision=manifest.revision,
            next_revision=commit.revision,
            entries=(
                *(
                    JournalEntry(str(files[key].relative_to(paths.dir)), stored_bytes(current[key]))
                    for key in after
                ),
                JournalEntry(paths.manifest.name, manifest.raw or None),
            ),
            history_line=history_line,
            history_size=history_size,
            manifest_after=manifest_digest(new_manifest),
        ).write(paths.journal)
        with SyncBatch() as batch:
            updated = []
            for key, data in after.items():
                path = files[key]
                if data is None:
                    batch.unlink(path)  # its directory exists: no look for one to create
                    continue
                for directory in _ensure_dir(path.parent, paths.dir):
                    batch.directory(directory)
                if current[key] is None:
                    batch.create(path, data)  # a crash leaves a partial file: the journal drops it
                else:
                    batch.stage(path, data)
                    updated.append(path)
            batch.append(paths.history, history_line)  # an undo cuts it off again
            batch.sync()  # every byte written, and the entries of created and deleted files
            if updated:
                for path in updated:
                    batch.publish(path)
                batch.sync()
            if manifest.raw:  # the commit point
                batch.overwrite(paths.manifest, new_manifest)
            else:
                batch.create(paths.manifest, new_manifest)
            batch.sync()
        Journal.finish(paths.journal)
        if len(self._history_ends) >= MANIFESTS_CACHE_SIZE:
            self._history_ends.clear()
        self._history_ends[paths.user_key] = history_size + len(history_line)
        self._remember(paths.user_key, _Manifest(new_manifest, document))
        self._update_cache(paths.user_key, manifest.raw, new_manifest, after, upserted)
        return CommitResult(
            revision=commit.revision,
            change_id=commit.change_id,
            last_updated=now,
            upserted=tuple(upserted),
            deleted=tuple(key for key, data in after.items() if data is None),
        )

    def _whole_history(self, paths: UserPaths) -> int:
        """The size of `history.jsonl`, checked to end with a whole line before the next one is
        appended: an interrupted commit's partial line was cut by its journal's recovery, so
        a last line without its newline was damaged otherwise. A whole audit entry that only
        lacks the newline gets it; anything else is refused, never appended to. Hold the lock.

        Raises:
            MemoryCorruptionError: the last line is not a whole audit entry.
        """
        size = _size_of(paths.history)
        if not size or self._history_ends.get(paths.user_key) == size:
            return size  # empty, or as this process's last commit left it
        fd = os.open(paths.history, os.O_RDONLY)
        try:
            if os.pread(fd, 1, size - 1) == b"\n":
                return size
        finally:
            os.close(fd)
        data = read_file(paths.history)
        start = data.rfind(b"\n") + 1
        try:
            _history_entry(data[start:])
        except ValueError as exc:
            raise MemoryCorruptionError(
                f"{paths.history}: its last line (from byte {start}) is cut off: {exc}; nothing "
                "was changed. Restore the file, or cut that line off, and retry"
            ) from None
        append_line(paths.history, b"\n")
        return len(data) + 1

    def _stored(self, path: Path, raw_user: str, bucket: str) -> Stored | None:
        try:
            data = read_file(path)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise _not_a_fact_file(path) from None
        return data, parse_fact(data, path, user_id=raw_user, bucket=bucket)

    def _update_cache(
        self,
        user_key: str,
        old_manifest: bytes,
        new_manifest: bytes,
        after: Mapping[FactKey, bytes | None],
        upserted: list[dict[str, Any]],
    ) -> None:
        """Carry cached buckets over to the new revision instead of re-reading every file."""
        names = self._bucket_names.get(user_key)
        if names is not None and names[0] == old_manifest:
            created = {key[0] for key, data in after.items() if data is not None}
            self._bucket_names[user_key] = (new_manifest, tuple(sorted({*names[1], *created})))
        records = {(record["agent_name"], record["id"]): record for record in upserted}
        for (cached_user, bucket), cached in list(self._buckets.items()):
            if cached_user != user_key:
                continue
            if cached.manifest != old_manifest:
                del self._buckets[(cached_user, bucket)]  # already stale: read it again
                continue
            changed = [key for key in after if key[0] == bucket]
            if not changed:  # the same facts: the same mapping, so what is derived from it holds
                self._buckets[(cached_user, bucket)] = _Bucket(
                    new_manifest, cached.facts, cached.changed_from
                )
                continue
            facts = dict(cached.facts)
            for key in changed:
                if after[key] is None:
                    facts.pop(key[1], None)
                else:
                    facts[key[1]] = records[key]
            self._buckets[(cached_user, bucket)] = _Bucket(
                new_manifest, facts, (cached.facts, tuple(key[1] for key in changed))
            )


def _pick(
    facts: Mapping[str, Mapping[str, Any]], ids: Iterable[str]
) -> dict[str, Mapping[str, Any]]:
    return {fact_id: facts[fact_id] for fact_id in ids if fact_id in facts}


def _check_manifest(document: Any, user_key: str) -> None:
    """Raise `ValueError` naming what makes `document` other than the `memory.json` of the
    user whose directory is `user_key`."""
    if not isinstance(document, dict) or "revision" not in document:
        raise ValueError("not a memory document with a revision")
    if not is_revision(document["revision"]):
        raise ValueError(f"revision {document['revision']!r} is not a non-negative 64-bit integer")
    if "userId" in document:
        owner = document["userId"]
        try:
            mismatch = not isinstance(owner, str) or safe_user_id(owner) != user_key
        except ValueError:
            mismatch = True
        if mismatch:
            raise ValueError(f"userId {owner!r} is not the user of this directory ({user_key})")
    check_summaries(document)


def _history_entry(line: bytes) -> dict[str, Any]:
    """One line of the audit log, checked to have the shape `_commit` writes.

    Raises:
        ValueError: naming what is wrong with it.
    """
    return check_history_entry(json.loads(line))


def _fact_files(facts_dir: Path) -> Iterator[str]:
    """The paths of `facts/*/fact_*.md`, sorted. Listed with os.scandir and os.listdir rather
    than pathlib's glob (1.25 s against 1.8 s for 10^5 facts, most of it one listdir per shard),
    and given as text: building a `Path` for each of 10^5 files and reading through it cost a
    reindex about half a second."""
    if not facts_dir.is_dir():
        return
    shards = []
    for entry in os.scandir(facts_dir):
        if entry.is_dir():
            shards.append(entry.path)
        elif _is_fact_name(entry.name):
            raise MemoryCorruptionError(f"{entry.path}: a fact file outside any shard folder")
    for shard in sorted(shards):
        yield from (
            os.path.join(shard, name) for name in sorted(filter(_is_fact_name, os.listdir(shard)))
        )


def _in_its_shard(path: str) -> str:
    """`path`, checked to sit in the shard folder its file name gives: writes find a fact by
    that folder, so one elsewhere could never be changed. Checked where a file is parsed (a
    kept record was checked when it was parsed, and names the folder it was read in).

    Raises:
        MemoryCorruptionError: the file is in another shard folder.
    """
    folder, name = os.path.split(path)
    if (wanted := shard_of(name[:-3])) != os.path.basename(folder):
        raise MemoryCorruptionError(
            f"{path}: in shard folder {os.path.basename(folder)}, but its id's folder is {wanted}"
        )
    return path


def _not_a_fact_file(path: str | Path) -> MemoryCorruptionError:
    return MemoryCorruptionError(f"{path}: a directory where a fact file belongs; move it away")


def _absent(paths: UserPaths) -> bool:
    """Whether nothing of the user is stored (a user's first commit makes its directory)."""
    return not paths.dir.is_dir()


def _is_fact_name(name: str) -> bool:
    return name.startswith("fact_") and name.endswith(".md")


def _buckets_of(paths: UserPaths) -> tuple[str, ...]:
    if not paths.agents.is_dir():
        return ()
    return tuple(
        sorted(entry.name for entry in paths.agents.iterdir() if (entry / "facts").is_dir())
    )


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _ensure_dir(directory: Path, stop: Path) -> set[Path]:
    """Create `directory` below `stop`; return the directories that gained an entry (to fsync)."""
    if directory.is_dir():
        return set()
    below_stop = [directory, *(p for p in directory.parents if stop in p.parents)]
    missing = [p for p in below_stop if not p.is_dir()]
    directory.mkdir(parents=True, exist_ok=True)
    return {p.parent for p in missing}


def load_storage(config: DeerMemConfig, *, open_user: UserOpener | None = None) -> MemoryStorage:
    """The storage layer: `FileMemoryStorage` with `open_user`, or `config.storage_class` built
    as `cls(config)` (a custom storage opens its users itself).

    Raises:
        ValueError: the class cannot be imported, is not a `MemoryStorage`, or fails to build.
    """
    if config.storage_class is None:
        return FileMemoryStorage(config, open_user=open_user)
    try:
        cls = import_object(config.storage_class)
        if not (isinstance(cls, type) and issubclass(cls, MemoryStorage)):
            raise TypeError(f"{cls!r} is not a MemoryStorage subclass")
        storage: MemoryStorage = cls(config)
    except Exception as exc:
        raise ValueError(
            f"backend_config.storage_class={config.storage_class!r} failed to load: "
            f"{type(exc).__name__}: {exc}. Refusing to silently fall back because memory is "
            "persistent state."
        ) from exc
    return storage
