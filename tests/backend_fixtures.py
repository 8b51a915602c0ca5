"""Helpers that install throwaway backends where the factory looks: a folder or a module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from deerflow.agents.memory import backends


def add_backend_folder(monkeypatch: pytest.MonkeyPatch, root: Path, name: str, source: str) -> None:
    """Make `source` the `__init__.py` of backend folder `name`, found like a built-in one."""
    folder = root / "extra_backends" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(source, encoding="utf-8")
    extra = str(root / "extra_backends")
    if extra not in backends.__path__:
        monkeypatch.setattr(backends, "__path__", [*backends.__path__, extra])
    monkeypatch.delitem(sys.modules, f"{backends.__name__}.{name}", raising=False)


def add_module(monkeypatch: pytest.MonkeyPatch, root: Path, name: str, source: str) -> None:
    """Make `source` importable as the top-level module `name`."""
    modules = root / "extra_modules"
    modules.mkdir(exist_ok=True)
    (modules / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(modules))
    monkeypatch.delitem(sys.modules, name, raising=False)
