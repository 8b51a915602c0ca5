"""Unknown `backend_config` keys: warned about once with a did-you-mean, or refused when strict.

DeerFlow's documented blocks carry keys a backend here may not have (`token_counting`,
`retrieval_adapter`, …), and DeerFlow ignores unknown keys with a warning; so does every backend
here. `backend_config.strict: true` turns each unknown key into an error instead, for operators
who want a typo to stop the start.
"""

from __future__ import annotations

import difflib
import logging
import threading
import types
import typing
from collections.abc import Mapping
from typing import Any, Final

from pydantic import AliasChoices, BaseModel
from pydantic.fields import FieldInfo

__all__ = ["STRICT_KEY", "drop_unknown_keys"]

logger = logging.getLogger(__name__)

# The switch lives in `backend_config` itself, beside the keys it judges, so that it works the
# same for every backend and for a manager built from Python without a config.yaml.
STRICT_KEY: Final = "strict"

_warned: set[str] = set()
_warned_lock = threading.Lock()


def drop_unknown_keys(
    model: type[BaseModel], backend_config: Mapping[str, Any], prefix: str
) -> dict[str, Any]:
    """`backend_config` without `strict` and without the keys `model` does not know (nested too).

    Raises:
        ValueError: `strict` is not a boolean, or it is true and unknown keys are present; one
            line per key, `prefix.key: …`, with a did-you-mean when a known key is close.
    """
    data = dict(backend_config)
    strict = data.pop(STRICT_KEY, False)
    if not isinstance(strict, bool):
        raise ValueError(f"{prefix}.{STRICT_KEY}: must be true or false (got {strict!r})")
    unknown: list[str] = []
    cleaned = _known_only(model, data, prefix, unknown)
    if strict and unknown:
        raise ValueError(
            "\n".join(f"{line}; refused because {prefix}.{STRICT_KEY} is true" for line in unknown)
        )
    for line in unknown:
        with _warned_lock:
            if line in _warned:
                continue
            _warned.add(line)
        logger.warning("%s; it is ignored", line)
    return cleaned


def _known_only(
    model: type[BaseModel], data: dict[str, Any], prefix: str, unknown: list[str]
) -> dict[str, Any]:
    names = _field_names(model)
    cleaned: dict[str, Any] = {}
    for key, value in data.items():
        field = names.get(str(key))
        if field is None:
            close = _closest(str(key), list(names))
            hint = f" (did you mean {close!r}?)" if close else ""
            unknown.append(f"{prefix}.{key}: unknown key{hint}")
            continue
        nested = _nested_model(field)
        if nested is not None and isinstance(value, dict):
            value = _known_only(nested, value, f"{prefix}.{key}", unknown)
        cleaned[key] = value
    return cleaned


def _closest(key: str, names: list[str]) -> str | None:
    """The known name `key` most likely misspells: a close match, else one it abbreviates."""
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if close:
        return close[0]
    longer = sorted(name for name in names if name.startswith(key))
    return longer[0] if longer else None


def _field_names(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """Every spelling `model` accepts for a key: the field name, its alias, its alias choices."""
    names: dict[str, FieldInfo] = {}
    for name, field in model.model_fields.items():
        names[name] = field
        if field.alias:
            names[field.alias] = field
        if isinstance(field.validation_alias, AliasChoices):
            names.update((c, field) for c in field.validation_alias.choices if isinstance(c, str))
        elif isinstance(field.validation_alias, str):
            names[field.validation_alias] = field
    return names


def _nested_model(field: FieldInfo) -> type[BaseModel] | None:
    """The section model of a field (`X` or `X | None`) whose unknown keys are checked too."""
    annotation = field.annotation
    candidates = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    for candidate in candidates:
        if (
            isinstance(candidate, type)
            and issubclass(candidate, BaseModel)
            and candidate.model_config.get("extra") != "allow"
        ):
            return candidate
    return None
