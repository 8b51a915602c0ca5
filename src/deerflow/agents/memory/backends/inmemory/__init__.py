"""The `inmemory` backend: a thread-safe, in-process reference implementing the whole contract."""

from deerflow.agents.memory.backends.inmemory.manager import InMemoryMemoryManager

MANAGER_CLASS = InMemoryMemoryManager

__all__ = ["MANAGER_CLASS", "InMemoryMemoryManager"]
