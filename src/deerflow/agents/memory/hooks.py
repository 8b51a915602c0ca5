"""The host capabilities offered to every backend's `from_config` as keyword arguments.

A backend takes the hooks it needs and ignores the rest, so it never imports the host.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, TypedDict

from deerflow.agents.memory.callbacks import MemoryCallbacks
from deerflow.tracing import trace_context

if TYPE_CHECKING:
    from deerflow.config.schema import AppConfig

__all__ = ["HostHooks", "default_host_hooks", "keep_hidden_message", "log_extraction_metrics"]

logger = logging.getLogger(__name__)

# The metadata flag a host sets on a hidden message that memory should still learn from.
KEEP_IN_MEMORY_FLAG: Final = "keep_in_memory"
# Above this share of rejected facts the extraction prompt or model is probably off.
REJECTION_WARNING_RATIO: Final = 0.6


class HostHooks(TypedDict, total=False):
    """Keyword arguments the host passes to `MemoryManager.from_config`."""

    callbacks: MemoryCallbacks
    host_llm_factory: Callable[[], Any]
    should_keep_hidden_message: Callable[[dict[str, Any]], bool]
    trace_context_manager: Callable[[str | None], AbstractContextManager[None]]
    extraction_callback: Callable[[dict[str, Any]], None]


def keep_hidden_message(additional_kwargs: dict[str, Any]) -> bool:
    """Keep a hidden message (`hide_from_ui`) only when the host flagged it `keep_in_memory`.

    Hidden messages are mostly the host's own injections (the `<memory>` block among them), and
    learning from those would feed memory back into itself.
    """
    return additional_kwargs.get(KEEP_IN_MEMORY_FLAG) is True


def log_extraction_metrics(payload: dict[str, Any]) -> None:
    """Log one extraction attempt; warn when most extracted facts were rejected."""
    extracted = int(payload.get("facts_extracted") or 0)
    passed = int(payload.get("facts_passed_confidence") or 0)
    logger.info("memory extraction: %s", payload)
    if extracted and (extracted - passed) / extracted > REJECTION_WARNING_RATIO:
        logger.warning(
            "memory extraction rejected %d of %d facts for low confidence (thread %s)",
            extracted - passed,
            extracted,
            payload.get("thread_id"),
        )


def default_host_hooks(config: AppConfig) -> HostHooks:
    """The hooks DeerFlow offers: its default chat model, tracing and metrics logging.

    Raises:
        ValueError: `tracing.langfuse` is configured in config.yaml but cannot be used.
    """
    # Imported here: the config models are the host's; a backend imported alone needs none.
    from deerflow.langfuse_tracing import memory_callbacks
    from deerflow.models.factory import create_chat_model

    return HostHooks(
        callbacks=memory_callbacks(config.tracing.langfuse),
        host_llm_factory=lambda: create_chat_model(config),
        should_keep_hidden_message=keep_hidden_message,
        trace_context_manager=trace_context,
        extraction_callback=log_extraction_metrics,
    )
