"""What every search index shares: the part of a fact it keeps, and how one search is ranked.

The files engine's FTS5 index (`core/index.py`) and the PostgreSQL index (`postgres/index.py`)
differ in where the rows live and how the per-term matches and the similarities are computed;
everything after that is here, so that one query ranks the same facts the same way on both:
the text a fact is indexed under (its content, CJK words segmented, its event time as words),
the search's checks and candidate pools, which facts meaning alone may bring in
(`SEMANTIC_FLOOR`, `SEMANTIC_RATIO`), and the fusion of the two rankings (`fusion.fuse`).
BM25 over a scope is `core/lexical.py`, thread context `threads.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING, Any, Final, TypeVar

from deerflow.agents.memory.backends.deermem.deermem.core.fts_query import (
    Cut,
    event_words,
    segment,
)
from deerflow.agents.memory.backends.deermem.deermem.fusion import fuse
from deerflow.agents.memory.backends.deermem.deermem.threads import POOL
from deerflow.agents.memory.manager import MemoryCorruptionError

if TYPE_CHECKING:
    from deerflow.agents.memory.backends.deermem.deermem.core.vectors import VectorModel

__all__ = [
    "CANDIDATES",
    "ENCODE_BATCH",
    "PROGRESS_EVERY",
    "SEMANTIC_FLOOR",
    "SEMANTIC_RATIO",
    "IndexClosedError",
    "IndexCorruptionError",
    "IndexedFact",
    "SearchHit",
    "batches",
    "by_meaning",
    "check_search",
    "depths",
    "encode",
    "fused",
    "index_text",
    "timestamp",
]

_K = TypeVar("_K")

PROGRESS_EVERY: Final = 1000
"""A rebuild reports its progress every this many facts."""
ENCODE_BATCH: Final = 256
"""A rebuild with a model encodes this many facts at a time."""

CANDIDATES: Final = 200
"""How many of each ranking a hybrid search fuses (more when the search asks for more). Deeper
pools let a fact that one ranking places low still win on the other: on LoCoMo conversations 0-4
R@10 went 0.657 / 0.661 / 0.667 at 50 / 100 / 200."""
SEMANTIC_FLOOR: Final = 0.5
"""A fact no query word matches is found by meaning only with at least this cosine similarity...
"""
SEMANTIC_RATIO: Final = 0.8
"""...and at least this share of the best match's (both weighted by confidence and recency).

The shipped static model gives unrelated short texts a cosine of 0.3 to 0.55 ("Kubernetes" and
"Likes tea": 0.52) and close ones 0.7 to 0.95, so without a bound every search returned `limit`
facts. The floor drops the unrelated when nothing is close; the ratio drops them beside a clear
match, while a weak match with nothing better ("package manager", "Prefers pnpm over npm": 0.54)
is still found. Facts that match a query word are always ranked."""


class IndexCorruptionError(MemoryCorruptionError):
    """A search index found unreadable (the files engine's SQLite file is not a database);
    the engine's `open_index(reset=True)` recreates it."""


class IndexClosedError(RuntimeError):
    """A search index was used after `close()` (by its owner, or by a thread that replaced it
    after finding it unreadable)."""


@dataclass(frozen=True, slots=True)
class IndexedFact:
    """The part of a fact the index stores. `agent` is the bucket name, already validated."""

    agent: str
    fact_id: str
    content: str
    category: str
    confidence: float
    updated_at: str
    event_time: str | None = None
    thread: str | None = None  # the conversation it came from (`source.threadId`)
    created_at: str = ""  # orders the facts of a thread

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> IndexedFact:
        """The index's part of a stored fact record (its front matter keys and `content`)."""
        source = record.get("source")
        thread = source.get("threadId") if isinstance(source, Mapping) else None
        event_time = record.get("event_time")
        return cls(
            agent=record["agent_name"],
            fact_id=record["id"],
            content=record["content"],
            category=record["category"],
            confidence=float(record["confidence"]),
            updated_at=str(record.get("updatedAt", "")),
            event_time=event_time if isinstance(event_time, str) else None,
            thread=thread if isinstance(thread, str) and thread else None,
            created_at=str(record.get("createdAt", "")),
        )


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result; a higher score is better."""

    fact_id: str
    score: float


def index_text(fact: IndexedFact, cut: Cut) -> str:
    """The text a fact is indexed under: its content with CJK runs cut into words by `cut`,
    then its event time as words (`fts_query.event_words`)."""
    return " ".join(filter(None, (segment(fact.content, cut), event_words(fact.event_time))))


def timestamp(moment: str | datetime) -> float:
    """Unix seconds of an ISO-8601 time or a datetime; one without an offset is taken as UTC.

    An empty or unreadable time gives 0, which only ranks the fact as old: a derived index
    must not refuse a fact its storage holds.
    """
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def check_search(limit: int, thread_context: float) -> None:
    """Refuse a search's bad arguments before anything is read.

    Raises:
        ValueError: `limit` is below 1, or `thread_context` is outside 0..1.
    """
    if limit < 1:
        raise ValueError(f"limit: must be at least 1, got {limit}")
    if not 0.0 <= thread_context <= 1.0:
        raise ValueError(f"thread_context: must be between 0 and 1, got {thread_context!r}")


def depths(limit: int, thread_context: float, *, semantic: bool) -> tuple[int, int]:
    """`(pool, depth)`: how many of the final ranking lend to their thread neighbours (or are
    returned), and how many of each ranking are read (`CANDIDATES` when a hybrid search fuses)."""
    pool = limit if thread_context == 0.0 else max(limit, POOL)
    return pool, max(pool, CANDIDATES) if semantic else pool


def by_meaning(nearest: Sequence[tuple[_K, float]], prior: Callable[[_K], float]) -> Iterator[_K]:
    """The keys of `nearest` (best first, similarity times prior) close enough to the query to
    be found by meaning alone (`SEMANTIC_FLOOR`, `SEMANTIC_RATIO`)."""
    if not nearest:
        return
    bar = SEMANTIC_RATIO * nearest[0][1]
    for key, score in nearest:
        if score < bar:
            return
        if score >= SEMANTIC_FLOOR * prior(key):
            yield key


def fused(
    lexical: Sequence[tuple[str, float]],
    semantic: Sequence[tuple[str, float]],
    meaning: Iterable[str],
    *,
    semantic_weight: float,
    pool: int,
) -> list[tuple[str, float]]:
    """The best `pool` of the fused ranking, keeping only facts a query word matched or that
    meaning alone brings in (`meaning`, from `by_meaning`)."""
    kept = {fact_id for fact_id, _ in lexical}
    kept.update(meaning)
    both = fuse(lexical, semantic, semantic_weight=semantic_weight)
    return [pair for pair in both if pair[0] in kept][:pool]


def batches(facts: Iterable[IndexedFact], size: int) -> Iterator[list[IndexedFact]]:
    """`facts` in lists of `size`, read lazily (a rebuild streams millions)."""
    iterator = iter(facts)
    while batch := list(islice(iterator, size)):
        yield batch


def encode(model: VectorModel | None, facts: Sequence[IndexedFact]) -> list[bytes | None]:
    """The vectors of `facts` (their text without the event words), or None each without a
    model.

    Raises:
        EmbeddingError: the model failed.
    """
    if model is None:
        return [None] * len(facts)
    return list(model.encode([fact.content for fact in facts]))
