"""Typed errors of the memory contract.

Callers decide by type, never by message text. Every memory error derives from
`MemoryManagerError`; where a builtin means the same thing it is a second base, so generic
handlers (`except KeyError`, `except NotImplementedError`) keep working::

    RuntimeError
    └── MemoryManagerError
        ├── MemoryConflictError        a write lost an optimistic-concurrency race   (HTTP 409)
        ├── MemoryCorruptionError      stored memory cannot be read; never reset      (HTTP 500)
        ├── MemoryReadError            a required read failed; do not continue        (HTTP 503)
        ├── MemoryAccessError          identity not allowed for this backend/owner    (HTTP 403)
        ├── MemoryUnsupportedError     + NotImplementedError: operation not provided  (HTTP 501)
        ├── FactNotFoundError          + KeyError: unknown fact id                    (HTTP 404)
        ├── DuplicateFactError         create refused: the same content exists        (HTTP 409)
        └── FactEvictedError           create refused: the capacity policy evicted it (HTTP 409)

Bad input is a plain `ValueError` (HTTP 400); it is not a memory error because nothing about
the stored memory went wrong.
"""

from __future__ import annotations

__all__ = [
    "DuplicateFactError",
    "FactEvictedError",
    "FactNotFoundError",
    "MemoryAccessError",
    "MemoryConflictError",
    "MemoryCorruptionError",
    "MemoryManagerError",
    "MemoryReadError",
    "MemoryUnsupportedError",
]


class MemoryManagerError(RuntimeError):
    """Base class of every error raised by a memory backend about its memory."""


class MemoryConflictError(MemoryManagerError):
    """A write lost an optimistic-concurrency race: reload and retry."""


class MemoryCorruptionError(MemoryManagerError):
    """Stored memory cannot be read. It is never silently reset; an operator must look."""


class MemoryReadError(MemoryManagerError):
    """A required read failed (server down, timeout, bad answer); the caller must not continue."""


class MemoryAccessError(MemoryManagerError):
    """The identity is not allowed for this backend or its owner."""


class MemoryUnsupportedError(MemoryManagerError, NotImplementedError):
    """The backend does not implement the operation."""

    def __init__(self, backend: str, operation: str) -> None:
        self.backend = backend
        self.operation = operation
        super().__init__(f"Memory backend '{backend}' does not support '{operation}'.")


class FactNotFoundError(MemoryManagerError, KeyError):
    """No fact with this id exists in the selected scope."""

    def __init__(self, fact_id: str) -> None:
        self.fact_id = fact_id
        super().__init__(f"Fact not found: {fact_id}")

    def __str__(self) -> str:
        # KeyError would show the repr of the message, quotes included.
        return str(self.args[0])


class DuplicateFactError(MemoryManagerError):
    """A create was refused because a fact with the same content already exists."""

    def __init__(self, message: str, *, existing_fact_id: str | None = None) -> None:
        self.existing_fact_id = existing_fact_id
        super().__init__(message)


class FactEvictedError(MemoryManagerError):
    """A create was refused because the capacity policy evicted the new fact at once."""
