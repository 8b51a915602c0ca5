"""The installed package's version, read from its metadata (one source: pyproject.toml)."""

from __future__ import annotations

import importlib.metadata
from typing import Final

__all__ = ["DISTRIBUTION", "package_version"]

DISTRIBUTION: Final = "deerflow-memory"


def package_version() -> str:
    """The version of the installed `deerflow-memory` distribution, e.g. `0.1.0`."""
    return importlib.metadata.version(DISTRIBUTION)
