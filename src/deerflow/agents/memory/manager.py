"""The public face of the memory contract: import everything a backend or a host needs from here.

from deerflow.agents.memory.manager import MemoryManager, get_memory_manager
"""

from deerflow.agents.memory.base import MemoryManager, MemoryMode, parse_backend_config
from deerflow.agents.memory.callbacks import MemoryCallbacks
from deerflow.agents.memory.document import (
    FACT_CATEGORIES,
    Fact,
    MemoryDocument,
    empty_document,
    utc_now,
    validate_category,
    validate_confidence,
    validate_content,
)
from deerflow.agents.memory.errors import (
    DuplicateFactError,
    FactEvictedError,
    FactNotFoundError,
    MemoryAccessError,
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManagerError,
    MemoryReadError,
    MemoryUnsupportedError,
)
from deerflow.agents.memory.factory import (
    available_backends,
    build_memory_manager,
    get_memory_manager,
    memory_read_failures_are_fatal,
    reset_memory_manager,
    resolve_manager_class,
)
from deerflow.agents.memory.hooks import HostHooks, default_host_hooks
from deerflow.importing import import_object

__all__ = [
    "FACT_CATEGORIES",
    "DuplicateFactError",
    "Fact",
    "FactEvictedError",
    "FactNotFoundError",
    "HostHooks",
    "MemoryAccessError",
    "MemoryCallbacks",
    "MemoryConflictError",
    "MemoryCorruptionError",
    "MemoryDocument",
    "MemoryManager",
    "MemoryManagerError",
    "MemoryMode",
    "MemoryReadError",
    "MemoryUnsupportedError",
    "available_backends",
    "build_memory_manager",
    "default_host_hooks",
    "empty_document",
    "get_memory_manager",
    "import_object",
    "memory_read_failures_are_fatal",
    "parse_backend_config",
    "reset_memory_manager",
    "resolve_manager_class",
    "utc_now",
    "validate_category",
    "validate_confidence",
    "validate_content",
]
