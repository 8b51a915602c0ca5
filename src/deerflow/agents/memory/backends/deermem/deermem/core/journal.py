"""The commit journal: what a multi-file change is about to do, so a crash can be undone.

A commit writes the journal first (with the previous bytes of every file it will touch), then
the fact files, then `memory.json` with the next revision, which is the commit point, then the
audit log line, and finally empties the journal. Whoever next takes the user's lock and finds a
journal either rolls the change back (`memory.json` still has the old revision) or finishes it
(the new revision is there: only the audit line may be missing).

The journal file is kept and rewritten in place rather than created and deleted each time: that
saves a directory fsync per commit. A journal that does not parse was torn while being written,
before the commit touched anything, so it is simply discarded.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deerflow.agents.memory.backends.deermem.deermem.core.atomic import (
    append_line,
    atomic_write,
    fsync_dir,
    truncate_torn_tail,
)
from deerflow.agents.memory.manager import MemoryCorruptionError

__all__ = ["Journal", "JournalEntry"]


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

    def write(self, path: Path) -> None:
        """Write the journal durably; only then may the commit touch other files."""
        record = {
            "operationId": self.operation_id,
            "previousRevision": self.previous_revision,
            "nextRevision": self.next_revision,
            "entries": [{"path": e.path, "before": _encode(e.before)} for e in self.entries],
            "historyLine": _encode(self.history_line),
        }
        existed = path.exists()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(record).encode("utf-8") + b"\n")
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if not existed:
            fsync_dir(path.parent)

    @staticmethod
    def finish(path: Path) -> None:
        """Mark the commit done. Not synced: if this is lost, recovery finds it already done."""
        os.truncate(path, 0)

    @classmethod
    def pending(cls, path: Path) -> Journal | None:
        """The journal of an interrupted commit, or None when there is none."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if not data.endswith(b"\n"):
            return None  # empty (finished) or torn while written (nothing was touched yet)
        try:
            record = json.loads(data)
            return cls(
                operation_id=record["operationId"],
                previous_revision=int(record["previousRevision"]),
                next_revision=int(record["nextRevision"]),
                entries=tuple(
                    JournalEntry(e["path"], _decode(e["before"])) for e in record["entries"]
                ),
                history_line=_decode(record["historyLine"]) or b"",
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise MemoryCorruptionError(f"{path}: unreadable commit journal: {exc}") from exc

    def recover(self, user_dir: Path, journal_path: Path, current_revision: int) -> None:
        """Finish or undo the interrupted commit, then drop the journal."""
        history = user_dir / "history.jsonl"
        if current_revision == self.next_revision:
            truncate_torn_tail(history)
            if not _has_line(history, self.history_line):
                append_line(history, self.history_line)
        elif current_revision == self.previous_revision:
            for entry in self.entries:
                target = user_dir / entry.path
                if entry.before is None:
                    target.unlink(missing_ok=True)
                else:
                    atomic_write(target, entry.before)
        else:
            raise MemoryCorruptionError(
                f"{journal_path}: journal for revision {self.previous_revision}→"
                f"{self.next_revision}, but memory.json is at revision {current_revision}"
            )
        self.finish(journal_path)


def _has_line(path: Path, line: bytes) -> bool:
    if not path.exists():
        return False
    wanted = line.rstrip(b"\n")
    with open(path, "rb") as handle:
        return any(existing.rstrip(b"\n") == wanted for existing in handle)


def _encode(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _decode(text: Any) -> bytes | None:
    return None if text is None else base64.b64decode(text)
