"""`ContextInjector`: the memory block injected at the start of a conversation.

The text is rebuilt only when what it is made of changed: the storage hands out the same fact
mapping and summary objects while the stored memory is unchanged (a hand edit that leaves the
revision alone included), so the last text of a bucket is kept with the objects it came from.
A query-relevant injection depends on the query too and is not kept.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Mapping
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.context import format_context
from deerflow.agents.memory.backends.deermem.deermem.core.paths import safe_user_id
from deerflow.agents.memory.backends.deermem.deermem.core.tokens import TokenCounter
from deerflow.agents.memory.backends.deermem.deermem.records import RecordStore
from deerflow.agents.memory.backends.deermem.deermem.views import RecordViews

__all__ = ["ContextInjector"]

_FACT: Final = operator.attrgetter("fact")  # a context entry's fact, read in C
CONTEXT_CACHE_SIZE: Final = 4096
# What a cached text was made from: the bucket's facts and the two summary parts.
_Source = tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]


class ContextInjector:
    """Builds (and keeps) the injection text of each (user, bucket)."""

    def __init__(
        self, store: RecordStore, config: DeerMemConfig, views: RecordViews, tokens: TokenCounter
    ) -> None:
        self._store = store
        self._config = config
        self._views = views
        self._tokens = tokens
        self._cache: dict[tuple[str, str], tuple[_Source, str]] = {}
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Drop every kept text (after a reload that bypassed the storage's caches)."""
        with self._lock:
            self._cache.clear()

    def text(
        self, user_id: str | None, agent_name: str | None, query: str | None, *, facts: bool
    ) -> str:
        """The injection text; `facts` False leaves the facts out (tool mode)."""
        snapshot = self._store.load(user_id, agent_name)
        relevant = bool(query and query.strip() and self._config.retrieval_relevance_enabled)
        key = (safe_user_id(snapshot.user_id), snapshot.bucket)
        source = (snapshot.facts, snapshot.summaries["user"], snapshot.summaries["history"])
        if not relevant:
            with self._lock:
                cached = self._cache.get(key)
            if cached is not None and all(map(operator.is_, cached[0], source)):
                return cached[1]
        entries = self._views.by_confidence(snapshot)
        if relevant:
            from deerflow.agents.memory.backends.deermem.deermem.ranking import rank_for_query

            similarities = self._store.similarities(snapshot, query or "")
            entries = rank_for_query(
                entries,
                query or "",
                text_of=lambda e: str(e.record["content"]),
                confidence_of=lambda e: float(e.record["confidence"]),
                relevance_weight=self._config.retrieval_relevance_weight,
                diversity_weight=self._config.retrieval_diversity_weight,
                similarity_of=(
                    None
                    if similarities is None
                    else lambda e: similarities.get(e.record["id"], 0.0)
                ),
                semantic_weight=self._config.retrieval_semantic_weight,
            )
        text = format_context(
            snapshot.summaries,
            map(_FACT, entries),
            max_tokens=self._config.max_injection_tokens,
            guaranteed_categories=self._config.guaranteed_categories,
            guaranteed_token_budget=self._config.guaranteed_token_budget,
            include_facts=facts,
            count_tokens=self._tokens.count,
        )
        self._tokens.flush()  # lines counted now need no tokenizer in the next process
        if not relevant:
            with self._lock:
                if len(self._cache) >= CONTEXT_CACHE_SIZE:
                    self._cache.clear()
                self._cache[key] = (source, text)
        return text
