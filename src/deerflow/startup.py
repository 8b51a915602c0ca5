"""What every command does before it serves: load config.yaml, check the models, build memory.

`deerflow serve`, `chat`, `demo`, `mcp` and `memory …` start through `load_checked` and
`build_checked`; `deerflow config check` runs the same two and closes what it built, so a file
it calls valid starts them all. Every problem is one line naming the config file and the key.
"""

from __future__ import annotations

import os
from pathlib import Path

from deerflow.agents.memory.manager import MemoryManager, build_memory_manager
from deerflow.config import AppConfig, ConfigError, load_config, resolve_config_path
from deerflow.models.factory import check_model_classes

__all__ = ["build_checked", "load_checked"]


def load_checked(path: str | os.PathLike[str] | None) -> tuple[AppConfig, Path]:
    """The validated configuration and the file it came from; every `models[].use` imports.

    Raises:
        ConfigError: one line per problem, `FILE: dotted.key: what is wrong`.
    """
    config = load_config(path)
    source, _ = resolve_config_path(path)
    try:
        check_model_classes(config)
    except ValueError as exc:
        raise ConfigError.at(source, str(exc)) from None
    return config, source


def build_checked(config: AppConfig, source: Path, *, home: Path | None = None) -> MemoryManager:
    """The configured memory backend, built with the host's hooks (its default model, tracing).

    Raises:
        ConfigError: the backend refused its configuration (its own keys, the mode, the
            storage location), one line per problem naming `source` and the key.
        MemoryManagerError: the backend's storage or server failed (not a `ValueError`, so it
            passes through as what it is).
    """
    try:
        return build_memory_manager(config, home=home)
    except ValueError as exc:
        raise ConfigError.at(source, str(exc)) from None
