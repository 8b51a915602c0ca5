"""The text DeerMem injects into a prompt (SPEC §5.8), as a pure function of summaries and facts.

```
User Context:
- Work: …

History:
- Recent: …

Facts:
- [correction | 0.97] Use pnpm, not npm (avoid: used npm)
- [preference | 0.90] Prefers uv over pip
```

Budgeting, in priority order, all within `max_tokens`:

1. guaranteed facts (category in `guaranteed_categories`), in the given order, within
   `guaranteed_token_budget`; those that do not fit are dropped, not demoted to the regular pool;
2. summaries, user sections before history: when they do not fit, lines are dropped from the end,
   so history goes first;
3. the other facts, in the given order, in what is left.

Each pool is a prefix: the first line that does not fit ends it, later (shorter) lines are not
tried. A line costs `count_tokens(line + "\\n")`, a section header the same plus one blank line.
The header "Facts:" is charged to the total, not to the guaranteed budget.

These costs do not always add up to at least the real count: with cl100k, `!*\\` followed by one
newline is 1 token, followed by two it is 3, so a section ending in it costs more than charged.
The assembled text is therefore counted once more, and trimmed from the end until it fits. It is
counted piece by piece, each line with the newlines that follow it (`_pieces`), which for cl100k
is exactly the count of the whole text: its pre-tokenizer always ends a chunk after a run of
newlines followed by a visible character, which is where every piece ends, and BPE never merges
across chunks (a test checks the identity on random texts). So the check needs the counts of
lines, which a `TokenCache` can supply without loading the tokenizer. For the estimate the sum
is at least the whole count, so the bound holds there too.
"""

from __future__ import annotations

import functools
import html
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

# Re-exported: choosing which facts to inject (§5.7) belongs with formatting them.
from deerflow.agents.memory.backends.deermem.deermem.ranking import rank_for_query

__all__ = ["HISTORY_LABELS", "USER_LABELS", "ContextFact", "format_context", "rank_for_query"]

# The section keys of memory.json (SPEC §5.2) and their labels in the injected text.
USER_LABELS: Final = (
    ("workContext", "Work"),
    ("personalContext", "Personal"),
    ("topOfMind", "Current Focus"),
)
HISTORY_LABELS: Final = (
    ("recentMonths", "Recent"),
    ("earlierContext", "Earlier"),
    ("longTermBackground", "Background"),
)
# Headers and lines are kept with the newline that ends them.
_USER_HEADER: Final = "User Context:\n"
_HISTORY_HEADER: Final = "History:\n"
_FACTS_HEADER: Final = "Facts:\n"

_Section = tuple[str, list[str]]


@dataclass(frozen=True)
class ContextFact:
    """What the injected text shows of a fact."""

    content: str
    category: str
    confidence: float
    source_error: str | None = None

    @functools.cached_property
    def line(self) -> str | None:
        """The fact's line in the text with its newline, or None when its content is blank.

        Cached: the manager keeps one ContextFact per stored record, so a fact is formatted
        once, not at every render, and counting the line finds the string's hash kept.
        """
        content = _clean(self.content)
        if not content:
            return None
        confidence = self.confidence
        confidence = min(max(confidence, 0.0), 1.0) if math.isfinite(confidence) else 0.0
        line = f"- [{_clean(self.category)} | {confidence:.2f}] {content}"
        avoid = _clean(self.source_error or "")
        return f"{line} (avoid: {avoid})\n" if avoid else f"{line}\n"


def _clean(text: str) -> str:
    """One line of escaped text: stored memory must not break the list or close `<memory>`."""
    return html.escape(" ".join(text.split()), quote=False)


def _summary_lines(
    summaries: Mapping[str, object], key: str, labels: Sequence[tuple[str, str]]
) -> list[str]:
    part = summaries.get(key)
    if not isinstance(part, Mapping):
        return []
    lines = []
    for name, label in labels:
        section = part.get(name)
        summary = section.get("summary") if isinstance(section, Mapping) else None
        if isinstance(summary, str) and summary.strip():
            lines.append(f"- {label}: {_clean(summary)}\n")
    return lines


