"""Observability hooks around the LLM calls a memory backend makes (extraction, consolidation)."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["MemoryCallbacks"]

logger = logging.getLogger(__name__)


class MemoryCallbacks:
    """Hooks called before and after each memory LLM call. The base class does nothing.

    Subclass and override what you need. A backend calls them through `notify_call` and
    `notify_result`, which isolate the host: an exception inside a callback is logged and never
    fails the memory operation.
    """

    def on_memory_llm_call(
        self,
        invoke_config: dict[str, Any],
        *,
        thread_id: str | None,
        user_id: str | None,
        trace_id: str | None,
        model_name: str | None,
    ) -> None:
        """Called before the LLM call; may add tracing metadata to `invoke_config` in place."""

    def on_memory_llm_result(
        self,
        invoke_config: dict[str, Any],
        *,
        prompt: str,
        response: str | None,
        error: BaseException | None,
        duration_ms: float,
        model_name: str | None,
    ) -> None:
        """Called after the LLM call, whether it succeeded (`response`) or failed (`error`)."""

    def notify_call(self, invoke_config: dict[str, Any], **kwargs: Any) -> None:
        """Run `on_memory_llm_call`, logging instead of raising if the hook fails."""
        try:
            self.on_memory_llm_call(invoke_config, **kwargs)
        except Exception:
            logger.exception("memory callback on_memory_llm_call failed; continuing")

    def notify_result(self, invoke_config: dict[str, Any], **kwargs: Any) -> None:
        """Run `on_memory_llm_result`, logging instead of raising if the hook fails."""
        try:
            self.on_memory_llm_result(invoke_config, **kwargs)
        except Exception:
            logger.exception("memory callback on_memory_llm_result failed; continuing")
