"""Turn pydantic validation errors into one-line messages that name the dotted key."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from deerflow.redaction import is_secret_key

__all__ = ["describe_validation_error", "dotted_path", "parse_model"]

ModelT = TypeVar("ModelT", bound=BaseModel)


def dotted_path(prefix: str, loc: tuple[int | str, ...]) -> str:
    """`("models", 0, "use")` under prefix "" → `models[0].use`."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


def describe_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line per problem, `dotted.key: what is wrong (got value)`; secret values never shown."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        key = dotted_path(prefix, loc)
        message = error["msg"].removeprefix("Value error, ")
        shown_key = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
        # A whole block (a model-level rule such as "the weights must sum to 1") is not echoed:
        # the message names its keys, and the block may hold credentials under any name.
        shown = error["type"] != "missing" and not isinstance(error["input"], dict)
        if shown and not is_secret_key(shown_key):
            message += f" (got {error['input']!r})"
        lines.append(f"{key}: {message}")
    return "\n".join(lines)


def parse_model(model: type[ModelT], data: Any, prefix: str) -> ModelT:
    """Validate `data` as `model`, raising `ValueError` whose text names each dotted key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValueError(describe_validation_error(exc, prefix)) from None
