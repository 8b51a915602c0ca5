"""Bearer tokens of `auth.mode: token`, kept as SHA-256 hashes in `{home}/auth/tokens.json`.

A token is shown once, when `add` makes it; the file holds only its hash, so reading the file
does not give anyone access. Tokens are 256 random bits, which makes a plain SHA-256 (no salt,
no stretching) as strong as the token itself. The server re-reads the file whenever it changes,
so `deerflow auth revoke` takes effect at the next request, without a restart.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from deerflow.agents.memory.manager import utc_now

__all__ = ["TOKEN_PREFIX", "TokenRecord", "TokenStore", "tokens_path", "validate_user_id"]

TOKEN_PREFIX: Final = "dft_"
FILE_VERSION: Final = 1
_USER_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")


def tokens_path(home: Path) -> Path:
    """Where the token hashes of the runtime home `home` live."""
    return home / "auth" / "tokens.json"


def validate_user_id(user_id: str) -> str:
    """Return `user_id`, or raise `ValueError` when it is not a plain identifier."""
    if not _USER_ID.fullmatch(user_id):
        raise ValueError(
            f"user id {user_id!r}: use 1-128 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit"
        )
    return user_id


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenRecord:
    """One issued token, without the token itself."""

    id: str
    user_id: str
    label: str
    created_at: str
    sha256: str


class TokenStore:
    """The token file: add, list and revoke (CLI), look up (server).

    Raises (every method that reads):
        ValueError: the file exists but is not a token file; the message names it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._by_digest: dict[str, TokenRecord] = {}

    # -- the operator's side (CLI) -------------------------------------------------------------

    def add(self, user_id: str, label: str = "") -> tuple[TokenRecord, str]:
        """Issue a token for `user_id`; return its record and the token, which is not stored."""
        validate_user_id(user_id)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = TokenRecord(
            id=f"tok_{secrets.token_hex(4)}",
            user_id=user_id,
            label=label,
            created_at=utc_now(),
            sha256=_digest(token),
        )
        with self._exclusive():
            self._write([*self._read(), record])
        return record, token

    def records(self) -> list[TokenRecord]:
        """Every issued, unrevoked token, oldest first."""
        return self._read()

    def revoke(self, token_id: str) -> TokenRecord:
        """Remove the token with id `token_id`; return its record.

        Raises:
            ValueError: no token has that id.
        """
        with self._exclusive():
            records = self._read()
            found = next((r for r in records if r.id == token_id), None)
            if found is None:
                raise ValueError(f"no token with id {token_id!r} (see `deerflow auth list`)")
            self._write([r for r in records if r.id != token_id])
        return found

    # -- the server's side ---------------------------------------------------------------------

    def user_for(self, token: str) -> str | None:
        """The user id that `token` stands for, or None for an unknown or revoked token."""
        with self._lock:
            self._refresh()
            record = self._by_digest.get(_digest(token))
        return None if record is None else record.user_id

    def _refresh(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._seen, self._by_digest = None, {}
            return
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            self._by_digest = {record.sha256: record for record in self._read()}
            self._seen = seen

    # -- the file --------------------------------------------------------------------------------

    def _read(self) -> list[TokenRecord]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.path}: not a readable token file: {exc}") from None
        try:
            if raw["version"] != FILE_VERSION:
                raise ValueError(f"version {raw['version']!r} is not {FILE_VERSION}")
            return [TokenRecord(**entry) for entry in raw["tokens"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{self.path}: not a token file: {exc}") from None

    def _write(self, records: list[TokenRecord]) -> None:
        body: dict[str, Any] = {"version": FILE_VERSION, "tokens": [asdict(r) for r in records]}
        temporary = self.path.with_name(self.path.name + ".tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(body, handle, indent=2)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Serialise read-modify-write cycles of several CLI processes."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(self.path.with_name(".tokens.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)
