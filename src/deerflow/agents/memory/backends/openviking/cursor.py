"""Send cursors: which messages of a thread OpenViking already acknowledged, kept as hashes only.

The host passes the whole thread on every `add()`. A cursor lets the backend send each message
once. It remembers two things, neither of which contains message text:

* the acknowledged prefix, as a count and a rolling digest of its message signatures. A thread
  that merely grew since (the usual case) matches it, and only its tail is considered;
* the signatures of the last `max_seen` acknowledged messages. A thread that no longer starts with
  the prefix (summarised, compacted, edited) falls back to sending what is not among them.

A signature is a truncated SHA-256 of the session id and the message's id, type, content, tool
calls and tool result fields, plus its occurrence number among identical messages of the thread,
so that a repeated "ok" is still a new message. `commit_pending` says that messages were written
to the session after its last commit: the next call commits first, so nothing written stays
unarchived after a crash or a failed commit.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from langchain_core.messages import BaseMessage
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from deerflow.agents.memory.manager import MemoryCorruptionError

__all__ = ["Cursor", "CursorStore", "advance", "signatures", "unsent"]

_DIGEST_SEED: Final = hashlib.sha256(b"deerflow-openviking-cursor-v1").hexdigest()
_SIGNATURE_HEX: Final = 32

Signature = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]


class Cursor(BaseModel):
    """The persisted state of one session. An empty cursor matches every thread."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    schema_version: Literal[1] = 1
    prefix_count: int = Field(default=0, ge=0)
    prefix_digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] = _DIGEST_SEED
    seen: list[Signature] = Field(default_factory=list)
    commit_pending: bool = False


def signatures(session_id: str, messages: Sequence[BaseMessage]) -> list[str]:
    """One signature per message, in order; equal messages differ by their occurrence number."""
    occurrences: Counter[str] = Counter()
    result = []
    for message in messages:
        fields = json.dumps(_identity(message), sort_keys=True, default=str, ensure_ascii=False)
        occurrence = occurrences[fields]
        occurrences[fields] += 1
        payload = f"{session_id}\0{fields}\0{occurrence}".encode()
        result.append(hashlib.sha256(payload).hexdigest()[:_SIGNATURE_HEX])
    return result


def unsent(cursor: Cursor, sigs: Sequence[str]) -> list[int]:
    """Indexes of the messages to send: past the prefix if the thread extends it, else anywhere,
    and in both cases only those not among the recently acknowledged."""
    start = cursor.prefix_count if _extends_prefix(cursor, sigs) else 0
    seen = set(cursor.seen)
    return [index for index in range(start, len(sigs)) if sigs[index] not in seen]


def advance(
    cursor: Cursor,
    sigs: Sequence[str],
    pending: Sequence[int],
    acknowledged: int,
    *,
    commit_pending: bool,
    max_seen: int,
) -> Cursor:
    """The cursor after the first `acknowledged` of `pending` reached the session.

    The new prefix ends at the first message not acknowledged: everything before it was either
    acknowledged earlier or just now.
    """
    sent = [sigs[index] for index in pending[:acknowledged]]
    end = pending[acknowledged] if acknowledged < len(pending) else len(sigs)
    return Cursor(
        prefix_count=end,
        prefix_digest=_digest(sigs[:end]),
        seen=[*cursor.seen, *sent][-max_seen:],
        commit_pending=commit_pending,
    )


class CursorStore:
    """Cursor files `<session>.json` (atomic replace) with `<session>.lock` beside them.

    The lock is an `flock` on its own open file, so it serialises threads of this process and
    other processes sharing the directory alike.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, session_id: str) -> Path:
        return self.directory / f"{session_id}.json"

    @contextlib.contextmanager
    def locked(self, session_id: str) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / f"{session_id}.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def load(self, session_id: str) -> Cursor:
        """The session's cursor; an empty one when the session was never written to.

        Raises:
            MemoryCorruptionError: the file exists but is not a valid cursor. It is never reset
                here: resending the whole thread would duplicate it in OpenViking.
        """
        path = self.path(session_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return Cursor()
        except OSError as exc:
            raise _corrupt(path, type(exc).__name__) from None
        try:
            return Cursor.model_validate(json.loads(raw))
        except ValueError as exc:  # bad JSON, bad UTF-8 and a pydantic ValidationError alike
            raise _corrupt(path, type(exc).__name__) from None

    def save(self, session_id: str, cursor: Cursor) -> None:
        """Replace the cursor file atomically: a reader sees the old cursor or the new one."""
        path = self.path(session_id)
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(temp, "wb") as handle:
                handle.write(cursor.model_dump_json().encode())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        directory = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _identity(message: BaseMessage) -> dict[str, Any]:
    """What makes a message this message; the hash of it is all the cursor keeps."""
    return {
        "id": message.id,
        "type": message.type,
        "content": message.content,
        "tool_calls": getattr(message, "tool_calls", None),
        "tool_call_id": getattr(message, "tool_call_id", None),
        "name": message.name,
        "status": getattr(message, "status", None),
    }


def _digest(sigs: Sequence[str]) -> str:
    digest = _DIGEST_SEED
    for sig in sigs:
        digest = hashlib.sha256(f"{digest}{sig}".encode()).hexdigest()
    return digest


def _extends_prefix(cursor: Cursor, sigs: Sequence[str]) -> bool:
    count = cursor.prefix_count
    return count <= len(sigs) and _digest(sigs[:count]) == cursor.prefix_digest


def _corrupt(path: Path, reason: str) -> MemoryCorruptionError:
    return MemoryCorruptionError(
        f"OpenViking send cursor {path} is unreadable ({reason}). Refusing to resend the thread, "
        f"which would duplicate it in OpenViking: inspect the file, or delete it to send the "
        f"whole thread again."
    )
