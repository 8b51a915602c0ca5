"""Build a LangChain chat model from a `models:` entry (`use: pkg.mod:Class` plus its kwargs).

The one rule for which model runs: the named model, else the first configured one, else the
offline model (`OFFLINE_MODEL`), so that everything runs on a machine with no keys.
"""

from __future__ import annotations

from typing import Any, Final

from deerflow.config.schema import AppConfig, ModelConfig
from deerflow.importing import import_object
from deerflow.redaction import redact_text

__all__ = [
    "OFFLINE_MODEL",
    "PROVIDER_EXTRAS",
    "check_model_classes",
    "create_chat_model",
    "load_model_class",
    "model_entry",
    "uses_local_model",
]

# The model used when `models:` is empty: Gemma 3 270M on the CPU (the `local` extra).
OFFLINE_MODEL: Final = ModelConfig(name="offline", use="deerflow.models.local:LocalChatModel")


# The extra of this package that installs a model class's module, by module prefix.
PROVIDER_EXTRAS: Final = {
    "langchain_openai": "openai",
    "langchain_anthropic": "anthropic",
    "langchain_ollama": "ollama",
    "deerflow.models.local": "local",
}


def load_model_class(use: str, key: str) -> Any:
    """Import the class `use` names.

    Raises:
        ValueError: it cannot be imported; the message names `key` and, for a provider this
            package has an extra for, the command that installs it.
    """
    try:
        return import_object(use)
    except ImportError as exc:
        module = use.partition(":")[0] if ":" in use else use.rpartition(".")[0]
        extra = next(
            (
                name
                for prefix, name in PROVIDER_EXTRAS.items()
                if module == prefix or module.startswith(prefix + ".")
            ),
            None,
        )
        hint = (
            f"; install the `{extra}` extra: uv sync --extra {extra} "
            f"(or pip install 'deerflow-memory[{extra}]')"
            if extra
            else ""
        )
        raise ValueError(f"{key}: cannot load {use!r}: {exc}{hint}") from exc


def check_model_classes(config: AppConfig) -> None:
    """Import every `models[].use`, so that a missing provider stops startup, not a chat turn.

    Raises:
        ValueError: one line per class that cannot be imported, each naming `models[i].use`.
    """
    problems = []
    for index, entry in enumerate(config.models):
        try:
            load_model_class(entry.use, f"models[{index}].use")
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError("\n".join(problems))


def model_entry(config: AppConfig, name: str | None = None) -> ModelConfig:
    """The entry called `name`; without a name, the first configured one, else `OFFLINE_MODEL`.

    Raises:
        ValueError: no model has that name.
    """
    if name is None:
        return config.default_model() or OFFLINE_MODEL
    chosen = next((model for model in config.models if model.name == name), None)
    if chosen is None:
        known = ", ".join(model.name for model in config.models) or "none"
        raise ValueError(f"models: no model named {name!r} (configured: {known})")
    return chosen


def uses_local_model(entry: ModelConfig) -> bool:
    """Whether `entry` runs the offline model, which needs the `local` extra installed."""
    return entry.use.replace(":", ".") == OFFLINE_MODEL.use.replace(":", ".")


def create_chat_model(config: AppConfig, name: str | None = None) -> Any:
    """Construct the model `model_entry(config, name)` chooses.

    Raises:
        ValueError: no model has that name, or its class cannot be imported or constructed; the
            message names the `models[i]` entry.
    """
    entry = model_entry(config, name)
    key = f"models[{config.models.index(entry)}]" if entry in config.models else "offline model"
    cls = load_model_class(entry.use, f"{key}.use")
    try:
        return cls(**entry.constructor_kwargs())
    except Exception as exc:
        detail = redact_text(f"{type(exc).__name__}: {exc}")
        raise ValueError(f"{key}: constructing {entry.use} failed: {detail}") from exc
