"""The MemoryManager contract: abstract members, defaults, flags, invariants, errors."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, ClassVar, Self

import pytest
from pydantic import BaseModel, ConfigDict

from deerflow.agents.memory import manager as manager_module
from deerflow.agents.memory.base import overrides
from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactEvictedError,
    FactNotFoundError,
    MemoryAccessError,
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManager,
    MemoryManagerError,
    MemoryMode,
    MemoryReadError,
    MemoryUnsupportedError,
    build_memory_manager,
    parse_backend_config,
)
from deerflow.config import MemoryConfig
from tests.backend_fixtures import add_module
from tests.test_docs_backends import OPTIONAL_CALLS


class Minimal(MemoryManager):
    @classmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **host_hooks: Any
    ) -> Self:
        return cls(backend_config=backend_config, mode=mode)

    def add(self, thread_id: str, messages: list[Any], **kwargs: Any) -> None:
        return None

    def get_context(self, user_id: str | None, **kwargs: Any) -> str:
        return ""


class FlagWithoutSearch(Minimal):
    supports_search: ClassVar[bool] = True


class SearchWithoutFlag(Minimal):
    def search(self, query: str, top_k: int = 5, **kwargs: Any) -> list[dict[str, Any]]:
        return []


class Searching(SearchWithoutFlag):
    supports_search: ClassVar[bool] = True


def test_only_from_config_add_and_get_context_are_abstract() -> None:
    assert MemoryManager.__abstractmethods__ == {"from_config", "add", "get_context"}
    with pytest.raises(TypeError, match="abstract"):
        MemoryManager()  # type: ignore[abstract]


def test_optional_operations_are_all_covered_by_the_unsupported_tests() -> None:
    """A new optional method must be added to the tests that prove it raises by name."""
    harmless_defaults = {"add_nowait", "shutdown_flush", "warm", "cancel_pending", "close"}
    optional = sync_methods() - {"add", "get_context"} - harmless_defaults
    assert optional == set(OPTIONAL_CALLS)


def sync_methods() -> set[str]:
    """Public instance methods of the contract, async twins excluded."""
    return {
        name
        for name, member in vars(MemoryManager).items()
        if inspect.isfunction(member)
        and not inspect.iscoroutinefunction(member)
        and not name.startswith(("_", "model_"))
    }


def test_every_sync_method_has_an_async_twin() -> None:
    for name in sync_methods():
        twin = getattr(MemoryManager, "a" + name)
        assert inspect.iscoroutinefunction(twin), name
        assert list(inspect.signature(twin).parameters) == list(
            inspect.signature(getattr(MemoryManager, name)).parameters
        ), f"a{name} must take the same arguments as {name}"


def test_fields_and_defaults() -> None:
    manager = Minimal(backend_config=None)
    assert manager.backend_config == {}
    assert manager.mode == "middleware"
    assert manager.callbacks is None
    assert manager.shutdown_flush(1.0) is True
    assert manager.warm() is None
    assert manager.cancel_pending(user_id="u") == 0
    assert manager.close() is None
    assert Minimal.supports_search is False
    assert Minimal.requires_passive_writes_in_tool_mode is False
    with pytest.raises(ValueError, match="mode"):
        Minimal(mode="sometimes")  # type: ignore[arg-type]


def test_add_nowait_delegates_to_add() -> None:
    calls: list[tuple[Any, ...]] = []

    class Recording(Minimal):
        def add(self, thread_id: str, messages: list[Any], **kwargs: Any) -> None:
            calls.append((thread_id, messages, kwargs))

    Recording().add_nowait("t", ["m"], agent_name="a", user_id="u")
    assert calls == [("t", ["m"], {"agent_name": "a", "user_id": "u"})]


class WrittenBeforeRevisions(Minimal):
    """A backend whose write methods predate `expected_revision`: they take no such keyword."""

    def clear_memory(self, *, user_id: str | None = None, agent_name: str | None = None) -> Any:
        return {"done": "clear_memory"}

    def import_memory(
        self, data: dict[str, Any], *, user_id: str | None = None, agent_name: str | None = None
    ) -> Any:
        return {"done": "import_memory"}

    def create_fact(
        self,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
    ) -> Any:
        return {"done": "create_fact"}, None

    def update_fact(
        self,
        fact_id: str,
        content: str | None = None,
        category: str | None = None,
        confidence: float | None = None,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
    ) -> Any:
        return {"done": "update_fact"}

    def delete_fact(
        self, fact_id: str, *, user_id: str | None = None, agent_name: str | None = None
    ) -> Any:
        return {"done": "delete_fact"}

    def update_summary(
        self,
        part: str,
        section: str,
        text: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
    ) -> Any:
        return {"done": "update_summary"}

    def revert_change(self, change_id: str, *, user_id: str | None = None) -> Any:
        return {"done": "revert_change"}


@pytest.mark.parametrize(
    ("twin", "args"),
    [
        ("aclear_memory", ()),
        ("aimport_memory", ({},)),
        ("acreate_fact", ("Prefers tea",)),
        ("aupdate_fact", ("fact_1", "Prefers coffee")),
        ("adelete_fact", ("fact_1",)),
        ("aupdate_summary", ("user", "workContext", "Works on a compiler")),
        ("arevert_change", ("change_1",)),
    ],
)
def test_async_write_twins_pass_expected_revision_only_when_given(
    twin: str, args: tuple[Any, ...]
) -> None:
    """A backend written before writes took `expected_revision` keeps working unconditioned."""
    import asyncio

    answer = asyncio.run(getattr(WrittenBeforeRevisions(), twin)(*args, user_id="u"))
    done = answer[0] if isinstance(answer, tuple) else answer
    assert done == {"done": twin.removeprefix("a")}


CONSTRUCTION_PATHS = {
    "direct": lambda cls, mode: cls(mode=mode),
    "from_config": lambda cls, mode: cls.from_config({}, mode=mode),
    "model_validate": lambda cls, mode: cls.model_validate({"mode": mode}),
    "model_construct": lambda cls, mode: cls.model_construct(mode=mode),
}


@pytest.mark.parametrize("path", sorted(CONSTRUCTION_PATHS))
@pytest.mark.parametrize(
    ("cls", "advice"),
    [
        (FlagWithoutSearch, "implement search() or set supports_search = False"),
        (SearchWithoutFlag, "set supports_search = True on SearchWithoutFlag"),
    ],
)
def test_flag_and_implementation_must_agree_on_every_path(
    path: str, cls: type[MemoryManager], advice: str
) -> None:
    with pytest.raises(ValueError, match=advice.replace("(", r"\(").replace(")", r"\)")):
        CONSTRUCTION_PATHS[path](cls, "middleware")


@pytest.mark.parametrize("path", sorted(CONSTRUCTION_PATHS))
def test_tool_mode_needs_search_on_every_path(path: str) -> None:
    with pytest.raises(
        ValueError, match=r"memory\.mode 'tool' needs a backend that implements search\(\)"
    ):
        CONSTRUCTION_PATHS[path](Minimal, "tool")
    assert CONSTRUCTION_PATHS[path](Searching, "tool").mode == "tool"


FLAG_SOURCE = """
from typing import Any, ClassVar
from tests.test_contract import Minimal

