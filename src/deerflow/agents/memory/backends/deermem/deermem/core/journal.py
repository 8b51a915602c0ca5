"""The commit journal: what a multi-file change is about to do, so a crash can be undone.

A commit writes the journal first (the previous bytes of every file it will touch, `memory.json`
among them, a SHA-256 digest of `memory.json`'s next bytes, and the size of the audit log), then
the fact files and the audit log line, then `memory.json` in place, and finally marks the journal
done. `memory.json` holding its next bytes on disk is the commit point. Whoever next takes the
user's lock and finds a journal not marked done either finishes the change (`memory.json` holds
exactly the bytes of the digest: the audit line is checked) or rolls it back (anything else,
a torn `memory.json` included: every file gets its previous bytes, the audit log its previous
size). A record of an earlier format, whose commit renamed `memory.json` into place, has no
digest; `memory.json`'s revision decides it.

The journal file is kept and overwritten in place, never truncated or deleted: on ext4 freeing
and reallocating its blocks cost about a third of a millisecond per commit (measured in
docs/benchmarks.md). So a record carries its own length and CRC-32 in a fixed-size header:

    DMJ2 P 000000001234 1a2b3c4d\n{...json...}

`P` is pending; marking the commit done overwrites it with `D`. Bytes after the record are
left over from a longer, older record. A record whose length or checksum does not match was
torn while being written, before the commit touched anything, so it is discarded. A journal in
the earlier format (one JSON line, emptied when done) is still read.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from deerflow.agents.memory.backends.deermem.deermem.core.atomic import (
    append_line,
    atomic_write,
    fsync_dir,
    remove_stale_temps,
    truncate_torn_tail,
    write_all,
)
from deerflow.agents.memory.manager import MemoryCorruptionError

__all__ = ["Journal", "JournalEntry", "manifest_digest"]

MAGIC = b"DMJ2 "
PENDING, DONE = b"P", b"D"
STATE_AT = len(MAGIC)
HEADER_SIZE = len(MAGIC) + len(b"P 000000000000 00000000\n")


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One file of a change: its path relative to the user directory and its bytes before."""

    path: str
    before: bytes | None  # None: the file did not exist


@dataclass(frozen=True, slots=True)
class Journal:
    operation_id: str
    previous_revision: int
    next_revision: int
    entries: tuple[JournalEntry, ...]
    history_line: bytes
    # The audit log's size before the commit appended its line; None in the earlier format,
    # whose commits appended it after the commit point.
    history_size: int | None = None
    # `manifest_digest(...)` of memory.json's next bytes; None in the earlier formats.
    manifest_after: str | None = None

    def write(self, path: Path) -> None:
        """Write the journal durably; only then may the commit touch other files."""
        record = {
            "operationId": self.operation_id,
            "previousRevision": self.previous_revision,
            "nextRevision": self.next_revision,
            "entries": [{"path": e.path, "before": _encode(e.before)} for e in self.entries],
            "historyLine": _encode(self.history_line),
            "historySize": self.history_size,
            "manifestAfter": self.manifest_after,
        }
        payload = json.dumps(record).encode("utf-8")
        header = b"%s%s %012d %08x\n" % (MAGIC, PENDING, len(payload), zlib.crc32(payload))
        existed = path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            write_all(fd, header + payload)  # from the start: the file is never truncated
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if not existed:
            fsync_dir(path.parent)

    @staticmethod
    def finish(path: Path) -> None:
        """Mark the commit done. Not synced: if this is lost, recovery finds it already done."""
        fd = os.open(path, os.O_RDWR)
        try:
            if os.pread(fd, len(MAGIC), 0) == MAGIC:
                os.pwrite(fd, DONE, STATE_AT)
            else:
                os.ftruncate(fd, 0)  # the earlier format: done means empty
        finally:
            os.close(fd)

    @classmethod
    def pending(cls, path: Path) -> Journal | None:
        """The journal of an interrupted commit, or None when there is none.

        Raises:
            MemoryCorruptionError: the journal holds something other than a record, a torn
                record or a record marked done.
        """
        try:
            with open(path, "rb") as handle:
                payload = _pending_payload(path, handle)
        except FileNotFoundError:
            return None
        return None if payload is None else cls._parse(path, payload)

    @classmethod
    def _parse(cls, path: Path, data: bytes) -> Journal:
        try:
            record = json.loads(data)
            journal = cls(
                operation_id=record["operationId"],
                previous_revision=int(record["previousRevision"]),
                next_revision=int(record["nextRevision"]),
                entries=tuple(
                    JournalEntry(_inside(e["path"]), _decode(e["before"]))
                    for e in record["entries"]
                ),
                history_line=_decode(record["historyLine"]) or b"",
                history_size=record.get("historySize"),
                manifest_after=record.get("manifestAfter"),
            )
            if not journal.history_line.strip():
                raise ValueError("no audit line")
        except (ValueError, KeyError, TypeError) as exc:
            raise MemoryCorruptionError(f"{path}: unreadable commit journal: {exc}") from exc
        return journal

    def recover(
        self, user_dir: Path, journal_path: Path, manifest: bytes, revision: Callable[[], int]
    ) -> None:
        """Finish or undo the interrupted commit, remove the temp files it left, then mark the
        journal done.

        Args:
            manifest: `memory.json`'s bytes now; empty when there is none.
            revision: `memory.json`'s revision, asked only for a record of an earlier format.
        """
        history = user_dir / "history.jsonl"
        if self._committed(journal_path, manifest, revision):
            truncate_torn_tail(history)
            if not _has_line(history, self.history_line):
                append_line(history, self.history_line)
        else:
            for entry in self.entries:
                target = user_dir / entry.path
                if entry.before is None:
                    target.unlink(missing_ok=True)
                else:
                    atomic_write(target, entry.before)
            if self.history_size is not None:
                _cut_after(history, self.history_size)
        touched = dict.fromkeys(
            (user_dir / "memory.json", *(user_dir / e.path for e in self.entries))
        )
        for path in touched:
            remove_stale_temps(path)
        self.finish(journal_path)

    def _committed(self, journal_path: Path, manifest: bytes, revision: Callable[[], int]) -> bool:
        if self.manifest_after is not None:
            return manifest_digest(manifest) == self.manifest_after
        current = revision()
        if current not in (self.previous_revision, self.next_revision):
            raise MemoryCorruptionError(
                f"{journal_path}: journal for revision {self.previous_revision}→"
                f"{self.next_revision}, but memory.json is at revision {current}"
            )
        return current == self.next_revision


