"""The text DeerMem injects into a prompt, as a pure function of summaries and facts.

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
counted piece by piece, each line with the newlines that follow it (`_counted`), which for cl100k
is exactly the count of the whole text: its pre-tokenizer always ends a chunk after a run of
newlines followed by a visible character, which is where every piece ends, and BPE never merges
across chunks (a test checks the identity on random texts). So the check needs the counts of
lines, which a `TokenCache` can supply without loading the tokenizer, and most pieces are the
lines as they were charged. For the estimate the sum is at least the whole count, so the bound
holds there too.
"""

from __future__ import annotations

import functools
import html
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

__all__ = ["HISTORY_LABELS", "USER_LABELS", "ContextFact", "format_context"]

# The section keys of memory.json and their labels in the injected text.
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


@dataclass(slots=True)
class _Section:
    """A section's header and lines (each with its newline), and what each line was charged."""

    header: str
    lines: list[str] = field(default_factory=list)
    costs: list[int] = field(default_factory=list)

    def extend(self, other: _Section) -> _Section:
        """This section with `other`'s lines after its own (regular facts after guaranteed)."""
        self.lines += other.lines
        self.costs += other.costs
        return self


def _fit(
    header: str, lines: Iterable[str], budget: int, cost: Callable[[str], int], opening: int = 0
) -> tuple[_Section, int]:
    """The longest prefix of `lines` (each with its newline) that fits in `budget`, as a
    section under `header`, and its cost.

    `lines` may be lazy: nothing after the first line that does not fit is produced.

    `opening` (a section header) is charged together with the first line, so a header never
    appears without a line under it.
    """
    taken = _Section(header)
    spent = 0
    for line in lines:
        own = cost(line)
        charge = own + (opening if not taken.costs else 0)
        if spent + charge > budget:
            break
        spent += charge
        taken.lines.append(line)
        taken.costs.append(own)
    return taken, spent


def _lines(facts: Iterable[ContextFact], categories: frozenset[str], inside: bool) -> Iterator[str]:
    """The lines of the facts whose category is in `categories` (`inside`) or not."""
    return (
        line for fact in facts if (fact.category in categories) is inside and (line := fact.line)
    )


def _render(sections: Sequence[_Section]) -> str:
    text = "\n".join("".join([s.header, *s.lines]) for s in sections if s.lines)
    return text[:-1]


def _counted(shown: Sequence[_Section], count_tokens: Callable[[str], int]) -> int:
    """The count of `_render`'s text cut after each line, the line with the newlines that
    follow it, summed (`shown`: the sections with lines). Inside a section a piece is a header
    or a line as it was charged; only a section's last line gains a blank line, or at the end
    of the text loses its newline."""
    total = 0
    for number, section in enumerate(shown, 1):
        last = section.lines[-1]
        piece = (last + "\n") if number < len(shown) else last[:-1]
        total += count_tokens(section.header) + sum(section.costs) - section.costs[-1]
        total += count_tokens(piece)
    return total


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

    facts_opening = header_cost(_FACTS_HEADER)
    guaranteed, spent = _fit(
        _FACTS_HEADER,
        _lines(for_guaranteed, special, True),
        min(facts_opening + guaranteed_token_budget, max_tokens),
        count_tokens,
        facts_opening,
    )
    left = max_tokens - spent
    user, spent = _fit(_USER_HEADER, user_pool, left, count_tokens, header_cost(_USER_HEADER))
    left -= spent
    history = _Section(_HISTORY_HEADER)
    if len(user.lines) == len(user_pool):
        history, spent = _fit(
            _HISTORY_HEADER, history_pool, left, count_tokens, header_cost(_HISTORY_HEADER)
        )
        left -= spent
    regular, _ = _fit(
        _FACTS_HEADER,
        _lines(for_regular, special, False),
        left,
        count_tokens,
        0 if guaranteed.lines else facts_opening,
    )

    sections = [user, history, guaranteed.extend(regular)]
    # Per-line costs need not add up (see the module docstring): trim until the bound holds.
    while (shown := [s for s in sections if s.lines]) and _counted(
        shown, count_tokens
    ) > max_tokens:
        shown[-1].lines.pop()
        shown[-1].costs.pop()
    return _render(sections)
