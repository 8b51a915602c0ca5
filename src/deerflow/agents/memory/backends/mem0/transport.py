"""What the manager needs from mem0, whichever way it is reached (in-process engine or REST).

A transport speaks mem0's terms (entity ids, memory records as mem0 returns them) and raises
only the errors below; the manager turns them into the contract's typed errors and policies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "Mem0AuthError",
    "Mem0NotFoundError",
    "Mem0Record",
    "Mem0TransportError",
    "Scope",
    "Transport",
]

Mem0Record = dict[str, Any]
"""One memory as mem0 returns it: `id`, `memory`, `metadata`, `user_id`, `agent_id`, `score`, …"""


@dataclass(frozen=True, slots=True)
class Scope:
    """mem0's entity ids for one DeerFlow bucket; `run_id` is set on writes from a thread only."""

    user_id: str
    agent_id: str
    run_id: str | None = None


class Mem0TransportError(Exception):
    """A call to mem0 failed: unreachable, timed out, refused, or answered nonsense.

    The message is safe to log: it never holds a credential or memory content.
    """


class Mem0AuthError(Mem0TransportError):
    """mem0 refused the credentials (HTTP 401/403)."""


class Mem0NotFoundError(Mem0TransportError):
    """No memory has that id."""


class Transport(Protocol):
    """The mem0 operations the manager uses. Every method may raise `Mem0TransportError`."""

    def ping(self) -> None:
        """Check that mem0 is reachable and accepts the credentials."""

    def add(
        self,
        messages: list[dict[str, str]],
        scope: Scope,
        *,
        metadata: dict[str, Any],
        infer: bool,
    ) -> list[str]:
        """Store `messages` (extracting memories when `infer`); return the new ids mem0 gave."""

    def get_all(self, scope: Scope, *, limit: int) -> list[Mem0Record]:
        """Up to `limit` memories of the scope, newest first where mem0 orders them."""

    def search(
        self, query: str, scope: Scope, *, top_k: int, threshold: float, category: str | None
    ) -> list[Mem0Record]:
        """Memories of the scope relevant to `query`, best first, each with a `score`."""

    def get(self, memory_id: str) -> Mem0Record | None:
        """The memory with that id, or None."""

    def update(self, memory_id: str, *, text: str | None, metadata: dict[str, Any]) -> None:
        """Replace the text (when given) and the metadata of a memory."""

    def delete(self, memory_id: str) -> None:
        """Delete one memory; `Mem0NotFoundError` when there is none."""

    def delete_all(self, user_id: str, agent_id: str | None) -> None:
        """Delete the memories of one agent of a user, or of all the user's agents."""

    def close(self) -> None:
        """Release clients and files. Safe to call more than once."""
