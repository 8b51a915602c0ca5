"""OpenViking memories as DeerFlow sees them: injection text and search-result fact dicts."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any, Final

from langchain_core.documents import Document

__all__ = ["INJECTION_QUERY", "as_facts", "render_context"]

# get_context without a query (no user text yet) still needs one to rank memories by.
INJECTION_QUERY: Final = (
    "user profile preferences important entities events ongoing goals constraints and prior "
    "decisions"
)
# OpenViking's memory directories under viking://user/memories/, and the DeerFlow category each
# corresponds to; anything else is "other".
_CATEGORIES: Final = {
    "profile": "identity",
    "preferences": "preference",
    "entities": "knowledge",
    "events": "context",
    "cases": "knowledge",
    "patterns": "behavior",
}
_MIN_CUT_LINE: Final = 16  # a last line shorter than this after cutting says nothing


def render_context(documents: Sequence[Document], max_chars: int) -> str:
    """`- [category] memory` lines, best first, deduplicated, within `max_chars`.

    `<`, `>` and `&` are escaped so that a stored memory cannot close the host's `<memory>` block.
    The first line that does not fit is cut with "…" when enough room is left, and ends the text.
    """
    text = ""
    seen: set[str] = set()
    for document in documents:
        content = _collapse(document.page_content)
        if not content or content.casefold() in seen:
            continue
        seen.add(content.casefold())
        label = _openviking_category(document) or "memory"
        line = html.escape(f"- [{label}] {content}", quote=False)
        joined = f"{text}\n{line}" if text else line
        if len(joined) <= max_chars:
            text = joined
            continue
        room = max_chars - len(text) - (1 if text else 0)
        if room >= _MIN_CUT_LINE:
            text = f"{text}\n{line[: room - 1]}…" if text else f"{line[: room - 1]}…"
        break
    return text


def as_facts(documents: Sequence[Document]) -> list[dict[str, Any]]:
    """Search results as fact dicts: the URI is the id, the score the confidence."""
    facts = []
    for document in documents:
        meta = document.metadata
        score = float(meta.get("openviking_score") or 0.0)
        facts.append(
            {
                "id": str(meta.get("openviking_uri") or ""),
                "content": _collapse(document.page_content),
                "category": _CATEGORIES.get(_openviking_category(document) or "", "other"),
                "confidence": min(max(score, 0.0), 1.0),
                # find() reports no times; "" says unknown rather than inventing one.
                "createdAt": "",
                "updatedAt": "",
                "source": "openviking",
                "openvikingCategory": _openviking_category(document),
                "score": score,
            }
        )
    return facts


def _openviking_category(document: Document) -> str | None:
    """The item's category, else its directory under `viking://user/memories/`."""
    category = document.metadata.get("openviking_category")
    if isinstance(category, str) and category:
        return category
    uri = str(document.metadata.get("openviking_uri") or "")
    _, found, rest = uri.partition("/memories/")
    directory, slash, _ = rest.partition("/")
    return directory if found and slash and directory else None


def _collapse(text: str) -> str:
    return " ".join(text.split())
