"""The write policy shared by the end-of-run write and the summarisation flush.

A failed write is logged and the turn finishes, because the user's answer matters more than one
missed memory update (DeerMem, for one, hands the whole thread again on the next turn). A backend
whose `write_failures_are_fatal_for_config` is true (`failure_policy.write: raise`) asks for the
opposite: its error ends the turn.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from deerflow.agents.context import RunIdentity
from deerflow.agents.memory.manager import MemoryManager, MemoryManagerError

__all__ = ["memory_write", "thread_of"]

logger = logging.getLogger(__name__)


def thread_of(identity: RunIdentity, operation: str) -> str | None:
    """The thread id a write needs; None (with a warning) when the run has none."""
    if identity.thread_id is None:
        logger.warning(
            "memory %s skipped for user %r: the run has no thread id (pass "
            "config={'configurable': {'thread_id': ...}} or AgentContext(thread_id=...))",
            operation,
            identity.user_id,
        )
    return identity.thread_id


@contextmanager
def memory_write(manager: MemoryManager, identity: RunIdentity, operation: str) -> Iterator[None]:
    """Run the write inside the block under the backend's write policy: log, or let it raise."""
    try:
        yield
    except Exception as exc:
        if type(manager).write_failures_are_fatal_for_config(manager.backend_config):
            raise
        logger.error(
            "memory %s failed for user %r (thread %s); the turn goes on without it: %s",
            operation,
            identity.user_id,
            identity.thread_id,
            exc,
            exc_info=not isinstance(exc, MemoryManagerError),
        )
