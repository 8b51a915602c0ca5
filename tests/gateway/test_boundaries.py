"""The gateway reaches memory through the contract only, never a backend's internals."""

from __future__ import annotations

from pathlib import Path

import deerflow.gateway
from tests.deermem.test_boundaries import imported_modules

ALLOWED = {"deerflow.agents.memory.manager", "deerflow.agents.memory.extensions"}


def test_the_gateway_never_imports_a_backend() -> None:
    package = Path(deerflow.gateway.__file__).parent
    modules = {path.name: imported_modules(path) for path in package.glob("*.py")}
    assert "memory_routes.py" in modules
    offenders = {
        f"{name}: {module}"
        for name, imported in modules.items()
        for module in imported
        if module.startswith("deerflow.agents.memory.") and module not in ALLOWED
    }
    assert not offenders
