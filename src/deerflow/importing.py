"""Import an object named by a dotted path, in either spelling: `pkg.mod:Name` or `pkg.mod.Name`."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["import_object", "looks_like_object_path"]


def looks_like_object_path(path: str) -> bool:
    """Whether `path` has the shape of `pkg.mod:Name` or `pkg.mod.Name`."""
    return ":" in path or "." in path


def import_object(path: str) -> Any:
    """Import and return the object that `path` names.

    `pkg.mod:Outer.Inner` splits at the colon; `pkg.mod.Name` splits at the last dot.

    Raises:
        ImportError: the module cannot be imported, or it has no such attribute. The message
            says which.
    """
    if ":" in path:
        module_name, _, attribute = path.partition(":")
    else:
        module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise ImportError(f"{path!r} is not of the form 'pkg.mod:Name' or 'pkg.mod.Name'")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ImportError(
            f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ImportError(f"module {module_name!r} has no attribute {attribute!r}") from None
    return target
