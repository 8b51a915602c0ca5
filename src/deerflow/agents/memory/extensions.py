"""Operations some backends offer beyond the contract, reached by duck typing.

Hosts (CLI, gateway) never import a backend: they ask `isinstance(manager, MarkdownPortable)`
and, when the backend lacks the operation, raise `MemoryUnsupportedError` naming it. A backend
offers an extension simply by having the methods; it imports nothing from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "AgentListing",
    "Auditable",
    "ChangeListing",
    "EngineBacked",
    "FactsWithChosenIds",
    "MarkdownPortable",
    "Migratable",
    "MovedUser",
    "Reindexable",
    "UserMover",
]


@runtime_checkable
class Reindexable(Protocol):
    def reindex(self, progress: Callable[[int], None] | None = None) -> int: ...


@runtime_checkable
class MarkdownPortable(Protocol):
    def export_markdown(
        self, destination: Path, *, user_id: str | None = None, agent_name: str | None = None
    ) -> int: ...

    def import_markdown(
        self,
        source: Path,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]: ...


@runtime_checkable
class Auditable(Protocol):
    def audit(
        self,
        *,
        user_id: str | None = None,
        staleness_age_days: int = 90,
        near_duplicate_threshold: float = 0.7,
    ) -> list[dict[str, Any]]: ...


@runtime_checkable
class Migratable(Protocol):
    def legacy_sources(self) -> list[str]: ...

    def migrate(
        self, *, dry_run: bool = False, progress: Callable[[int], None] | None = None
    ) -> dict[str, Any]: ...


class MovedUser(Protocol):
    """All of one user's memory as an engine hands it over (DeerMem's `UserDump`)."""

    @property
    def user_id(self) -> str: ...

    @property
    def facts(self) -> Sequence[Any]: ...

    @property
    def history(self) -> Sequence[Any]: ...


class UserMover(Protocol):
    """What `deerflow memory copy` asks of the engine a memory lives in."""

    def user_ids(self) -> Iterator[str]: ...

    def dump_user(self, user_id: str) -> MovedUser: ...

    def restore_user(self, dump: Any) -> None:
        """Write a user dumped by an engine of the same backend; `MemoryConflictError` when
        the user has a memory here already (nothing is written)."""


@runtime_checkable
class EngineBacked(Protocol):
    """A backend whose engine hands over whole users (DeerMem, on files or PostgreSQL)."""

    @property
    def engine(self) -> UserMover: ...


@runtime_checkable
class AgentListing(Protocol):
    def agent_names(self, *, user_id: str | None = None) -> list[str]: ...


@runtime_checkable
class ChangeListing(Protocol):
    """Every change id recorded for a user, whichever bucket the change touched (one emptied
    since included), for hosts that accept a unique prefix of a change id."""

    def change_ids(self, *, user_id: str | None = None) -> list[str]: ...


@runtime_checkable
class FactsWithChosenIds(Protocol):
    """`create_fact` under an id the caller chose, for callers that keep their own keys (the
    LangGraph store). The backend accepts ids of the form `create_fact` gives (`fact_` and 32
    lowercase hex digits) and refuses an id taken in the bucket with `DuplicateFactError` whose
    `existing_fact_id` is that id."""

    def create_fact_with_id(
        self,
        fact_id: str,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
    ) -> dict[str, Any]: ...