def _fit(
    lines: Iterable[str], budget: int, cost: Callable[[str], int], opening: int = 0
) -> tuple[list[str], int]:
    """The longest prefix of `lines` (each with its newline) that fits in `budget`, and its
    cost.

    `lines` may be lazy: nothing after the first line that does not fit is produced.

    `opening` (a section header) is charged together with the first line, so a header never
    appears without a line under it.
    """
    taken: list[str] = []
    spent = 0
    for line in lines:
        extra = cost(line) + (0 if taken else opening)
        if spent + extra > budget:
            break
        taken.append(line)
        spent += extra
    return taken, spent


def _lines(facts: Iterable[ContextFact]) -> Iterator[str]:
    return (line for fact in facts if (line := fact.line))


def _render(sections: Sequence[_Section]) -> str:
    text = "\n".join("".join([header, *lines]) for header, lines in sections if lines)
    return text[:-1]


def _pieces(sections: Sequence[_Section]) -> Iterator[str]:
    """`_render`'s text cut after each line: the line and the newlines that follow it."""
    shown = [[header, *lines] for header, lines in sections if lines]
    for number, section in enumerate(shown, 1):
        yield from section[:-1]
        yield (section[-1] + "\n") if number < len(shown) else section[-1][:-1]


def format_context(
    summaries: Mapping[str, object],
    facts: Iterable[ContextFact],
    *,
    max_tokens: int = 2000,
    guaranteed_categories: Sequence[str] = ("correction",),
    guaranteed_token_budget: int = 500,
    include_facts: bool = True,
    count_tokens: Callable[[str], int],
) -> str:
    """Format summaries and facts for injection, within `max_tokens` (see the module docstring).

    Args:
        summaries: the memory document, or a mapping with its `user` and `history` parts; other
            keys are ignored.
        facts: best first; facts with blank content are skipped. Read once, lazily.
        max_tokens: bound on the result's count, the sum of its pieces' (module docstring).
        guaranteed_categories: categories placed first, within `guaranteed_token_budget`.
        guaranteed_token_budget: token budget of the guaranteed lines.
        include_facts: False in tool mode, where facts come through `memory_search`.
        count_tokens: the token counter the budget is measured with; the bound is exact
            for counters whose count of a text is at most the sum over its pieces.

    Returns:
        The text, or "" when there is nothing to inject.
    """

    def header_cost(header: str) -> int:
        return count_tokens(header) + count_tokens("\n")

    user_pool = _summary_lines(summaries, "user", USER_LABELS)
    history_pool = _summary_lines(summaries, "history", HISTORY_LABELS)
    # Facts are read, and their lines formatted, only until the budget is spent: a full bucket
    # has far more facts than fit. Each pool reads the facts as far as it needs; `tee` keeps
    # those one has read and the other has not.
    for_guaranteed, for_regular = itertools.tee(facts if include_facts else ())
    special = frozenset(guaranteed_categories)
    guaranteed_pool = _lines(f for f in for_guaranteed if f.category in special)
    regular_pool = _lines(f for f in for_regular if f.category not in special)

    facts_opening = header_cost(_FACTS_HEADER)
    guaranteed, spent = _fit(
        guaranteed_pool,
        min(facts_opening + guaranteed_token_budget, max_tokens),
        count_tokens,
        facts_opening,
    )
    left = max_tokens - spent
    user, spent = _fit(user_pool, left, count_tokens, header_cost(_USER_HEADER))
    left -= spent
    history: list[str] = []
    if len(user) == len(user_pool):
        history, spent = _fit(history_pool, left, count_tokens, header_cost(_HISTORY_HEADER))
        left -= spent
    regular, _ = _fit(regular_pool, left, count_tokens, 0 if guaranteed else facts_opening)

    sections = [
        (_USER_HEADER, user),
        (_HISTORY_HEADER, history),
        (_FACTS_HEADER, guaranteed + regular),
    ]
    # Per-line costs need not add up (see the module docstring): trim until the bound holds.
    while (
        any(lines for _, lines in sections)
        and sum(map(count_tokens, _pieces(sections))) > max_tokens
    ):
        next(lines for _, lines in reversed(sections) if lines).pop()
    return _render(sections)
