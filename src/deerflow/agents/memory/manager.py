"""The public face of the memory contract: import everything a backend or a host needs from here.

from deerflow.agents.memory.manager import MemoryManager, get_memory_manager
"""

from deerflow.agents.memory.base import (
    OPTIONAL_OPERATIONS,
    MemoryManager,
    MemoryMode,
    condition,
    parse_backend_config,
    provided_operations,
)
from deerflow.agents.memory.callbacks import MemoryCallbacks
from deerflow.agents.memory.conversation import (
    ConversationMessage,
    MessageRole,
    is_harness_message,
    is_hidden,
    is_memory_injection,
    read_message,
    strip_memory_blocks,
    strip_upload_blocks,
)
from deerflow.agents.memory.document import (
    FACT_CATEGORIES,
    MAX_TEXT_CHARS,
    SUMMARY_SECTIONS,
    Fact,
    MemoryDocument,
    check_revision,
    checked_text,
    empty_document,
    searchable_query,
    utc_now,
    validate_category,
    validate_confidence,
    validate_content,
    validate_summary_section,
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
from deerflow.agents.memory.hooks import HostHooks, default_host_hooks, keep_hidden_message
from deerflow.agents.memory.identity import (
    DEFAULT_USER,
    checked_id,
    checked_user_id,
    is_valid_unicode,
    slug_with_digest,
)
from deerflow.agents.memory.import_document import parse_import_document
from deerflow.agents.memory.secret_detector import find_secret
from deerflow.importing import import_object

__all__ = [
    "DEFAULT_USER",
    "FACT_CATEGORIES",
    "MAX_TEXT_CHARS",
    "OPTIONAL_OPERATIONS",
    "SUMMARY_SECTIONS",
    "ConversationMessage",
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
    "MessageRole",
    "available_backends",
    "build_memory_manager",
    "check_revision",
    "checked_id",
    "checked_text",
    "checked_user_id",
    "condition",
    "default_host_hooks",
    "empty_document",
    "find_secret",
    "get_memory_manager",
    "import_object",
    "is_harness_message",
    "is_hidden",
    "is_memory_injection",
    "is_valid_unicode",
    "keep_hidden_message",
    "memory_read_failures_are_fatal",
    "parse_backend_config",
    "parse_import_document",
    "provided_operations",
    "read_message",
    "reset_memory_manager",
    "resolve_manager_class",
    "searchable_query",
    "slug_with_digest",
    "strip_memory_blocks",
    "strip_upload_blocks",
    "utc_now",
    "validate_category",
    "validate_confidence",
    "validate_content",
    "validate_summary_section",
]