def manifest_digest(data: bytes) -> str:
    """What a journal records of `memory.json`'s next bytes, to tell them from torn ones."""
    return hashlib.sha256(data).hexdigest()


def _pending_payload(path: Path, handle: BinaryIO) -> bytes | None:
    """The JSON of the record still pending in an open journal, or None."""
    header = handle.read(HEADER_SIZE)
    if header.startswith(b"{"):  # the earlier format
        data = header + handle.read()
        return data if data.endswith(b"\n") else None  # else torn: nothing was touched yet
    if len(header) < HEADER_SIZE and MAGIC.startswith(header[: len(MAGIC)]):
        return None  # empty, or torn within the header of the first record
    fields = header[len(MAGIC) :].split()
    if not header.startswith(MAGIC) or len(fields) != 3 or fields[0] not in (PENDING, DONE):
        raise MemoryCorruptionError(f"{path}: not a commit journal")
    if fields[0] == DONE:
        return None
    try:
        size, checksum = int(fields[1]), int(fields[2], 16)
    except ValueError:
        return None  # torn within the header
    payload = handle.read(size)
    if len(payload) != size or zlib.crc32(payload) != checksum:
        return None  # torn while written: the commit had not touched anything yet
    return payload


def _cut_after(path: Path, size: int) -> None:
    """Drop what the interrupted commit appended (whole or torn) past `size` bytes."""
    if not path.exists():
        return
    with open(path, "rb+") as handle:
        if handle.seek(0, os.SEEK_END) > size:
            handle.truncate(size)
            os.fsync(handle.fileno())


def _has_line(path: Path, line: bytes) -> bool:
    if not path.exists():
        return False
    wanted = line.rstrip(b"\n")
    with open(path, "rb") as handle:
        return any(existing.rstrip(b"\n") == wanted for existing in handle)


def _inside(path: Any) -> str:
    """`path` if it names a file inside the user's directory, as the commit wrote it."""
    inside = isinstance(path, str) and "\x00" not in path
    relative = PurePosixPath(path) if inside else None
    if relative is None or relative.is_absolute() or not relative.parts or ".." in relative.parts:
        raise ValueError(f"entry path {path!r} is not inside the user's directory")
    return str(path)


def _encode(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _decode(text: Any) -> bytes | None:
    return None if text is None else base64.b64decode(text)
