"""Resolve `memory.manager_class`, build the backend, and keep one manager per process."""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from deerflow.agents.memory import backends
from deerflow.agents.memory.base import MemoryManager, check_contract
from deerflow.agents.memory.hooks import HostHooks, default_host_hooks
from deerflow.importing import import_object, looks_like_object_path

if TYPE_CHECKING:
    from deerflow.config.schema import AppConfig, MemoryConfig

__all__ = [
    "available_backends",
    "build_memory_manager",
    "get_memory_manager",
    "memory_read_failures_are_fatal",
    "reset_memory_manager",
    "resolve_manager_class",
    "resolve_storage_path",
]

logger = logging.getLogger(__name__)

_manager: MemoryManager | None = None
_manager_lock = threading.Lock()


def available_backends() -> list[str]:
    """Names of the backend folders under `deerflow/agents/memory/backends/`, sorted.

    Folders are listed without importing them, so a broken or uninstalled optional backend never
    hides the others.
    """
    return sorted(
        info.name
        for info in pkgutil.iter_modules(backends.__path__)
        if info.ispkg and not info.name.startswith(("_", "."))
    )


def resolve_manager_class(manager_class: str) -> type[MemoryManager]:
    """Return the backend class that `manager_class` names: a folder name, else a dotted path.

    Raises:
        ValueError: the value names nothing usable; the message lists the known names, gives
            the import detail and says that it refuses to fall back to another backend.
    """
    known = available_backends()
    if manager_class in known:
        module_name = f"{backends.__name__}.{manager_class}"
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            detail = (
                f"backend folder {manager_class!r} failed to import: {type(exc).__name__}: {exc}"
            )
        else:
            candidate = getattr(module, "MANAGER_CLASS", None)
            if _is_manager_class(candidate):
                return candidate
            detail = f"{module_name}.MANAGER_CLASS is {candidate!r}, not a MemoryManager subclass"
    elif looks_like_object_path(manager_class):
        try:
            candidate = import_object(manager_class)
        except ImportError as exc:
            detail = str(exc)
        else:
            if _is_manager_class(candidate):
                return candidate
            detail = f"{candidate!r} is not a MemoryManager subclass"
    else:
        detail = "no backend folder has that name and it is not a dotted path"
    raise ValueError(
        f"memory.manager_class={manager_class!r} is neither a built-in backend "
        f"(known: {', '.join(known)}) nor a loadable 'pkg.mod:Cls' MemoryManager class: {detail}. "
        f"Refusing to fall back to another backend, because memory is persistent state."
    )


def _is_manager_class(candidate: object) -> TypeGuard[type[MemoryManager]]:
    return isinstance(candidate, type) and issubclass(candidate, MemoryManager)


def resolve_storage_path(backend_config: dict[str, Any], home: Path) -> dict[str, Any]:
    """Copy `backend_config` with an absolute `storage_path`: empty → home, relative → under it.

    Raises:
        ValueError: `storage_path` names an existing file, or a directory that cannot be
            written or created (the nearest existing parent is a file or is read-only).
    """
    raw = backend_config.get("storage_path") or ""
    if not isinstance(raw, str | Path):
        raise ValueError(f"memory.backend_config.storage_path: must be a path, got {raw!r}")
    path = Path(raw).expanduser() if raw else home
    path = (path if path.is_absolute() else home / path).resolve()
    existing = next(parent for parent in (path, *path.parents) if parent.exists())
    if not existing.is_dir():
        where = "" if existing == path else f" (its parent {str(existing)!r} is)"
        raise ValueError(
            f"memory.backend_config.storage_path: {str(path)!r} is a file, not a directory{where}"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(
            f"memory.backend_config.storage_path: {str(existing)!r} is not writable, so "
            f"{str(path)!r} cannot hold memory"
        )
    return {**backend_config, "storage_path": str(path)}


def build_memory_manager(
    config: AppConfig | MemoryConfig,
    *,
    home: Path | None = None,
    host_hooks: HostHooks | None = None,
) -> MemoryManager:
    """Resolve the configured backend and construct it through its `from_config`.

    Given the whole `AppConfig`, the backend gets the host's hooks (`default_host_hooks`): the
    first of `models:` for extraction, tracing, metrics; so `build_memory_manager(load_config())`
    learns with the configured model. Given only its `memory:` block, the backend gets
    `host_hooks` and nothing else: without a model of its own it cannot extract.

    Raises:
        ValueError: an unusable `manager_class` or `storage_path`, or the backend refused its
            configuration (including `mode: tool` for a backend without `search()`).
    """
    # Imported here: the loader brings in PyYAML, which a backend imported alone never needs.
    from deerflow.config.loader import runtime_home
    from deerflow.config.schema import AppConfig

    if isinstance(config, AppConfig):
        memory = config.memory
        host_hooks = default_host_hooks(config) if host_hooks is None else host_hooks
    else:
        memory = config
    cls = resolve_manager_class(memory.manager_class)
    check_contract(cls, memory.mode)  # before from_config: a class can be refused unbuilt
    backend_config = resolve_storage_path(memory.backend_config, home or runtime_home())
    manager = cls.from_config(backend_config, mode=memory.mode, **(host_hooks or {}))
    logger.info("memory backend %s built (mode %s)", cls.__name__, memory.mode)
    return manager


def get_memory_manager(config: AppConfig | None = None) -> MemoryManager:
    """The process's memory manager, built on first use (thread-safe).

    `config` matters only on the first call; later calls return the same manager until
    `reset_memory_manager()`. Without `config`, `config.yaml` is loaded.
    """
    from deerflow.config.loader import load_config  # see build_memory_manager

    global _manager
    if _manager is None:
        with _manager_lock:
            if _manager is None:
                _manager = build_memory_manager(config or load_config())
    return _manager


def reset_memory_manager() -> None:
    """Drop the process's manager after closing it; the next `get_memory_manager()` builds anew."""
    global _manager
    with _manager_lock:
        manager, _manager = _manager, None
    if manager is not None:
        manager.close()


def memory_read_failures_are_fatal(memory: MemoryConfig) -> bool:
    """Whether a failed memory read must end the turn, asked of the backend class, not an instance.

    A class that cannot be resolved counts as fatal: its reads cannot succeed either.
    """
    try:
        cls = resolve_manager_class(memory.manager_class)
    except ValueError:
        return True
    return cls.read_failures_are_fatal_for_config(memory.backend_config)
