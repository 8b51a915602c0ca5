"""The shape of a document `import_memory` accepts, checked whole before anything changes.

An import replaces a user's summaries and a bucket's facts, so a document of the wrong shape must
be refused rather than read as "nothing": `{"user": []}`, `{"history": 0}` or `{"facts": "x"}`
would otherwise import empty summaries and delete every fact. Each backend checks the facts
themselves (content, category, confidence and the keys it keeps) with the shared validators of
`document.py`; this module checks everything around them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from deerflow.agents.memory.document import HISTORY_SECTIONS, USER_SECTIONS, checked_text
from deerflow.validation import dotted_path

__all__ = ["ImportDocument", "parse_import_document"]

DOCUMENT_KEYS: Final = ("version", "revision", "lastUpdated", "userId", "user", "history", "facts")
_CONTENT_KEYS: Final = ("user", "history", "facts")
# Pydantic's wording for the mistakes an import document makes, in the words of the JSON it is.
_MESSAGES: Final = {
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "list_type": "must be a list",
    "string_type": "must be text",
    "int_type": "must be a whole number",
    "missing": "is required",
}
_SHOWN_INPUT: Final = 60


def _section_entry(value: Any) -> Any:
    """A section may be given as its summary text alone."""
    return {"summary": value} if isinstance(value, str) else value


class ImportedSection(BaseModel):
    """One summary section; other keys (an export's `updatedAt`, say) are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True, defer_build=True)

    summary: str = ""


_Section = Annotated[ImportedSection, BeforeValidator(_section_entry)]
UserSection = Literal[USER_SECTIONS]  # type: ignore[valid-type]  # a tuple of literals
HistorySection = Literal[HISTORY_SECTIONS]  # type: ignore[valid-type]


class ImportDocument(BaseModel):
    """A memory document as `export_memory` writes it. Missing sections import as empty."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    version: str | None = None
    # What the exported memory was at; informational, the import makes a new revision.
    revision: int | None = Field(default=None, ge=0)
    lastUpdated: str | None = None
    userId: str | None = None
    user: dict[UserSection, _Section] = {}
    history: dict[HistorySection, _Section] = {}
    facts: list[dict[str, Any]] = []

    def summaries(self) -> dict[str, dict[str, str]]:
        """Every summary section's text, checked as stored text; "" for a missing one.

        Raises:
            ValueError: `user.workContext.summary: ...` for text `checked_text` refuses.
        """
        return {
            "user": _texts("user", USER_SECTIONS, self.user),
            "history": _texts("history", HISTORY_SECTIONS, self.history),
        }


def _texts(
    part: str, names: tuple[str, ...], sections: Mapping[str, ImportedSection]
) -> dict[str, str]:
    texts = {}
    for name in names:
        section = sections.get(name)
        summary = section.summary if section is not None else ""
        try:
            texts[name] = checked_text(summary) if summary.strip() else ""
        except ValueError as exc:
            raise ValueError(f"{part}.{name}.summary: {exc}") from None
    return texts


def parse_import_document(data: Any) -> ImportDocument:
    """`data` checked as an import document, before anything is changed.

    Raises:
        ValueError: one line per problem naming the field (`user: must be an object (got [])`),
            or saying the document is not an object or holds none of user, history and facts.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"import: the document must be a JSON object, got {type(data).__name__}")
    try:
        document = ImportDocument.model_validate(dict(data))
    except ValidationError as exc:
        raise ValueError(_describe(exc)) from None
    if not document.model_fields_set & set(_CONTENT_KEYS):
        raise ValueError("import: the document has none of user, history and facts")
    return document


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        loc = tuple(part for part in error["loc"] if part != "[key]")
        message = _MESSAGES.get(error["type"], error["msg"])
        if error["type"] == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}; a memory document has {', '.join(DOCUMENT_KEYS)}"
            loc = ()
        elif error["type"] != "missing":
            shown = repr(error["input"])
            if len(shown) > _SHOWN_INPUT:
                shown = shown[: _SHOWN_INPUT - 1] + "…"
            message += f" (got {shown})"
        lines.append(f"{dotted_path('', loc) or 'import'}: {message}")
    return "\n".join(lines)
