"""The on-disk layout of DeerMem (docs/data-format.md) and the names that are safe to put in it."""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import Final

from deerflow.agents.memory.manager import DEFAULT_USER, checked_user_id, slug_with_digest

__all__ = [
    "AGENT_NAME_PATTERN",
    "DEFAULT_AGENT",
    "DEFAULT_USER",
    "FACT_ID_PATTERN",
    "MAX_AGENT_NAME_LENGTH",
    "UserPaths",
    "bucket_name",
    "safe_user_id",
    "shard_of",
    "user_paths",
    "validate_fact_id",
]

# Letters, digits, `-` and `_` (a custom agent's name may have `_`); not starting with `_`, so
# that no name reaches the reserved `__default__`.
AGENT_NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9-][A-Za-z0-9_-]*$")
FACT_ID_PATTERN: Final = re.compile(r"^fact_[0-9a-f]{8,64}$")
DEFAULT_AGENT: Final = "__default__"
# An agent's bucket is a directory named after it, kept well within file-name limits.
MAX_AGENT_NAME_LENGTH: Final = 128

_SAFE_USER_ID = re.compile(r"^[A-Za-z0-9_-]+$")


def safe_user_id(user_id: str | None) -> str:
    """The directory name of a user: kept as is when already safe, else `slug.` + 16 hex of SHA-256.

    The dot never occurs in an id kept as is, so a hashed name cannot collide with a real id.
    Safe ids longer than 64 characters are hashed too, to stay within file-name limits.

    Raises:
        ValueError: an empty id, one longer than 1024 characters, or one containing NUL.
    """
    raw = checked_user_id(user_id)
    if _SAFE_USER_ID.fullmatch(raw) and len(raw) <= 64:
        return raw
    return slug_with_digest(raw, ".", "user")


def bucket_name(agent_name: str | None) -> str:
    """The fact bucket of an agent: lower-cased, or `__default__` when omitted.

    Raises:
        ValueError: a name that does not match `AGENT_NAME_PATTERN`, or is longer than
            `MAX_AGENT_NAME_LENGTH`.
    """
    if agent_name is None:
        return DEFAULT_AGENT
    if not isinstance(agent_name, str) or not AGENT_NAME_PATTERN.fullmatch(agent_name):
        raise ValueError(
            f"agent_name: {agent_name!r} must match {AGENT_NAME_PATTERN.pattern} "
            "(letters, digits, '-' and '_', not starting with '_')"
        )
    if len(agent_name) > MAX_AGENT_NAME_LENGTH:
        raise ValueError(f"agent_name: longer than {MAX_AGENT_NAME_LENGTH} characters")
    return agent_name.lower()


def validate_fact_id(fact_id: str) -> str:
    """Return `fact_id`, or raise `ValueError` if it could not be a DeerMem fact id."""
    if not isinstance(fact_id, str) or not FACT_ID_PATTERN.fullmatch(fact_id):
        raise ValueError(f"fact_id: {fact_id!r} is not a fact id (fact_ followed by hex)")
    return fact_id


def shard_of(fact_id: str) -> str:
    """The folder of a fact's file under its bucket's `facts/`: 2 hex of its id's SHA-256."""
    return hashlib.sha256(fact_id.encode("utf-8")).hexdigest()[:2]


class UserPaths:
    """Every path of one user's memory under the storage root."""

    def __init__(self, root: Path, user_key: str) -> None:
        self.root = root
        self.user_key = user_key
        self.dir = root / "users" / user_key
        self.manifest = self.dir / "memory.json"
        self.lock = self.dir / ".memory.lock"
        self.journal = self.dir / ".journal.json"
        self.history = self.dir / "history.jsonl"
        self.agents = self.dir / "agents"

    def facts_dir(self, bucket: str) -> Path:
        return self.agents / bucket / "facts"

    def fact_file(self, bucket: str, fact_id: str) -> Path:
        return self.facts_dir(bucket) / shard_of(fact_id) / f"{fact_id}.md"

    def metadata_dir(self, bucket: str) -> Path:
        return self.agents / bucket / ".metadata"


@functools.lru_cache(maxsize=4096)
def user_paths(root: Path, user_key: str) -> UserPaths:
    """`UserPaths(root, user_key)`, shared: every read builds one, and pathlib joins add up."""
    return UserPaths(root, user_key)