class Drifting(Minimal):
    supports_search: ClassVar[bool] = True
"""


def test_flag_drift_and_tool_mode_fail_through_the_factory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_module(monkeypatch, tmp_path, "drifting_backend", FLAG_SOURCE)
    with pytest.raises(ValueError, match="set supports_search = False"):
        build_memory_manager(MemoryConfig(manager_class="drifting_backend:Drifting"), home=tmp_path)
    with pytest.raises(ValueError, match=r"needs a backend that implements search\(\)"):
        build_memory_manager(
            MemoryConfig(manager_class="tests.test_contract:Minimal", mode="tool"), home=tmp_path
        )
    built = build_memory_manager(
        MemoryConfig(manager_class="tests.test_contract:Searching", mode="tool"), home=tmp_path
    )
    assert built.mode == "tool"


@pytest.mark.parametrize(
    ("backend_config", "fatal"),
    [
        ({}, False),
        (None, False),
        ({"failure_policy": {"read": "fail_open"}}, False),
        ({"failure_policy": {"read": "fail_closed"}}, True),
        ({"failure_policy": "fail_closed"}, False),
    ],
)
def test_read_failures_are_fatal_only_for_fail_closed(
    backend_config: dict[str, Any] | None, fatal: bool
) -> None:
    assert Minimal.read_failures_are_fatal_for_config(backend_config) is fatal


@pytest.mark.parametrize(
    ("backend_config", "fatal"),
    [
        ({}, False),
        (None, False),
        ({"failure_policy": {"write": "log_and_drop"}}, False),
        ({"failure_policy": {"read": "fail_closed"}}, False),
        ({"failure_policy": {"write": "raise"}}, True),
        ({"failure_policy": "raise"}, False),
    ],
)
def test_write_failures_are_fatal_only_for_raise(
    backend_config: dict[str, Any] | None, fatal: bool
) -> None:
    assert Minimal.write_failures_are_fatal_for_config(backend_config) is fatal


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (MemoryUnsupportedError("B", "search"), NotImplementedError),
        (FactNotFoundError("fact_1"), KeyError),
        (MemoryConflictError("x"), RuntimeError),
        (MemoryCorruptionError("x"), RuntimeError),
        (MemoryReadError("x"), RuntimeError),
        (MemoryAccessError("x"), RuntimeError),
        (DuplicateFactError("x", existing_fact_id="fact_2"), RuntimeError),
        (FactEvictedError("x"), RuntimeError),
    ],
)
def test_errors_share_a_base_and_their_builtin(error: Exception, builtin: type[Exception]) -> None:
    assert isinstance(error, MemoryManagerError)
    assert isinstance(error, builtin)


def test_fact_not_found_reads_like_a_sentence() -> None:
    with pytest.raises(KeyError) as info:
        raise FactNotFoundError("fact_abc")
    assert str(info.value) == "Fact not found: fact_abc"
    assert info.value.fact_id == "fact_abc"  # type: ignore[attr-defined]


class StrictConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    storage_path: str = ""
    max_facts: int = 100
    api_key: int = 0


def test_backend_config_errors_name_the_key_and_hide_secret_values() -> None:
    with pytest.raises(ValueError, match=r"memory\.backend_config\.max_facts: .*\(got 'many'\)"):
        parse_backend_config(StrictConfig, {"max_facts": "many"})
    with pytest.raises(ValueError, match="should be a valid integer") as info:
        parse_backend_config(StrictConfig, {"api_key": "sk-not-a-number-123456"})
    assert "memory.backend_config.api_key" in str(info.value)
    assert "sk-not-a-number" not in str(info.value)


def test_public_names_of_the_manager_module() -> None:
    expected = {
        "MemoryManager", "MemoryMode", "MemoryCallbacks", "HostHooks", "default_host_hooks",
        "MemoryManagerError", "MemoryConflictError", "MemoryCorruptionError", "MemoryReadError",
        "MemoryAccessError", "MemoryUnsupportedError", "FactNotFoundError", "DuplicateFactError",
        "FactEvictedError", "get_memory_manager", "reset_memory_manager", "build_memory_manager",
        "resolve_manager_class", "available_backends", "memory_read_failures_are_fatal",
        "parse_backend_config", "parse_import_document", "OPTIONAL_OPERATIONS",
        "provided_operations",
        "Fact", "MemoryDocument", "FACT_CATEGORIES", "MAX_TEXT_CHARS", "empty_document",
        "find_secret",
        "validate_content", "validate_category", "validate_confidence", "utc_now", "import_object",
        "searchable_query", "checked_text", "is_valid_unicode", "check_revision", "condition",
        "SUMMARY_SECTIONS", "validate_summary", "validate_summary_section", "refuse_secrets",
        "DEFAULT_USER", "checked_id", "checked_user_id", "slug_with_digest", "ConversationMessage",
        "MessageRole", "read_message", "is_hidden", "is_memory_injection", "strip_memory_blocks",
        "strip_upload_blocks", "keep_hidden_message", "is_harness_message",
    }  # fmt: skip
    assert set(manager_module.__all__) == expected
    assert all(hasattr(manager_module, name) for name in expected)


def test_overrides_sees_classmethods_and_instance_methods() -> None:
    assert not overrides(MemoryManager, "from_config")
    assert overrides(Minimal, "from_config")
    assert overrides(Searching, "search")
    assert not overrides(Minimal, "search")
    assert not overrides(Minimal, "read_failures_are_fatal_for_config")


@pytest.mark.parametrize("path", sorted(CONSTRUCTION_PATHS))
def test_construction_errors_never_echo_the_backend_config(path: str) -> None:
    secret = "sk-proj-never-echo-this-0123456789"

    class Leaky(Minimal):
        @classmethod
        def from_config(
            cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **hooks: Any
        ) -> Self:
            return cls(backend_config={"api_key": secret}, mode=mode)

    build = {
        "direct": lambda: Leaky(backend_config={"api_key": secret}, mode="tool"),
        "from_config": lambda: Leaky.from_config({}, mode="tool"),
        "model_validate": lambda: Leaky.model_validate(
            {"backend_config": {"api_key": secret}, "mode": "tool"}
        ),
        "model_construct": lambda: Leaky.model_construct(
            backend_config={"api_key": secret}, mode="tool"
        ),
    }[path]
    with pytest.raises(ValueError, match="tool") as info:
        build()
    assert secret not in str(info.value)
