"""Request and response shapes of the HTTP API, with the examples shown in the OpenAPI document.

Responses are the manager's own return values; these models describe them (extra keys allowed,
since backends may add their own) and are not used to filter what the manager returned.
"""

from __future__ import annotations

from typing import Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deerflow.agents.memory.manager import FACT_CATEGORIES, MAX_TEXT_CHARS

__all__ = [
    "ERROR_EXAMPLES",
    "Category",
    "Change",
    "DeletedFact",
    "ErrorBody",
    "Fact",
    "FactCreate",
    "FactPatch",
    "History",
    "MemoryDocument",
    "MergedFact",
    "SearchResults",
    "Status",
    "SummaryPart",
    "SummarySection",
    "SummaryUpdate",
    "WrittenFact",
    "error_responses",
]

Category = Literal[FACT_CATEGORIES]  # type: ignore[valid-type]  # a tuple of literals
# The names of `SUMMARY_SECTIONS`, spelled out so that they are types (a test keeps them equal).
SummaryPart = Literal["user", "history"]
SummarySection = Literal[
    "workContext",
    "personalContext",
    "topOfMind",
    "recentMonths",
    "earlierContext",
    "longTermBackground",
]

_STAMP: Final = "2026-03-01T09:30:00Z"
FACT_EXAMPLE: Final[dict[str, Any]] = {
    "id": "fact_7a07c35f1e9d443db35c3ebdc5f16ddc",
    "content": "Prefers tea over coffee",
    "category": "preference",
    "confidence": 0.9,
    "createdAt": _STAMP,
    "updatedAt": _STAMP,
    "source": "manual",
}
_SECTION: Final = {"summary": "", "updatedAt": _STAMP}
DOCUMENT_EXAMPLE: Final[dict[str, Any]] = {
    "version": "2.0",
    "revision": 3,
    "lastUpdated": _STAMP,
    "user": {
        "workContext": {"summary": "Data engineer at a logistics firm", "updatedAt": _STAMP},
        "personalContext": _SECTION,
        "topOfMind": _SECTION,
    },
    "history": {
        "recentMonths": _SECTION,
        "earlierContext": _SECTION,
        "longTermBackground": _SECTION,
    },
    "facts": [FACT_EXAMPLE],
}
CHANGE_EXAMPLE: Final[dict[str, Any]] = {
    "change_id": "chg_55f62d42ae1d484fb0530909f4078c5a",
    "at": _STAMP,
    "actor": "manual",
    "reason": "delete_fact",
    "revision": 4,
    "reverts": None,
    "before": {"summaries": {}, "facts": [FACT_EXAMPLE]},
    "after": {"summaries": {}, "facts": []},
}


class _Open(BaseModel):
    """A backend's answer: the keys below are promised, others may come along."""

    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    """Every error answer."""

    error: str = Field(description="A stable code to branch on, e.g. `fact_not_found`.")
    detail: str = Field(description="What went wrong, for people.")

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"error": "fact_not_found", "detail": "Fact not found"}]}
    )


class Fact(_Open):
    id: str
    content: str
    category: str
    confidence: float
    createdAt: str | None = None
    updatedAt: str | None = None
    source: Any = None

    model_config = ConfigDict(json_schema_extra={"examples": [FACT_EXAMPLE]})


_REVISION_AFTER: Final = (
    "The memory's revision after this write (a later one if another writer committed since): "
    "the `expected_revision` of a next write based on this answer."
)


class WrittenFact(Fact):
    """A fact as a write left it, with the memory's revision after the write."""

    revision: int | None = Field(default=None, description=_REVISION_AFTER)

    model_config = ConfigDict(json_schema_extra={"examples": [FACT_EXAMPLE | {"revision": 4}]})


class MemoryDocument(_Open):
    """Summaries of the user plus the facts of one agent bucket."""

    version: str | None = None
    revision: int | None = None
    lastUpdated: str | None = None
    user: dict[str, Any] = {}
    history: dict[str, Any] = {}
    facts: list[Fact] = []

    model_config = ConfigDict(json_schema_extra={"examples": [DOCUMENT_EXAMPLE]})


