"""The four memory tools, independent of how they are served (tool mode, MCP).

Each tool is a `MemoryToolSpec`: a name, a description for the model, a pydantic argument schema
(the documented arguments, nothing else: identity is never an argument) and a function of
`(manager, scope, arguments)`. `call_memory_tool` validates raw arguments and runs the tool; it
never raises: every failure comes back as `{"error": code, "detail": text}`, with the codes of
the HTTP API. The LangChain tools (`memory_tools`) and the MCP server (`deerflow.mcp_server`)
are thin skins over it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
)

from deerflow.agents.memory.manager import (
    FACT_CATEGORIES,
    DuplicateFactError,
    FactEvictedError,
    FactNotFoundError,
    MemoryAccessError,
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManager,
    MemoryReadError,
    MemoryUnsupportedError,
)
from deerflow.validation import describe_validation_error

__all__ = [
    "MEMORY_TOOL_NAMES",
    "MEMORY_TOOL_SPECS",
    "MemoryAddArgs",
    "MemoryDeleteArgs",
    "MemoryScope",
    "MemorySearchArgs",
    "MemoryToolSpec",
    "MemoryUpdateArgs",
    "call_memory_tool",
]

logger = logging.getLogger(__name__)

# One category list for validation and for the schema the model sees.
Category = Annotated[
    str,
    AfterValidator(lambda value: _known_category(value)),
    WithJsonSchema({"type": "string", "enum": list(FACT_CATEGORIES)}),
]


def _known_category(value: str) -> str:
    if value not in FACT_CATEGORIES:
        raise ValueError(f"must be one of {', '.join(FACT_CATEGORIES)}")
    return value


MAX_SEARCH_LIMIT: Final = 50
# What a fact looks like to the model: enough to cite, update or delete it.
_FACT_KEYS: Final = ("id", "content", "category", "confidence", "updatedAt", "score")


@dataclass(frozen=True, slots=True)
class MemoryScope:
    """Whose memory a tool call reaches: fixed by the host, never by the tool's arguments."""

    user_id: str
    agent_name: str | None = None


class _Args(BaseModel):
    # Unknown arguments are refused, so a model that tries `user_id=…` is told so.
    model_config = ConfigDict(extra="forbid")


class MemorySearchArgs(_Args):
    query: str = Field(min_length=1, description="What to look for, in plain words.")
    category: Category | None = Field(
        default=None, description="Only facts of this category (omit to search all)."
    )
    limit: int = Field(
        default=10, ge=1, le=MAX_SEARCH_LIMIT, description="At most this many facts, best first."
    )


class MemoryAddArgs(_Args):
    content: str = Field(min_length=1, description="The fact, as one self-contained sentence.")
    category: Category = Field(default="context", description="What kind of fact it is.")
    confidence: float = Field(
        default=0.7, ge=0, le=1, description="How sure you are that it holds (0 to 1)."
    )


class MemoryUpdateArgs(_Args):
    fact_id: str = Field(min_length=1, description="The id of the fact to change.")
    content: str | None = Field(default=None, min_length=1, description="The new text.")
    category: Category | None = Field(default=None, description="The new category.")
    confidence: float | None = Field(default=None, ge=0, le=1, description="The new confidence.")


class MemoryDeleteArgs(_Args):
    fact_id: str = Field(min_length=1, description="The id of the fact to delete.")


@dataclass(frozen=True, slots=True)
class MemoryToolSpec:
    """One memory tool, whatever serves it."""

    name: str
    description: str
    args_schema: type[BaseModel]
    run: Callable[[MemoryManager, MemoryScope, Any], dict[str, Any]]


def _search(manager: MemoryManager, scope: MemoryScope, args: MemorySearchArgs) -> dict[str, Any]:
    found = manager.search(
        args.query,
        args.limit,
        user_id=scope.user_id,
        agent_name=scope.agent_name,
        category=args.category,
    )
    facts = [{key: fact[key] for key in _FACT_KEYS if key in fact} for fact in found]
    return {"facts": facts, "count": len(facts)}


