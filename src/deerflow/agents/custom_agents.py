"""Custom agents: folders `{home}/agents/{name}/` holding `config.yaml` and an optional `SOUL.md`.

`config.yaml` picks the agent's model and MCP servers (every key is optional; an empty file is a
valid agent); `SOUL.md` is prose added to the lead agent's system prompt: the agent's persona
and instructions. The folder name is the agent's name, which is also its memory bucket.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pydantic import Field

from deerflow.agents.context import AGENT_NAME, checked_agent_name
from deerflow.config.loader import ConfigError, interpolate, read_yaml, warn_unknown_keys
from deerflow.config.schema import ConfigSection
from deerflow.validation import parse_model

__all__ = ["AGENTS_DIR", "AgentConfig", "CustomAgent", "list_agents", "load_agent"]

AGENTS_DIR: Final = "agents"
CONFIG_FILE: Final = "config.yaml"
SOUL_FILE: Final = "SOUL.md"


class AgentConfig(ConfigSection):
    """The keys of an agent's `config.yaml`."""

    description: str = Field(default="", description="One line about the agent.")
    model: str | None = Field(
        default=None, description="A name from `models:`; None: the default model."
    )
    mcp_servers: list[str] | None = Field(
        default=None, description="Names from `mcp_servers:`; None: all of them."
    )


@dataclass(frozen=True)
class CustomAgent:
    """One custom agent as found on disk."""

    name: str
    config: AgentConfig
    soul: str


def agents_root(home: Path) -> Path:
    return home / AGENTS_DIR


def list_agents(home: Path) -> list[str]:
    """The names of the custom agents under `home`, sorted."""
    root = agents_root(home)
    if not root.is_dir():
        return []
    return sorted(
        entry.name
        for entry in root.iterdir()
        if entry.is_dir() and AGENT_NAME.fullmatch(entry.name) and (entry / CONFIG_FILE).is_file()
    )


def load_agent(name: str, home: Path, environ: Mapping[str, str] | None = None) -> CustomAgent:
    """Read the agent `name` from `{home}/agents/{name}/`.

    Raises:
        ValueError: `name` is not 1-64 letters, digits, `_` or `-`, or there is no such agent
            (the message lists the agents there are).
        ConfigError: its `config.yaml` is unreadable or invalid (the message names the file and
            the key), or `SOUL.md` cannot be read.
    """
    checked_agent_name(name)
    folder = agents_root(home) / name
    config_path = folder / CONFIG_FILE
    if not config_path.is_file():
        known = ", ".join(list_agents(home)) or "none"
        raise ValueError(f"no agent {name!r}: {config_path} does not exist (agents: {known})")
    raw = read_yaml(config_path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{config_path}: the top level must be a mapping")
    env = os.environ if environ is None else environ
    try:
        config = parse_model(AgentConfig, interpolate(raw, env), "")
    except ValueError as exc:
        raise ConfigError.at(config_path, str(exc)) from None
    warn_unknown_keys(config, str(config_path))
    soul_path = folder / SOUL_FILE
    try:
        soul = soul_path.read_text(encoding="utf-8").strip() if soul_path.is_file() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{soul_path}: cannot read: {exc}") from exc
    return CustomAgent(name=name, config=config, soul=soul)
