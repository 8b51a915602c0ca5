"""The `mem0` backend: mem0's engine in-process (`transport: local`) or its REST API (`http`).

Importing this package needs neither mem0ai nor a server: `transport: local` imports mem0 when a
manager is built (and names the `mem0` extra when it is missing); `transport: http` uses httpx.
"""

from deerflow.agents.memory.backends.mem0.manager import Mem0MemoryManager

MANAGER_CLASS = Mem0MemoryManager

__all__ = ["MANAGER_CLASS", "Mem0MemoryManager"]
