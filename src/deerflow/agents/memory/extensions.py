"""Operations some backends offer beyond the contract, reached by duck typing.

Hosts (CLI, gateway) never import a backend: they ask `isinstance(manager, MarkdownPortable)`
and, when the backend lacks the operation, raise `MemoryUnsupportedError` naming it. A backend
offers an extension simply by having the methods; it imports nothing from here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "AgentListing",
    "Auditable",
    "FactsWithChosenIds",
    "MarkdownPortable",
    "Migratable",
    "Reindexable",
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


@runtime_checkable
class AgentListing(Protocol):
    def agent_names(self, *, user_id: str | None = None) -> list[str]: ...


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
