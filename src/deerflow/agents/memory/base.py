"""The backend-neutral `MemoryManager` contract.

Three members are mandatory: `from_config`, `add` and `get_context`. Every other operation has a
default: either a harmless value (`shutdown_flush` → True, `warm` → None, …) or
`MemoryUnsupportedError` naming the backend and the operation. Async twins (`aadd`,
`aget_context`, …) run the sync method in a worker thread, so an async caller's event loop is
never blocked by a backend that does blocking I/O.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Literal, ParamSpec, Self, TypeVar

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from deerflow.agents.memory.backend_keys import drop_unknown_keys
from deerflow.agents.memory.callbacks import MemoryCallbacks
from deerflow.agents.memory.errors import MemoryUnsupportedError
from deerflow.validation import parse_model

__all__ = [
    "OPTIONAL_OPERATIONS",
    "MemoryManager",
    "MemoryMode",
    "condition",
    "parse_backend_config",
    "provided_operations",
]

MemoryMode = Literal["middleware", "tool"]
BackendConfigT = TypeVar("BackendConfigT", bound=BaseModel)
P = ParamSpec("P")
R = TypeVar("R")


def parse_backend_config(
    model: type[BackendConfigT], backend_config: Mapping[str, Any]
) -> BackendConfigT:
    """Validate a backend's own keys with `model`.

    Keys `model` does not know are logged once and dropped (`backend_keys`), or refused when
    `backend_config.strict` is true. The factory adds `storage_path` to every backend's config,
    so `model` must accept it.

    Raises:
        ValueError: naming each bad key as `memory.backend_config.<key>`, one per line.
    """
    prefix = "memory.backend_config"
    return parse_model(model, drop_unknown_keys(model, backend_config, prefix), prefix)


class MemoryManager(BaseModel, ABC):
    """Base class of every memory backend.

    Backend internals (storage, clients, queues) are pydantic private attributes, never fields.

    Class flags:
        supports_search: must be True exactly when the class overrides `search()`.
        requires_passive_writes_in_tool_mode: keep `MemoryMiddleware` writing in tool mode.
        supports_expected_revision: the write methods honour `expected_revision` (see below).

    Conditional writes. Every write method takes a keyword-only `expected_revision`: the memory
    `revision` the caller read. A backend that keeps revisions checks it in the same atomic step
    as the write and raises `MemoryConflictError` (changing nothing) when the memory has moved
    on; it never rebases or retries such a write. A backend without revisions raises
    `MemoryUnsupportedError` for any `expected_revision` other than None, rather than writing
    unconditionally. None (the default) writes whatever the revision.

    Raises:
        ValueError: at construction, on every path, when `supports_search` disagrees with the
            implementation, or when `mode == "tool"` and the backend has no `search()`.
    """

    # hide_input_in_errors: backend_config may hold credentials; errors must never echo them.
    model_config = ConfigDict(arbitrary_types_allowed=True, hide_input_in_errors=True)

    supports_search: ClassVar[bool] = False
    requires_passive_writes_in_tool_mode: ClassVar[bool] = False
    supports_expected_revision: ClassVar[bool] = False

    backend_config: dict[str, Any] = {}
    mode: MemoryMode = "middleware"
    callbacks: MemoryCallbacks | None = None

    @field_validator("backend_config", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    def __init__(self, /, **data: Any) -> None:
        # Checked before pydantic runs, so that direct construction raises a plain ValueError.
        check_contract(type(self), data.get("mode", "middleware"))
        super().__init__(**data)

    @model_validator(mode="after")
    def _check_contract(self) -> Self:
        check_contract(type(self), self.mode)
        return self

    @classmethod
    def model_construct(  # type: ignore[override]  # the pydantic plugin types it per model
        cls, _fields_set: set[str] | None = None, **values: Any
    ) -> Self:
        # model_construct skips validators; the contract must hold on every construction path.
        check_contract(cls, values.get("mode", "middleware"))
        return super().model_construct(_fields_set, **values)

    # -- mandatory ---------------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **host_hooks: Any
    ) -> Self:
        """Build the backend from its `backend_config`.

        `host_hooks` are keyword arguments the host offers (`callbacks`, `host_llm_factory`,
        `should_keep_hidden_message`, `trace_context_manager`, `extraction_callback`); take what
        you need and ignore the rest. `backend_config["storage_path"]` is an absolute directory.
        """

    @abstractmethod
    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        """Queue a write of the conversation. Filtering and extraction are the backend's job."""

    @abstractmethod
    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        """Return injection-ready plain text, already within the backend's budget ("" if none).

        Raises:
            MemoryReadError: a required read failed and the read policy is `fail_closed`.
        """

    # -- optional, with defaults ---------------------------------------------------------------

    def add_nowait(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
    ) -> None:
        """Write now, without debouncing (used before summarisation drops messages)."""
        self.add(thread_id, messages, agent_name=agent_name, user_id=user_id)

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        """Return fact dicts relevant to `query`, best first. Override and set `supports_search`."""
        raise self._unsupported("search")

    def get_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """Return the memory document (summaries plus the bucket's `facts`)."""
        raise self._unsupported("get_memory")

    def reload_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """Drop caches, read the stored memory again and return the document."""
        raise self._unsupported("reload_memory")

    def clear_memory(
        self,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Remove the memory of one agent bucket, or of all the user's agents when omitted.

        Raises:
            MemoryConflictError: the memory is no longer at `expected_revision`.
        """
        raise self._unsupported("clear_memory")

    def import_memory(
        self,
        data: dict[str, Any],
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Replace the stored memory with the document `data`; return the new document.

        Raises:
            MemoryConflictError: the memory is no longer at `expected_revision`.
        """
        raise self._unsupported("import_memory")

    def export_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """Return the document in the form `import_memory` accepts."""
        raise self._unsupported("export_memory")

    def create_fact(
        self,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        """Store a fact; return the document and the new fact id.

        Raises:
            ValueError: empty content, unknown category, confidence outside 0..1.
            DuplicateFactError: the same content is already stored.
            FactEvictedError: the capacity policy evicted the new fact at once.
            MemoryConflictError: the memory is no longer at `expected_revision`.
        """
        raise self._unsupported("create_fact")

    def update_fact(
        self,
        fact_id: str,
        content: str | None = None,
        category: str | None = None,
        confidence: float | None = None,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Change the given fields of a fact; return the document.

        Raises:
            FactNotFoundError: no such fact in this scope.
            ValueError: an invalid new value.
            MemoryConflictError: the memory is no longer at `expected_revision`.
        """
        raise self._unsupported("update_fact")

    def delete_fact(
        self,
        fact_id: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Delete a fact; return the document.

        Raises:
            FactNotFoundError: no such fact in this scope.
            MemoryConflictError: the memory is no longer at `expected_revision`.
        """
        raise self._unsupported("delete_fact")

    def update_summary(
        self,
        part: str,
        section: str,
        text: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Replace the text of one summary section: `part` is `"user"` or `"history"`, `section`
        one of that part's (`SUMMARY_SECTIONS`); `""` empties it. Return the document, with the
        facts of `agent_name`'s bucket.

        Raises:
            ValueError: an unknown part or section; text that breaks the content rules or
                looks like a credential.
            MemoryConflictError: `expected_revision` is given and the memory is at another
                revision; nothing is written.
        """
        raise self._unsupported("update_summary")

    def get_history(
        self, *, user_id: str | None = None, agent_name: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Return the audit log, newest first: `{change_id, at, actor, reason, before, after}`."""
        raise self._unsupported("get_history")

    def revert_change(
        self, change_id: str, *, user_id: str | None = None, expected_revision: int | None = None
    ) -> dict[str, Any]:
        """Undo one recorded change; return the change that the undo itself recorded.

        Raises:
            MemoryConflictError: the memory is no longer at `expected_revision`.
        """
        raise self._unsupported("revert_change")

    def shutdown_flush(self, timeout: float) -> bool:
        """Write what is queued within `timeout` seconds; True when nothing is left behind."""
        return True

    def warm(self) -> bool | None:
        """Prepare for the first request. None means there was nothing to warm."""
        return None

    def cancel_pending(self, *, user_id: str | None, agent_name: str | None = None) -> int:
        """Drop queued (not in-flight) writes of one agent, or all agents; return how many."""
        return 0

    def close(self) -> None:
        """Release clients, files and threads. Called once, after `shutdown_flush`."""

    @classmethod
    def read_failures_are_fatal_for_config(cls, backend_config: Mapping[str, Any] | None) -> bool:
        """Whether a failed read must end the turn. Pure: no I/O, no construction."""
        policy = (backend_config or {}).get("failure_policy")
        return isinstance(policy, Mapping) and policy.get("read") == "fail_closed"

    @classmethod
    def write_failures_are_fatal_for_config(cls, backend_config: Mapping[str, Any] | None) -> bool:
        """Whether a failed write (`add`, `add_nowait`) must end the turn instead of being logged.

        Pure: no I/O, no construction. True iff `backend_config.failure_policy.write == "raise"`.
        """
        policy = (backend_config or {}).get("failure_policy")
        return isinstance(policy, Mapping) and policy.get("write") == "raise"

    def _unsupported(self, operation: str) -> MemoryUnsupportedError:
        return MemoryUnsupportedError(type(self).__name__, operation)

    def _refuse_expected_revision(self, operation: str, expected_revision: int | None) -> None:
        """For a backend without revisions: refuse a conditional write instead of ignoring it.

        Raises:
            MemoryUnsupportedError: `expected_revision` is given.
        """
        if expected_revision is not None:
            raise self._unsupported(f"{operation} with expected_revision")

    # -- async twins: the sync method in a worker thread ---------------------------------------

    async def aadd(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        await _in_thread(
            self.add, thread_id, messages, agent_name=agent_name, user_id=user_id, trace_id=trace_id
        )

    async def aadd_nowait(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
    ) -> None:
        await _in_thread(
            self.add_nowait, thread_id, messages, agent_name=agent_name, user_id=user_id
        )

    async def aget_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        return await _in_thread(
            self.get_context, user_id, agent_name=agent_name, thread_id=thread_id, query=query
        )

    async def asearch(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        return await _in_thread(
            self.search, query, top_k, user_id=user_id, agent_name=agent_name, category=category
        )

    async def aget_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        return await _in_thread(self.get_memory, user_id=user_id, agent_name=agent_name)

    async def areload_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        return await _in_thread(self.reload_memory, user_id=user_id, agent_name=agent_name)

    async def aclear_memory(
        self,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        return await _in_thread(
            self.clear_memory,
            user_id=user_id,
            agent_name=agent_name,
            **condition(expected_revision),
        )

    async def aimport_memory(
        self,
        data: dict[str, Any],
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        return await _in_thread(
            self.import_memory,
            data,
            user_id=user_id,
            agent_name=agent_name,
            **condition(expected_revision),
        )

    async def aexport_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        return await _in_thread(self.export_memory, user_id=user_id, agent_name=agent_name)

    async def acreate_fact(
        self,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        return await _in_thread(
            self.create_fact,
            content,
            category,
            confidence,
            user_id=user_id,
            agent_name=agent_name,
            **condition(expected_revision),
        )

    async def aupdate_fact(
        self,
        fact_id: str,
        content: str | None = None,
        category: str | None = None,
        confidence: float | None = None,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        return await _in_thread(
            self.update_fact,
            fact_id,
            content,
            category,
            confidence,
            user_id=user_id,
            agent_name=agent_name,
            **condition(expected_revision),
        )

    async def adelete_fact(
        self,
        fact_id: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        return await _in_thread(
            self.delete_fact,
            fact_id,
            user_id=user_id,
            agent_name=agent_name,
            **condition(expected_revision),
        )

    async def aupdate_summary(
        self,
        part: str,
        section: str,
        text: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        return await _in_thread(
            self.update_summary,
            part,
            section,
            text,
            user_id=user_id,
            agent_name=agent_name,
            **condition(expected_revision),
        )

    async def aget_history(
        self, *, user_id: str | None = None, agent_name: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        return await _in_thread(
            self.get_history, user_id=user_id, agent_name=agent_name, limit=limit
        )

    async def arevert_change(
        self, change_id: str, *, user_id: str | None = None, expected_revision: int | None = None
    ) -> dict[str, Any]:
        return await _in_thread(
            self.revert_change, change_id, user_id=user_id, **condition(expected_revision)
        )

    async def ashutdown_flush(self, timeout: float) -> bool:
        return await _in_thread(self.shutdown_flush, timeout)

    async def awarm(self) -> bool | None:
        return await _in_thread(self.warm)

    async def acancel_pending(self, *, user_id: str | None, agent_name: str | None = None) -> int:
        return await _in_thread(self.cancel_pending, user_id=user_id, agent_name=agent_name)

    async def aclose(self) -> None:
        await _in_thread(self.close)


def condition(expected_revision: int | None) -> dict[str, int]:
    """The keyword arguments that pass `expected_revision` on to a write method: none when it
    is None, so that a backend written before writes took one keeps working unconditioned."""
    return {} if expected_revision is None else {"expected_revision": expected_revision}


def overrides(cls: type[MemoryManager], method: str) -> bool:
    """Whether `cls` provides its own `method` instead of the contract's default."""
    # getattr_static: a plain getattr builds a new bound object per access for classmethods.
    return inspect.getattr_static(cls, method) is not inspect.getattr_static(MemoryManager, method)


OPTIONAL_OPERATIONS: Final = (
    "search",
    "get_memory",
    "reload_memory",
    "clear_memory",
    "import_memory",
    "export_memory",
    "create_fact",
    "update_fact",
    "delete_fact",
    "update_summary",
    "get_history",
    "revert_change",
)
"""The operations whose contract default raises `MemoryUnsupportedError`."""


def provided_operations(cls: type[MemoryManager]) -> frozenset[str]:
    """The optional operations `cls` implements (it overrides the contract's default)."""
    return frozenset(op for op in OPTIONAL_OPERATIONS if overrides(cls, op))


def check_contract(cls: type[MemoryManager], mode: str) -> None:
    """Raise `ValueError` when the class flags disagree with the implementation or the mode."""
    name = cls.__name__
    has_search = overrides(cls, "search")
    if cls.supports_search and not has_search:
        raise ValueError(
            f"{name} sets supports_search = True but does not override search(): implement "
            f"search() or set supports_search = False."
        )
    if has_search and not cls.supports_search:
        raise ValueError(
            f"{name} overrides search() but leaves supports_search = False: set "
            f"supports_search = True on {name}."
        )
    if mode == "tool" and not has_search:
        raise ValueError(
            f"memory.mode 'tool' needs a backend that implements search(), and {name} does not: "
            f"use mode 'middleware' or a backend with search()."
        )


async def _in_thread(func: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """`asyncio.to_thread`, imported on first use: sync-only callers never pay for asyncio."""
    import asyncio

    return await asyncio.to_thread(func, *args, **kwargs)
