"""DeerMem, the default backend: memory as Markdown files and JSON summaries, searched with FTS5."""

from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager

MANAGER_CLASS = DeerMemMemoryManager

__all__ = ["MANAGER_CLASS", "DeerMemMemoryManager"]
