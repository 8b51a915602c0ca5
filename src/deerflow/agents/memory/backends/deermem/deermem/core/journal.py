"""The commit journal: what a multi-file change is about to do, so a crash can be undone.

A commit writes the journal first (with the previous bytes of every file it will touch), then
the fact files, then `memory.json` with the next revision, which is the commit point, then the
audit log line, and finally removes the journal. Whoever next takes the user's lock and finds a
journal either rolls the change back (`memory.json` still has the old revision) or finishes it
(the new revision is there: only the audit line may be missing).
"""

from __future__ import annotations

import base64
import json
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
        record = {
            "operationId": self.operation_id,
            "previousRevision": self.previous_revision,
            "nextRevision": self.next_revision,
            "entries": [{"path": e.path, "before": _encode(e.before)} for e in self.entries],
            "historyLine": _encode(self.history_line),
        }
        atomic_write(path, json.dumps(record).encode("utf-8"))

    @classmethod
    def read(cls, path: Path) -> Journal:
        try:
            record = json.loads(path.read_bytes())
            return cls(
                operation_id=record["operationId"],
                previous_revision=int(record["previousRevision"]),
                next_revision=int(record["nextRevision"]),
                entries=tuple(
                    JournalEntry(e["path"], _decode(e["before"])) for e in record["entries"]
                ),
                history_line=_decode(record["historyLine"]) or b"",
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
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
        journal_path.unlink()
        fsync_dir(user_dir)


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
