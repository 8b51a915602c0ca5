"""Langfuse tracing of memory's LLM calls, through Langfuse's LangChain callback handler.

On when Langfuse has a public and a secret key, from `tracing.langfuse` in config.yaml or from
LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY (LANGFUSE_HOST for a self-hosted server). Each
extraction call then carries a handler, and the trace names the user (`langfuse_user_id`) and
the thread (`langfuse_session_id`). The SDK (the `langfuse` extra) sends in batches from a
background thread and at exit; `flush()` sends what is pending now.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from deerflow.agents.memory.callbacks import MemoryCallbacks
from deerflow.config.schema import LangfuseConfig

__all__ = ["LangfuseMemoryCallbacks", "langfuse_settings", "memory_callbacks"]

logger = logging.getLogger(__name__)

EXTRA: Final = "langfuse"
TAG: Final = "deerflow-memory"


class LangfuseSettings(NamedTuple):
    public_key: str
    secret_key: str
    host: str | None


def langfuse_settings(
    config: LangfuseConfig, environ: Mapping[str, str] | None = None
) -> LangfuseSettings | None:
    """Langfuse's keys and host, from the config block first, else the environment; None: off.

    Raises:
        ValueError: `tracing.langfuse` names a key in config.yaml but not the other.
    """
    env = os.environ if environ is None else environ
    if not config.enabled:
        return None
    public = config.public_key or env.get("LANGFUSE_PUBLIC_KEY") or None
    secret = config.secret_key or env.get("LANGFUSE_SECRET_KEY") or None
    host = config.host or env.get("LANGFUSE_HOST") or None
    if public and secret:
        return LangfuseSettings(public, secret, host)
    if config.public_key or config.secret_key:
        missing = "secret_key" if public else "public_key"
        raise ValueError(
            f"tracing.langfuse.{missing}: needed with the other key (or set "
            f"LANGFUSE_{missing.upper()})"
        )
    return None


class LangfuseMemoryCallbacks(MemoryCallbacks):
    """Adds a Langfuse LangChain handler, and the user and thread, to each memory LLM call."""

    def __init__(self, settings: LangfuseSettings) -> None:
        from langfuse import Langfuse
        from langfuse.langchain import CallbackHandler

        self._client = Langfuse(
            public_key=settings.public_key, secret_key=settings.secret_key, base_url=settings.host
        )
        self._handler = CallbackHandler
        self._public_key = settings.public_key

    def on_memory_llm_call(
        self,
        invoke_config: dict[str, Any],
        *,
        thread_id: str | None,
        user_id: str | None,
        trace_id: str | None,
        model_name: str | None,
    ) -> None:
        metadata = invoke_config.setdefault("metadata", {})
        if user_id is not None:
            metadata["langfuse_user_id"] = user_id
        if thread_id is not None:
            metadata["langfuse_session_id"] = thread_id
        metadata["langfuse_tags"] = [TAG]
        invoke_config.setdefault("callbacks", []).append(self._handler(public_key=self._public_key))

    def flush(self) -> None:
        """Send every pending trace now (the SDK also sends in the background and at exit)."""
        self._client.flush()


def memory_callbacks(config: LangfuseConfig) -> MemoryCallbacks:
    """Langfuse's callbacks when Langfuse is configured, else the do-nothing ones.

    Raises:
        ValueError: `tracing.langfuse` keys are in config.yaml but the `langfuse` extra is not
            installed (from the environment alone, that is a warning: the variables may be
            meant for another program).
    """
    settings = langfuse_settings(config)
    if settings is None:
        return MemoryCallbacks()
    if importlib.util.find_spec("langfuse") is None:
        message = (
            f"Langfuse is configured but the `{EXTRA}` extra is not installed: uv sync --extra "
            f"{EXTRA} (or pip install 'deerflow-memory[{EXTRA}]')"
        )
        if config.public_key or config.secret_key:
            raise ValueError(f"tracing.langfuse: {message}")
        logger.warning("LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY are set: %s", message)
        return MemoryCallbacks()
    return LangfuseMemoryCallbacks(settings)
