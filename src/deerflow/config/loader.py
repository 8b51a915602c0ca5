"""Load `config.yaml`: find it, interpolate `$VAR`, validate, warn about unknown keys."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from deerflow.config.schema import AppConfig, ConfigSection
from deerflow.validation import dotted_path, parse_model

__all__ = ["ConfigError", "load_config", "read_yaml", "resolve_config_path", "runtime_home"]

logger = logging.getLogger(__name__)

CONFIG_ENV = "DEER_FLOW_CONFIG"
HOME_ENV = "DEER_FLOW_HOME"
DEFAULT_CONFIG = Path("config.yaml")
DEFAULT_HOME = Path(".deer-flow")

# `$$` is a literal dollar; `${NAME}` and `$NAME` read the environment. Any other `${…}` (a
# shell default such as `${NAME:-x}`) is refused rather than kept as literal text.
_VARIABLE = re.compile(
    r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)|(\$\{[^}]*\}?)"
)

_warned_keys: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


class ConfigError(ValueError):
    """The configuration cannot be used; each line of the message names the file and the key."""

    @classmethod
    def at(cls, source: str | os.PathLike[str], problems: str) -> ConfigError:
        """One `source: problem` line per line of `problems`."""
        return cls("\n".join(f"{source}: {line}" for line in problems.splitlines() if line))


def resolve_config_path(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Path, bool]:
    """Return the config path and whether it was asked for explicitly (flag or environment)."""
    env = os.environ if environ is None else environ
    if path is not None:
        return Path(path), True
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]), True
    return DEFAULT_CONFIG, False


def runtime_home(environ: Mapping[str, str] | None = None) -> Path:
    """The data root: `$DEER_FLOW_HOME`, else `./.deer-flow`, as an absolute path."""
    env = os.environ if environ is None else environ
    return Path(env.get(HOME_ENV) or DEFAULT_HOME).expanduser().resolve()


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> AppConfig:
    """Read, interpolate and validate the configuration.

    A missing `./config.yaml` means defaults; a file named by `--config` or `$DEER_FLOW_CONFIG`
    must exist.

    Raises:
        ConfigError: unreadable YAML, an unset `$VAR`, or an invalid value; the message names
            the file and the dotted key.
    """
    env = os.environ if environ is None else environ
    config_path, explicit = resolve_config_path(path, env)
    if not config_path.exists():
        if explicit:
            raise ConfigError(f"{config_path}: config file not found")
        return AppConfig()
    return parse_config(read_yaml(config_path), env, source=str(config_path))


def read_yaml(path: Path) -> Any:
    """The YAML document in `path` (None for an empty file).

    Raises:
        ConfigError: the file cannot be read, or is not YAML; one line that names the file and,
            for a syntax error, the line and column where it stops making sense.
    """
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = "; ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError(f"{path}: not valid YAML: {where}{what}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from exc


def parse_config(raw: Any, environ: Mapping[str, str], *, source: str = "config") -> AppConfig:
    """Validate an already parsed YAML document (None means an empty file)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(raw).__name__}")
    try:
        config = parse_model(AppConfig, interpolate(raw, environ), "")
    except ValueError as exc:
        raise ConfigError.at(source, str(exc)) from None
    warn_unknown_keys(config, source)
    return config


def interpolate(value: Any, environ: Mapping[str, str], key: str = "") -> Any:
    """Replace `$NAME` / `${NAME}` in every string value (not in keys).

    Raises:
        ValueError: a referenced variable is unset; the message names the dotted key.
    """
    if isinstance(value, dict):
        return {k: interpolate(v, environ, dotted_path(key, (str(k),))) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, environ, dotted_path(key, (i,))) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(3) is not None:
            raise ConfigError(
                f"{key}: {match.group(3)!r} is not a variable reference: write ${{NAME}} or "
                "$NAME (no defaults), and $$ for a literal $"
            )
        name = match.group(1) or match.group(2)
        if name is None:
            return "$"
        if name not in environ:
            raise ConfigError(f"{key}: environment variable {name} is not set")
        return environ[name]

    return _VARIABLE.sub(substitute, value)


def unknown_keys(section: ConfigSection, prefix: str = "") -> list[str]:
    """Dotted paths of keys that no section of the schema knows."""
    found = [dotted_path(prefix, (key,)) for key in section.model_extra or {}]
    for name in type(section).model_fields:
        child = getattr(section, name)
        children = child.items() if isinstance(child, dict) else [(None, child)]
        for key, value in children:
            if isinstance(value, ConfigSection):
                path = (name,) if key is None else (name, str(key))
                found.extend(unknown_keys(value, dotted_path(prefix, path)))
    return found


def warn_unknown_keys(config: ConfigSection, source: str) -> None:
    """Log each unknown key of `source` once per process: a likely typo, never fatal."""
    for key in unknown_keys(config):
        with _warned_lock:
            if (source, key) in _warned_keys:
                continue
            _warned_keys.add((source, key))
        logger.warning("%s: unknown key %r is ignored (a typo?)", source, key)