def _add(manager: MemoryManager, scope: MemoryScope, args: MemoryAddArgs) -> dict[str, Any]:
    _, fact_id = manager.create_fact(
        args.content,
        args.category,
        args.confidence,
        user_id=scope.user_id,
        agent_name=scope.agent_name,
    )
    return {"status": "added", "fact_id": fact_id}


def _update(manager: MemoryManager, scope: MemoryScope, args: MemoryUpdateArgs) -> dict[str, Any]:
    if args.content is None and args.category is None and args.confidence is None:
        raise ValueError("nothing to update: give content, category or confidence")
    manager.update_fact(
        args.fact_id,
        args.content,
        args.category,
        args.confidence,
        user_id=scope.user_id,
        agent_name=scope.agent_name,
    )
    return {"status": "updated", "fact_id": args.fact_id}


def _delete(manager: MemoryManager, scope: MemoryScope, args: MemoryDeleteArgs) -> dict[str, Any]:
    manager.delete_fact(args.fact_id, user_id=scope.user_id, agent_name=scope.agent_name)
    return {"status": "deleted", "fact_id": args.fact_id}


MEMORY_TOOL_SPECS: Final[tuple[MemoryToolSpec, ...]] = (
    MemoryToolSpec(
        "memory_search",
        "Search long-term memory about the user (facts kept across conversations), best match "
        "first. Search before assuming something about the user is unknown.",
        MemorySearchArgs,
        _search,
    ),
    MemoryToolSpec(
        "memory_add",
        "Remember a durable fact about the user (a preference, a correction, lasting context) "
        "for future conversations. Not for passing details of this conversation or secrets.",
        MemoryAddArgs,
        _add,
    ),
    MemoryToolSpec(
        "memory_update",
        "Change a remembered fact by its id (from memory_search) when it is outdated or "
        "imprecise; prefer this to adding a near-duplicate.",
        MemoryUpdateArgs,
        _update,
    ),
    MemoryToolSpec(
        "memory_delete",
        "Forget a remembered fact by its id, only when it is clearly wrong or the user asks.",
        MemoryDeleteArgs,
        _delete,
    ),
)
MEMORY_TOOL_NAMES: Final = tuple(spec.name for spec in MEMORY_TOOL_SPECS)

# First match wins, so subclasses come before their bases.
_ERROR_CODES: Final[tuple[tuple[type[Exception], str], ...]] = (
    (FactNotFoundError, "fact_not_found"),
    (DuplicateFactError, "duplicate_fact"),
    (FactEvictedError, "fact_evicted"),
    (MemoryConflictError, "conflict"),
    (MemoryUnsupportedError, "unsupported"),
    (MemoryAccessError, "access_denied"),
    (MemoryReadError, "read_failed"),
    (ValueError, "invalid_input"),
)


def call_memory_tool(
    spec: MemoryToolSpec,
    manager: MemoryManager,
    scope: MemoryScope,
    arguments: Mapping[str, Any],
) -> dict[str, Any]:
    """Validate `arguments` and run the tool in `scope`; a JSON-able result, never an exception."""
    try:
        args = spec.args_schema.model_validate(dict(arguments))
    except ValidationError as exc:
        return {"error": "invalid_input", "detail": describe_validation_error(exc)}
    try:
        return spec.run(manager, scope, args)
    except MemoryCorruptionError:
        logger.exception("%s: stored memory of user %r is corrupt", spec.name, scope.user_id)
        return {"error": "corruption", "detail": "stored memory cannot be read"}
    except Exception as exc:
        code = next((code for kind, code in _ERROR_CODES if isinstance(exc, kind)), None)
        if code is None:
            logger.exception("%s failed for user %r", spec.name, scope.user_id)
            return {"error": "internal_error", "detail": "the memory backend failed; see its log"}
        result: dict[str, Any] = {"error": code, "detail": str(exc)}
        if isinstance(exc, DuplicateFactError) and exc.existing_fact_id:
            result["existing_fact_id"] = exc.existing_fact_id
        return result
