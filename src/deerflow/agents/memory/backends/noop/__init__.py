"""The `noop` backend: remembers nothing. Copy this folder to start a new backend."""

from deerflow.agents.memory.backends.noop.manager import NoopMemoryManager

MANAGER_CLASS = NoopMemoryManager

__all__ = ["MANAGER_CLASS", "NoopMemoryManager"]
