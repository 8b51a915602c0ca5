"""A whole user of the files engine as a `UserDump`, and back: how a user moves between engines.

`restore_file_user` writes the user into a folder of its own under `{storage_path}/.restore/`,
reads it back there through a storage of its own (a dump that would not read back as it is is
refused), and only then renames that folder to `users/{user dir}`. A restore cut short leaves
the user as it was, without a memory; one that returned left all of it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.core.atomic import SyncBatch, fsync_dir
from deerflow.agents.memory.backends.deermem.deermem.core.commits import DOCUMENT_VERSION
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import render_fact
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    AGENT_NAME_PATTERN,
    DEFAULT_AGENT,
    UserPaths,
    safe_user_id,
    user_paths,
    validate_fact_id,
)
from deerflow.agents.memory.backends.deermem.deermem.core.storage import FileMemoryStorage
from deerflow.agents.memory.backends.deermem.deermem.engine import UserDump
from deerflow.agents.memory.manager import MemoryConflictError, MemoryCorruptionError

__all__ = ["RESTORE_DIR", "dump_file_user", "restore_file_user"]

# Under the storage root, beside `users/` (so on the same file system, and never listed as a
# user): one folder per restore under way, and the lock file that says it is under way.
RESTORE_DIR: Final = ".restore"


def dump_file_user(storage: FileMemoryStorage, user_id: str) -> UserDump:
    """Everything stored of `user_id`, read under the user's lock (one revision of it); a user
    with nothing stored dumps as revision 0, no facts and no history."""
    snapshot = storage.reload(user_id, None)  # opens the user (migrates a legacy layout) first
    facts: list[dict[str, Any]] = []
    history: list[dict[str, Any]] = []
    if user_paths(storage.root, safe_user_id(user_id)).dir.is_dir():  # else a lock would make it
        with storage.user_lock(user_id).hold():
            snapshot = storage.reload(user_id, None)
            _, facts = storage.scan(user_id)
            history = storage.read_history(user_id)
    return UserDump(
        user_id=user_id,
        revision=snapshot.revision,
        last_updated=snapshot.last_updated,
        summaries=_plain(snapshot.summaries),
        facts=tuple(facts),
        history=tuple(history),
    )


def restore_file_user(storage: FileMemoryStorage, dump: UserDump) -> None:
    """Write the user of `dump`, whole, as `storage.load`, `scan` and `read_history` then
    return it: the same revision, summaries, fact records and audit entries.

    Raises:
        MemoryConflictError: the user already has a memory here (nothing is written).
        ValueError: the dump is not a memory this storage can hold as it is (nothing is
            written).
    """
    paths = user_paths(storage.root, safe_user_id(dump.user_id))
    _refuse_if_stored(storage, dump.user_id, paths)
    _remove_abandoned(storage.root / RESTORE_DIR)
    with _staging(storage.root / RESTORE_DIR) as staging:
        staged = user_paths(staging, paths.user_key)
        _write(staged, dump)
        _check_read_back(storage, staging, dump)
        _move_into_place(storage, staged.dir, paths, dump.user_id, staging / "replaced")


def _refuse_if_stored(storage: FileMemoryStorage, user_id: str, paths: UserPaths) -> None:
    """Raise `MemoryConflictError` when the user has a memory: a `memory.json`, a fact or an
    audit entry, after an interrupted commit was settled."""
    snapshot = storage.reload(user_id, None)
    if paths.manifest.exists() or snapshot.buckets or storage.read_history(user_id):
        raise MemoryConflictError(
            f"user {user_id!r} already has a memory in {storage.root}; nothing was restored "
            "(a restore never merges: leave that user out, or erase it here first)"
        )


@contextmanager
def _staging(restores: Path) -> Iterator[Path]:
    """A new folder under `restores` (not created: the caller writes into it), removed at the
    end. While the restore runs, the lock file `{name}.lock` beside it is held; a restore that
    was killed left its folder with the lock free, which the next restore removes."""
    name = uuid.uuid4().hex
    restores.mkdir(parents=True, exist_ok=True)
    fresh = restores / f"{name}.new"
    fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(fresh, restores / f"{name}.lock")  # seen as in use only once locked
        try:
            yield restores / name
        finally:
            shutil.rmtree(restores / name, ignore_errors=True)
            (restores / f"{name}.lock").unlink(missing_ok=True)
    finally:
        fresh.unlink(missing_ok=True)
        os.close(fd)


def _remove_abandoned(restores: Path) -> None:
    """Remove the folders of restores that were cut short: those whose lock nobody holds (a
    lock is released with its process, in any container sharing the volume)."""
    if not restores.is_dir():
        return
    for lock in [p for p in restores.iterdir() if p.suffix in (".lock", ".new")]:
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:
            continue  # it finished meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # under way
        try:
            shutil.rmtree(restores / lock.stem, ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)


def _write(staged: UserPaths, dump: UserDump) -> None:
    """Write the user's files under `staged`, every byte and directory entry synced."""
    files: dict[Path, bytes] = {staged.manifest: _manifest(dump)}
    if dump.history:
        files[staged.history] = b"".join(
            (json.dumps(_plain(entry), ensure_ascii=False) + "\n").encode("utf-8")
            for entry in dump.history
        )
    for record in dump.facts:
        bucket, fact_id = _checked_key(record, dump.user_id)
        path = staged.fact_file(bucket, fact_id)
        if path in files:
            raise ValueError(f"dump of user {dump.user_id!r}: fact {fact_id} twice in {bucket}")
        files[path] = render_fact(dict(record))
    with SyncBatch() as batch:
        for path, data in files.items():
            for directory in _made_dirs(path.parent):
                batch.directory(directory)
            batch.create(path, data)
        batch.sync()


