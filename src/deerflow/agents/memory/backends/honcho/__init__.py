"""The `honcho` backend: memory kept by a Honcho v3 server, one workspace per user.

Needs the `honcho` extra (the honcho-ai SDK); without it, importing this package raises an
ImportError that names the extra, which the factory reports when `manager_class: honcho`.
"""

from deerflow.agents.memory.backends.honcho.manager import HonchoMemoryManager

MANAGER_CLASS = HonchoMemoryManager

__all__ = ["MANAGER_CLASS", "HonchoMemoryManager"]
