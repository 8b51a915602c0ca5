"""The tool-mode tools under their documented import path: `get_memory_tools()` and their names.

They live in `deerflow.agents.tools.memory_tools`; this module is the documented way in.
"""

from deerflow.agents.tools.memory_tools import (
    MEMORY_TOOL_NAMES,
    add_memory_tools,
    get_memory_tools,
    tool_mode_prompt_section,
)

__all__ = ["MEMORY_TOOL_NAMES", "add_memory_tools", "get_memory_tools", "tool_mode_prompt_section"]
