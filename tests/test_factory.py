"""The factory: folder discovery, class paths, refusal to fall back, storage_path, the singleton."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Self

import pytest
from pydantic import Field

from deerflow.agents.memory.backends.noop import NoopMemoryManager
from deerflow.agents.memory.manager import (
    MemoryManager,
    MemoryMode,
    available_backends,
    build_memory_manager,
    get_memory_manager,
    memory_read_failures_are_fatal,
    reset_memory_manager,
    resolve_manager_class,
)
from deerflow.config import AppConfig, MemoryConfig
from tests.backend_fixtures import add_backend_folder

GOOD_BACKEND = """
from tests.test_factory import Recording as MANAGER_CLASS
"""
BROKEN_BACKEND = """
import a_dependency_that_is_not_installed
"""


class Recording(MemoryManager):
    """Remembers the hooks it was built with, and whether it was closed."""

    built_with: dict[str, Any] = Field(default_factory=dict)
    closed: bool = False

    @classmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **host_hooks: Any
    ) -> Self:
        return cls(backend_config=backend_config, mode=mode, built_with=host_hooks)

    def add(self, thread_id: str, messages: list[Any], **kwargs: Any) -> None:
        return None

    def get_context(self, user_id: str | None, **kwargs: Any) -> str:
        return ""

    def close(self) -> None:
        self.closed = True


def test_builtin_folders_are_listed_without_private_ones() -> None:
    names = available_backends()
    assert "noop" in names
    assert not [n for n in names if n.startswith(("_", "."))]
    assert resolve_manager_class("noop") is NoopMemoryManager


def test_a_folder_with_manager_class_is_a_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_backend_folder(monkeypatch, tmp_path, "recording", GOOD_BACKEND)
    add_backend_folder(monkeypatch, tmp_path, "_private", GOOD_BACKEND)
    assert "recording" in available_backends()
    assert "_private" not in available_backends()
    assert resolve_manager_class("recording") is Recording


def test_a_broken_sibling_does_not_stop_a_good_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_backend_folder(monkeypatch, tmp_path, "broken", BROKEN_BACKEND)
    add_backend_folder(monkeypatch, tmp_path, "recording", GOOD_BACKEND)
    manager = build_memory_manager(MemoryConfig(manager_class="recording"), home=tmp_path)
    assert isinstance(manager, Recording)
    assert "broken" in available_backends()


def test_naming_a_broken_backend_surfaces_its_import_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_backend_folder(monkeypatch, tmp_path, "broken", BROKEN_BACKEND)
    with pytest.raises(ValueError, match="failed to import") as info:
        resolve_manager_class("broken")
    message = str(info.value)
    assert "memory.manager_class='broken'" in message
    assert "ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'" in message
    assert "Refusing to fall back" in message


def test_a_folder_without_a_manager_class_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_backend_folder(monkeypatch, tmp_path, "empty", "VALUE = 1\n")
    with pytest.raises(
        ValueError, match=r"MANAGER_CLASS is None, not a MemoryManager subclass.*Refusing"
    ):
        resolve_manager_class("empty")


@pytest.mark.parametrize(
    "spelling", ["tests.test_factory:Recording", "tests.test_factory.Recording"]
)
def test_class_paths_in_both_spellings(spelling: str) -> None:
    assert resolve_manager_class(spelling) is Recording


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("deermemm", "no backend folder has that name"),
        ("os.path:join", "is not a MemoryManager subclass"),
        ("tests.test_factory:Nope", "has no attribute 'Nope'"),
        ("no_such_package.module:Cls", "importing module 'no_such_package.module' failed"),
        ("pydantic:BaseModel", "is not a MemoryManager subclass"),
    ],
)
def test_unusable_values_refuse_to_fall_back(value: str, detail: str) -> None:
    with pytest.raises(ValueError, match="neither a built-in backend") as info:
        resolve_manager_class(value)
    message = str(info.value)
    assert f"memory.manager_class={value!r}" in message
    assert detail in message
    assert "known: " in message
    assert "noop" in message
    assert "Refusing to fall back" in message


def test_host_hooks_reach_from_config(tmp_path: Path) -> None:
    def hook() -> None:
        return None

    manager = build_memory_manager(
        MemoryConfig(manager_class="tests.test_factory:Recording"),
        home=tmp_path,
        host_hooks={"host_llm_factory": hook},
    )
    assert isinstance(manager, Recording)
    assert manager.built_with == {"host_llm_factory": hook}


@pytest.mark.parametrize(
    ("configured", "expected"),
    [(None, "."), ("", "."), ("data/mem", "data/mem"), ("ABSOLUTE", "ABSOLUTE")],
)
def test_storage_path_is_injected_and_resolved(
    tmp_path: Path, configured: str | None, expected: str
) -> None:
    home = tmp_path / "home"
    absolute = tmp_path / "elsewhere"
    backend_config: dict[str, Any] = {"other": 1}
    if configured is not None:
        backend_config["storage_path"] = str(absolute) if configured == "ABSOLUTE" else configured
    memory = MemoryConfig(manager_class="noop", backend_config=backend_config)
    manager = build_memory_manager(memory, home=home)
    want = absolute if expected == "ABSOLUTE" else (home / expected)
    assert manager.backend_config == {"other": 1, "storage_path": str(want.resolve())}
    assert memory.backend_config == backend_config, "the configuration is not modified"


def test_storage_path_naming_a_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x")
    memory = MemoryConfig(manager_class="noop", backend_config={"storage_path": "a-file"})
    with pytest.raises(ValueError, match=r"memory\.backend_config\.storage_path: .* is a file"):
        build_memory_manager(memory, home=tmp_path)


def test_default_storage_path_is_the_runtime_home(isolated_environment: Path) -> None:
    manager = get_memory_manager(AppConfig(memory=MemoryConfig(manager_class="noop")))
    assert manager.backend_config["storage_path"] == str(isolated_environment.resolve())


def test_singleton_is_built_once_across_threads_and_reset_closes_it() -> None:
    config = AppConfig(memory=MemoryConfig(manager_class="tests.test_factory:Recording"))
    seen: list[MemoryManager] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        seen.append(get_memory_manager(config))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first = seen[0]
    assert all(manager is first for manager in seen)
    assert get_memory_manager() is first, "later calls return the built manager"
    assert set(first.built_with) == {  # type: ignore[attr-defined]
        "callbacks", "host_llm_factory", "should_keep_hidden_message",
        "trace_context_manager", "extraction_callback",
    }  # fmt: skip
    reset_memory_manager()
    assert first.closed is True  # type: ignore[attr-defined]
    assert get_memory_manager(config) is not first


def test_singleton_reads_config_yaml_when_not_given(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("memory:\n  manager_class: noop\n")
    assert isinstance(get_memory_manager(), NoopMemoryManager)


def test_a_failed_build_leaves_nothing_cached(tmp_path: Path) -> None:
    bad = AppConfig(memory=MemoryConfig(manager_class="nope"))
    with pytest.raises(ValueError, match="Refusing to fall back"):
        get_memory_manager(bad)
    assert isinstance(
        get_memory_manager(AppConfig(memory=MemoryConfig(manager_class="noop"))), NoopMemoryManager
    )


def test_read_failure_policy_is_asked_of_the_class() -> None:
    closed = {"failure_policy": {"read": "fail_closed"}}
    assert memory_read_failures_are_fatal(MemoryConfig(manager_class="noop", backend_config=closed))
    assert not memory_read_failures_are_fatal(MemoryConfig(manager_class="noop"))
    assert memory_read_failures_are_fatal(MemoryConfig(manager_class="unresolvable")), (
        "a backend that cannot even be resolved cannot serve reads"
    )
