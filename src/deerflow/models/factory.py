"""Build a LangChain chat model from a `models:` entry (`use: pkg.mod:Class` plus its kwargs)."""

from __future__ import annotations

from typing import Any

from deerflow.config.schema import AppConfig, ModelConfig
from deerflow.importing import import_object
from deerflow.redaction import redact_text

__all__ = ["create_chat_model"]


def create_chat_model(config: AppConfig, name: str | None = None) -> Any:
    """Construct the model called `name`, or the first configured one; None if none is configured.

    Raises:
        ValueError: no model has that name, or its class cannot be imported or constructed; the
            message names the `models[i]` entry.
    """
    if name is None:
        chosen = config.default_model()
        if chosen is None:
            return None
    else:
        chosen = next((model for model in config.models if model.name == name), None)
        if chosen is None:
            known = ", ".join(model.name for model in config.models) or "none"
            raise ValueError(f"models: no model named {name!r} (configured: {known})")
    return _construct(chosen, config.models.index(chosen))


def _construct(model: ModelConfig, index: int) -> Any:
    key = f"models[{index}]"
    try:
        cls = import_object(model.use)
    except ImportError as exc:
        raise ValueError(f"{key}.use: cannot load {model.use!r}: {exc}") from exc
    try:
        return cls(**model.constructor_kwargs())
    except Exception as exc:
        detail = redact_text(f"{type(exc).__name__}: {exc}")
        raise ValueError(f"{key}: constructing {model.use} failed: {detail}") from exc
