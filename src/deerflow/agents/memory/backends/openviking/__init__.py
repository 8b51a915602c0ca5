"""The `openviking` backend: memory in an OpenViking server (extra `openviking`, AGPL-3.0).

Importing this package needs nothing beyond DeerFlow; building the manager needs the extra.
"""

from deerflow.agents.memory.backends.openviking.manager import OpenVikingMemoryManager

MANAGER_CLASS = OpenVikingMemoryManager

__all__ = ["MANAGER_CLASS", "OpenVikingMemoryManager"]
