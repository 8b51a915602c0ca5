"""Thread context (`retrieval_thread_context`): a search hit lends part of its score to the facts
written next to it in the same conversation thread, as pure functions.

Facts kept turn by turn lose what connects them: a question in one turn is answered in the next
one, which may share no word with a later search ("where is she moving?" finds "Which city are
you moving to?", not "Lisbon, we signed the lease." after it). Facts remember their thread
(`source.threadId`) and when they were written (`createdAt`), so the index knows each fact's
neighbours in its thread.

With share `s`, after the ranking (lexical, or fused) is scaled so its best score is 1, every
ranked fact adds `s` times its score to the fact written after it in the thread, `s / 2` to the
one after that, and `s / 4` to the one before it; then the facts are ranked again. A fact with no
thread (a manual edit, an import) neither lends nor borrows. On LoCoMo (conversations 0-4, turns
as documents, hybrid) R@10 rose from 0.667 to 0.723 at `s` = 0.5, the best of 0 to 1 there; over
observation facts the best was 0.25 (0.611 to 0.619), and 0.5 changed nothing. The shape (after,
after next, before: 1, 1/2, 1/4) was chosen on the same half (docs/benchmarks.md). 0.5 is the
default: over all ten conversations it lifts the default hybrid search from 0.652 to 0.712 over
turns and from 0.602 to 0.613 over observations.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

__all__ = ["POOL", "ThreadOrder", "spread"]

POOL: Final = 100
"""How many of the ranking lend their score: a neighbour of the 100th hit can still matter."""


@dataclass(frozen=True, slots=True)
class ThreadOrder:
    """Each threaded fact's neighbours in its thread, and its category.

    Attributes:
        next, after_next, previous: fact id → the fact written after it, the one after that, and
            the one before it, in the same thread (absent at a thread's ends).
        categories: fact id → category, for every fact in a thread.
    """

    next: Mapping[str, str]
    after_next: Mapping[str, str]
    previous: Mapping[str, str]
    categories: Mapping[str, str]

    @classmethod
    def of(cls, rows: Iterable[tuple[str, str, str]]) -> ThreadOrder:
        """From `(fact_id, thread, category)` rows sorted by thread, then by when written."""
        threads: dict[str, list[str]] = {}
        categories: dict[str, str] = {}
        for fact_id, thread, category in rows:
            threads.setdefault(thread, []).append(fact_id)
            categories[fact_id] = category
        following: dict[str, str] = {}
        after_next: dict[str, str] = {}
        previous: dict[str, str] = {}
        for facts in threads.values():
            following.update(pairwise(facts))
            after_next.update(zip(facts, facts[2:], strict=False))
            previous.update((later, earlier) for earlier, later in pairwise(facts))
        return cls(following, after_next, previous, categories)


def spread(
    ranking: Sequence[tuple[str, float]],
    order: ThreadOrder,
    *,
    share: float,
    category: str | None = None,
    limit: int,
) -> list[tuple[str, float]]:
    """`ranking` (best first, scores >= 0) with each fact's score lent to its thread neighbours.

    Returns the best `limit` as `(fact_id, score)`, the scores scaled so the ranking's best
    lends from 1; equal scores by fact id. A neighbour outside `category` (when given) gets
    nothing. A ranking whose best score is not positive is returned as it is.

    Raises:
        ValueError: `share` outside 0..1.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share: must be between 0 and 1, got {share!r}")
    if not ranking or ranking[0][1] <= 0.0:
        return list(ranking[:limit])
    best = ranking[0][1]
    scores = {fact_id: score / best for fact_id, score in ranking}
    spread_scores = dict(scores)
    # What each neighbour gets, as a part of the hit's score (the module docstring's 1 : ½ : ¼).
    neighbours = ((share, order.next), (share / 2, order.after_next), (share / 4, order.previous))
    for fact_id, score in scores.items():
        for lent, of in neighbours:
            neighbour = of.get(fact_id)
            if neighbour is not None and (
                category is None or order.categories[neighbour] == category
            ):
                spread_scores[neighbour] = spread_scores.get(neighbour, 0.0) + lent * score
    return heapq.nsmallest(limit, spread_scores.items(), key=lambda pair: (-pair[1], pair[0]))
