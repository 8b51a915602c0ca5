"""Turning user and thread ids into names a store accepts, without two ids ever sharing one.

Backends keep memory under names derived from the ids the host passes: DeerMem a directory per
user, Honcho a workspace per user and a session per thread. Those names allow fewer characters
than the ids, so an id is shown as a readable slug plus a digest of the whole id: ids that differ
only in punctuation (`a.b`, `a_b`, `a-b`) share the slug but never the digest.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

__all__ = [
    "DEFAULT_USER",
    "MAX_ID_LENGTH",
    "checked_id",
    "checked_user_id",
    "is_valid_unicode",
    "slug_with_digest",
]

DEFAULT_USER: Final = "default"
MAX_ID_LENGTH: Final = 1024
SLUG_LENGTH: Final = 40
DIGEST_LENGTH: Final = 16

_SLUG_RUN: Final = re.compile(r"[^A-Za-z0-9]+")


def checked_id(value: object, name: str) -> str:
    """Return `value` when it can name stored memory.

    Raises:
        ValueError: naming `name`: not text, empty or only whitespace, longer than 1024
            characters, with NUL, or not valid Unicode (a lone surrogate).
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}: must be non-empty text")
    if len(value) > MAX_ID_LENGTH:
        raise ValueError(f"{name}: longer than {MAX_ID_LENGTH} characters")
    if "\x00" in value:
        raise ValueError(f"{name}: must not contain NUL")
    if not is_valid_unicode(value):
        raise ValueError(f"{name}: must be valid Unicode text (it holds a lone surrogate)")
    return value


def is_valid_unicode(text: str) -> bool:
    """Whether `text` can be written as UTF-8: Python strings may hold lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def checked_user_id(user_id: str | None) -> str:
    """The user id memory is kept under: `user_id`, or "default" when None (no auth).

    Raises:
        ValueError: as `checked_id`.
    """
    return checked_id(DEFAULT_USER if user_id is None else user_id, "user_id")


def slug_with_digest(value: str, separator: str, empty_slug: str) -> str:
    """`value` as letters, digits and hyphens (at most 40), `separator`, 16 hex of its SHA-256.

    `empty_slug` stands in for a value without a letter or digit. The digest covers the whole of
    `value`, so two values never share a result unless SHA-256 collides in its first 64 bits;
    the slug only makes the name readable.
    """
    slug = _SLUG_RUN.sub("-", value).strip("-")[:SLUG_LENGTH] or empty_slug
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:DIGEST_LENGTH]
    return f"{slug}{separator}{digest}"
