"""A backend that stores nothing, written as the template for new backends.

To start your own: copy this folder to `backends/<your_name>/` (or anywhere importable, then
point `memory.manager_class` at `your_pkg.module:YourManager`), rename the class, and fill in the
three mandatory members. Everything else in the contract has a default: leave out what you do not
support and callers get `MemoryUnsupportedError` naming your backend and the operation.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from deerflow.agents.memory.manager import MemoryManager, MemoryMode


class NoopMemoryManager(MemoryManager):
    """Accepts every write, forgets it, and has nothing to inject or find."""

    # True because search() is overridden below; the contract checks the two agree.
    supports_search: ClassVar[bool] = True

    @classmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **host_hooks: Any
    ) -> Self:
        # A real backend validates its own keys here (see `parse_backend_config`), builds its
        # clients as private attributes, and picks the host hooks it needs from `host_hooks`.
        return cls(backend_config=backend_config, mode=mode)

    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        return None

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        return ""

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        return []
