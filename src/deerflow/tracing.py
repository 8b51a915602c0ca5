"""The current request's trace id, carried in a context variable across threads and tasks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["current_trace_id", "trace_context"]

_trace_id: ContextVar[str | None] = ContextVar("deerflow_trace_id", default=None)


def current_trace_id() -> str | None:
    """The trace id bound by the innermost `trace_context`, or None."""
    return _trace_id.get()


@contextmanager
def trace_context(trace_id: str | None) -> Iterator[None]:
    """Bind `trace_id` for the code inside the block (a worker thread binds it again)."""
    token = _trace_id.set(trace_id)
    try:
        yield
    finally:
        _trace_id.reset(token)
