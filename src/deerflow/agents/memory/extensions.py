"""Operations some backends offer beyond the contract, reached by duck typing.

Hosts (CLI, gateway) never import a backend: they ask `isinstance(manager, MarkdownPortable)`
and, when the backend lacks the operation, raise `MemoryUnsupportedError` naming it. A backend
offers an extension simply by having the methods; it imports nothing from here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["AgentListing", "Auditable", "MarkdownPortable", "Migratable", "Reindexable"]


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