class FactCreate(BaseModel):
    """A fact to store."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"content": "Prefers tea over coffee", "category": "preference", "confidence": 0.9}
            ]
        },
    )

    content: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    category: Category = "context"
    confidence: float = Field(default=0.5, ge=0, le=1, strict=True)  # not true, not "0.5"


class FactPatch(BaseModel):
    """The fields to change; those left out stay as they are. At least one is required."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"content": "Prefers green tea"}], "minProperties": 1},
    )

    content: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT_CHARS)
    category: Category | None = None
    confidence: float | None = Field(default=None, ge=0, le=1, strict=True)

    @model_validator(mode="after")
    def _changes_something(self) -> Self:
        if self.content is None and self.category is None and self.confidence is None:
            raise ValueError("nothing to change: send content, category or confidence")
        return self


class SummaryUpdate(BaseModel):
    """The new text of one summary section; empty text empties the section."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"text": "Data engineer on the logistics platform"}]},
    )

    text: str = Field(max_length=MAX_TEXT_CHARS)


class MergedFact(BaseModel):
    """`POST /api/memory/facts` when the backend folded the content into an existing fact."""

    merged: Literal[True] = True
    detail: str
    revision: int | None = Field(default=None, description=_REVISION_AFTER)


class DeletedFact(BaseModel):
    deleted: str = Field(examples=[FACT_EXAMPLE["id"]])
    revision: int | None = Field(default=None, description=_REVISION_AFTER, examples=[5])


class SearchResults(BaseModel):
    query: str
    results: list[Fact] = Field(description="Best first; each fact may carry a `score`.")

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"query": "tea", "results": [FACT_EXAMPLE]}]}
    )


class Change(_Open):
    """One audit-log entry."""

    change_id: str
    at: str | None = None
    actor: str | None = None
    reason: str | None = None

    model_config = ConfigDict(json_schema_extra={"examples": [CHANGE_EXAMPLE]})


class History(BaseModel):
    changes: list[Change] = Field(description="Newest first.")


class Status(BaseModel):
    """What this server runs, and what the backend can do (the page hides the rest)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "enabled": True,
                    "ready": True,
                    "backend": "DeerMemMemoryManager",
                    "manager_class": "deermem",
                    "mode": "middleware",
                    "auth_mode": "token",
                    "user": "alice",
                    "supports": {"search": True, "export_markdown": True},
                    "agents": ["researcher"],
                }
            ]
        }
    )

    enabled: bool = Field(description="`memory.enabled`; false: every memory route answers 503.")
    ready: bool = Field(description="The backend is built and warmed.")
    backend: str | None = Field(description="The backend class, None when memory is off.")
    manager_class: str
    mode: str
    auth_mode: str
    user: str = Field(description="Who the request was made as.")
    supports: dict[str, bool] = Field(
        description="Optional operation → whether the backend has it (else that route is 501)."
    )
    agents: list[str] = Field(
        description="Agent buckets known: configured agents and buckets holding facts."
    )


ERROR_EXAMPLES: Final[dict[int, tuple[str, str]]] = {
    400: ("invalid_input", "agent_name: '../x' must match ^[A-Za-z0-9-][A-Za-z0-9_-]*$ (...)"),
    401: ("unauthorized", "missing bearer token: send 'Authorization: Bearer <token>'"),
    403: ("cross_origin", "a write from another origin is refused"),
    404: ("fact_not_found", "Fact not found: fact_0123abcd"),
    409: ("duplicate_fact", "a fact with this content exists: fact_0123abcd"),
    413: ("too_large", "the upload is larger than 16 MiB"),
    415: ("unsupported_media_type", "send application/json or multipart/form-data"),
    422: ("validation_error", "body.confidence: Input should be less than or equal to 1"),
    500: ("corruption", "stored memory cannot be read; ..."),
    501: ("unsupported", "Memory backend 'NoopMemoryManager' does not support 'get_memory'."),
    503: ("not_ready", "the memory backend is still warming up; retry shortly"),
}

# Every /api route can answer these: auth, origin checks, request shape, readiness, the unknown.
COMMON_ERRORS: Final = (401, 403, 422, 500, 503)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route: the common errors plus `statuses`, each with an example."""
    return {
        status: {
            "model": ErrorBody,
            "content": {
                "application/json": {
                    "example": {
                        "error": ERROR_EXAMPLES[status][0],
                        "detail": ERROR_EXAMPLES[status][1],
                    }
                }
            },
        }
        for status in sorted({*COMMON_ERRORS, *statuses})
    }