def _manifest(dump: UserDump) -> bytes:
    """`memory.json` of the dump, as a commit writes it."""
    summaries = _plain(dump.summaries)
    document = {
        "version": DOCUMENT_VERSION,
        "revision": dump.revision,
        "lastUpdated": dump.last_updated,
        "user": summaries.get("user"),
        "history": summaries.get("history"),
        "userId": dump.user_id,
    }
    return (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def _checked_key(record: Mapping[str, Any], user_id: str) -> tuple[str, str]:
    """The (bucket, fact id) of a dumped record, checked to name a file inside its bucket.

    Raises:
        ValueError: naming what is wrong.
    """
    bucket, fact_id = record.get("agent_name"), record.get("id")
    content = record.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ValueError(f"dump of user {user_id!r}: fact {fact_id!r} has no content")
    try:
        validate_fact_id(str(fact_id))
    except ValueError as exc:
        raise ValueError(f"dump of user {user_id!r}: {exc}") from None
    is_bucket = isinstance(bucket, str) and (
        bucket == DEFAULT_AGENT
        or (AGENT_NAME_PATTERN.fullmatch(bucket) is not None and bucket == bucket.lower())
    )
    if not is_bucket:
        raise ValueError(f"dump of user {user_id!r}: fact {fact_id} has no bucket ({bucket!r})")
    return str(bucket), str(fact_id)


def _made_dirs(directory: Path) -> list[Path]:
    """Create `directory`; return the directories that gained an entry (their entries to sync)."""
    missing = [d for d in (directory, *directory.parents) if not d.is_dir()]
    directory.mkdir(parents=True, exist_ok=True)
    return [d.parent for d in missing]


def _check_read_back(storage: FileMemoryStorage, staging: Path, dump: UserDump) -> None:
    """Read the staged user through a storage of its own and compare it with `dump`.

    Raises:
        ValueError: the files do not read back as the dump (a record the Markdown format cannot
            hold as it is, a malformed summary or audit entry).
    """
    reader = FileMemoryStorage(storage.config.model_copy(update={"storage_path": str(staging)}))
    try:
        snapshot = reader.reload(dump.user_id, None)
        _, facts = reader.scan(dump.user_id)
        history = reader.read_history(dump.user_id)
    except MemoryCorruptionError as exc:
        raise ValueError(f"dump of user {dump.user_id!r} is not a readable memory: {exc}") from None
    finally:
        reader.close()
    wanted_facts = {(r["agent_name"], r["id"]): _plain(r) for r in dump.facts}
    got_facts = {(r["agent_name"], r["id"]): r for r in facts}
    differences = [
        name
        for name, same in (
            ("revision", snapshot.revision == dump.revision),
            ("lastUpdated", snapshot.last_updated == dump.last_updated),
            ("summaries", _plain(snapshot.summaries) == _plain(dump.summaries)),
            ("history", history == [_plain(entry) for entry in dump.history]),
        )
        if not same
    ]
    differences += [
        f"fact {key[1]} of {key[0]}"
        for key, record in wanted_facts.items()
        if got_facts.get(key) != record
    ]
    if differences:
        raise ValueError(
            f"dump of user {dump.user_id!r} does not read back as it is from the files engine: "
            f"{', '.join(differences[:5])} would change"
        )


def _move_into_place(
    storage: FileMemoryStorage, staged: Path, paths: UserPaths, user_id: str, aside: Path
) -> None:
    """Rename the staged user directory to the user's: one atomic step.

    A user directory may exist without a memory (a lock file left by a write that changed
    nothing); under the user's lock it is moved aside first, and the lock file this process
    holds is put back beside the restored files, where every other writer looks for it.
    """
    users = paths.dir.parent
    for directory in _made_dirs(users):
        fsync_dir(directory)
    try:
        os.rename(staged, paths.dir)  # replaces nothing but an empty directory
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        with storage.user_lock(user_id).hold():
            _refuse_if_stored(storage, user_id, paths)
            os.rename(paths.dir, aside)
            os.rename(staged, paths.dir)
            os.rename(aside / paths.lock.name, paths.lock)
            fsync_dir(paths.dir)
    fsync_dir(users)


def _plain(value: Any) -> Any:
    """`value` with every mapping a dict and every sequence a list, as JSON gives it back.

    Raises:
        ValueError: `value` holds something JSON cannot (the files could not hold it either).
    """
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, default=_not_json))
    except TypeError as exc:
        raise ValueError(f"not storable as it is: {exc}") from None


def _not_json(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON: {value!r}")
