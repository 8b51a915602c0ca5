"""The write pipeline as one object: filter → durable queue → extraction → apply.

`add()` only filters and enqueues (durably, before returning); a worker thread of the queue
runs the extraction of each due conversation and commits its result as one change. Everything
that acknowledging a conversation does not need happens in the worker: looking for signals,
building the prompt, the LLM call, applying and committing. Of a thread the queue has seen,
`add()` filters and stores only the messages after the last turn queued or extracted, so that
its cost does not grow with the thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.changes import MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.paths import DEFAULT_USER
from deerflow.agents.memory.backends.deermem.deermem.engine import QueueSettings, WriteQueue
from deerflow.agents.memory.backends.deermem.deermem.pipeline.apply import (
    Similarity,
    apply_extraction,
    stale_candidates,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.filtering import (
    Turn,
    kept_turns,
    messages_after,
    prepare_conversation,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.proposals import ExtractionError
from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import (
    QueueFullError,
    QueueItem,
    QueueKey,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.signals import SignalPatterns
from deerflow.agents.memory.backends.deermem.deermem.records import RecordStore
from deerflow.agents.memory.backends.deermem.deermem.usage import capacity_heat
from deerflow.agents.memory.backends.deermem.deermem.views import RecordViews
from deerflow.agents.memory.manager import MemoryCallbacks, MemoryConflictError, utc_now

__all__ = ["MemoryWriter"]

logger = logging.getLogger(__name__)

MAX_APPLY_ATTEMPTS: Final = 5
NEAREST_FACTS: Final = 5
"""Stored facts shown beside the conversation as the nearest to it, so that the model
reinforces them rather than proposing paraphrases (the full list is in the memory block)."""
NEAREST_TURNS: Final = 10  # the last user turns compared with the stored facts


class MemoryWriter:
    """Everything between `add()` and a committed change."""

    def __init__(
        self,
        config: DeerMemConfig,
        store: RecordStore,
        *,
        views: RecordViews,
        callbacks: MemoryCallbacks | None,
        hooks: Mapping[str, Any],
        similarity: Similarity | None = None,
    ) -> None:
        self._config = config
        self._similarity = similarity
        self._store = store
        self._views = views
        self._callbacks = callbacks
        self._keep_hidden = hooks.get("should_keep_hidden_message")
        self._trace = hooks.get("trace_context_manager")
        self._on_extraction = hooks.get("extraction_callback")
        self._host_llm = hooks.get("host_llm_factory")
        self._loaded_patterns: SignalPatterns | None = None
        self._model: Any = None
        self._model_lock = threading.Lock()
        self._queue: WriteQueue | None = None
        self._queue_lock = threading.Lock()

    @property
    def _patterns(self) -> SignalPatterns:
        """The signal patterns, read on first use: a manager that only reads never needs them."""
        if self._loaded_patterns is None:
            directory = self._config.patterns_dir
            self._loaded_patterns = SignalPatterns.load(Path(directory) if directory else None)
        return self._loaded_patterns

    # -- the host's side -----------------------------------------------------------------------

    def add(
        self,
        thread_id: str,
        messages: Sequence[Any],
        *,
        user_id: str | None,
        agent_name: str | None,
        trace_id: str | None,
        urgent: bool,
    ) -> None:
        key = QueueKey(thread_id, DEFAULT_USER if user_id is None else user_id, agent_name)
        if not urgent and self._add_new_turns(key, messages, trace_id):
            return
        prepared = prepare_conversation(
            messages, keep_hidden=self._keep_hidden, patterns=self._patterns
        )
        if prepared is None:
            return
        turns = [turn.to_dict() for turn in prepared.turns]
        if urgent:
            self.queue.put_now(key, turns, trace_id=trace_id)
            return
        try:
            self.queue.put(key, turns, trace_id=trace_id)
        except QueueFullError:
            # The worker looks for signals in every batch; only a full queue needs them now,
            # since it still admits a conversation that carries one.
            signals = prepared.signals
            if not signals:
                raise
            self.queue.put(key, turns, signals=signals, trace_id=trace_id)

    def _add_new_turns(self, key: QueueKey, messages: Sequence[Any], trace_id: str | None) -> bool:
        """Queue the turns after the key's last queued or extracted one; False if it cannot.

        It cannot when that turn is not among `messages` by its message id (a new thread, one
        compacted or edited since, messages without ids), when another add of the key came
        first, or when the queue is full: then the whole conversation is put (and looked for
        the signals that a full queue still admits).
        """
        cursor = self.queue.cursor(key)
        new = None if cursor is None else messages_after(messages, cursor)
        if cursor is None or new is None:
            return False
        turns = kept_turns(new, keep_hidden=self._keep_hidden, patterns=self._patterns)
        if not turns:
            return True  # nothing new worth extracting: tool traffic, a trivial turn
        try:
            return self.queue.extend(
                key, [turn.to_dict() for turn in turns], after=cursor, trace_id=trace_id
            )
        except QueueFullError:
            return False

    @property
    def queue(self) -> WriteQueue:
        """The engine's durable queue, opened (and its leftovers scheduled) on first use."""
        with self._queue_lock:
            if self._queue is None:
                self._queue = self._store.engine.open_queue(
                    QueueSettings(
                        process=self._process,
                        identity=lambda turn: Turn.from_dict(turn).identity(),
                        debounce_seconds=self._config.debounce_seconds,
                        max_wait_seconds=self._config.debounce_max_wait_seconds,
                        max_depth=self._config.queue_max_depth,
                    )
                )
            return self._queue

    def flush(self, timeout: float) -> bool:
        return self.queue.flush(timeout)

    def cancel_pending(self, *, user_id: str | None, agent_name: str | None) -> int:
        user = DEFAULT_USER if user_id is None else user_id
        return self.queue.cancel_pending(
            user_id=user, agent_name=agent_name, all_agents=agent_name is None
        )

    def close(self) -> None:
        with self._queue_lock:
            if self._queue is not None:
                self._queue.close()

    # -- the worker's side ---------------------------------------------------------------------

    def _process(self, item: QueueItem) -> None:
        """Extract one conversation and commit the result; raising keeps it for a retry."""
        thread_id, user_id, agent_name = item.key
        trace = self._trace(item.trace_id) if self._trace else contextlib.nullcontext()
        started = time.perf_counter()
        payload: dict[str, Any] = {
            "thread_id": thread_id,
            "user_id": user_id,
            "agent_name": agent_name,
            "trace_id": item.trace_id,
            "success": False,
        }
        try:
            with trace:
                payload.update(self._extract_and_apply(item))
            payload["success"] = True
        except ExtractionError as exc:
            payload.update(exc.metrics, error=str(exc))
            logger.warning("memory extraction failed for thread %s: %s", thread_id, exc)
            raise
        finally:
            payload["duration_ms"] = round((time.perf_counter() - started) * 1000, 1)
            if self._on_extraction is not None:
                try:
                    self._on_extraction(payload)
                except Exception:
                    logger.exception("extraction_callback failed; continuing")

    def _extract_and_apply(self, item: QueueItem) -> dict[str, Any]:
        # Imported here: LangChain's model machinery costs hundreds of milliseconds to import,
        # which reads and CLI commands that never extract should not pay.
        from deerflow.agents.memory.backends.deermem.deermem.pipeline.extraction import (
            extract,
            use_compact_prompt,
        )

        thread_id, user_id, agent_name = item.key
        turns = [Turn.from_dict(turn) for turn in item.turns]
        signals = set(item.signals) | self._patterns.detect(
            turn.text for turn in turns if turn.role == "user"
        )
        snapshot = self._store.load(user_id, agent_name)
        now = datetime.now(UTC)
        model = self._chat_model()
        extraction, metrics = extract(
            model,
            self._views.document(snapshot),
            [{"role": turn.role, "text": turn.text} for turn in turns],
            signals=signals,
            stale_candidates=stale_candidates(snapshot, self._config, now),
            consolidation_candidates=self._consolidation_candidates(snapshot),
            nearest_facts=self._nearest_facts(snapshot, turns),
            callbacks=self._callbacks,
            thread_id=thread_id,
            user_id=user_id,
            trace_id=item.trace_id,
            compact=use_compact_prompt(self._config.extraction_prompt, model),
        )
        heat = capacity_heat(
            self._store.engine.usage, self._config, snapshot.user_id, snapshot.bucket, now
        )
        for attempt in range(MAX_APPLY_ATTEMPTS):
            # A conflict means another writer committed first: apply the same proposals anew.
            snapshot = snapshot if attempt == 0 else self._store.load(user_id, agent_name)
            outcome = apply_extraction(
                snapshot,
                extraction,
                self._config,
                now=now,
                stamp=utc_now(),
                thread_id=thread_id,
                signals=signals,
                heat=heat,
                similarity=self._similarity,
            )
            try:
                self._store.commit(user_id, outcome.changes)
                break
            except MemoryConflictError:
                if attempt == MAX_APPLY_ATTEMPTS - 1:
                    raise
        rejected = sum(extraction.rejected.values())
        return {
            **metrics,
            **outcome.metrics,
            "rejected_by_scope_gate": rejected,
            "scope_gate_rejections": dict(extraction.rejected),
        }

    def _chat_model(self) -> Any:
        from deerflow.agents.memory.backends.deermem.deermem.pipeline.extraction import (
            build_model,
        )

        with self._model_lock:
            if self._model is None:
                self._model = build_model(self._config.model, self._host_llm)
            if self._model is None:
                raise ExtractionError(
                    "no chat model: set memory.backend_config.model, or configure `models:` "
                    "and build the manager from the whole config (build_memory_manager(config), "
                    "not config.memory) so that it gets the host's model; the conversation "
                    "stays queued"
                )
            return self._model

    def _nearest_facts(
        self, snapshot: MemorySnapshot, turns: Sequence[Turn]
    ) -> list[Mapping[str, Any]]:
        """The `NEAREST_FACTS` stored facts closest in meaning to any of the last user turns
        (none without embeddings), for the prompt to show beside the conversation."""
        facts = list(snapshot.facts.values())
        said = [turn.text for turn in turns if turn.role == "user"][-NEAREST_TURNS:]
        if self._similarity is None or not facts or not said:
            return []
        contents = [str(fact["content"]) for fact in facts]
        closest = [0.0] * len(facts)
        for text in said:
            closest = list(map(max, closest, self._similarity(text, contents)))
        order = sorted(range(len(facts)), key=lambda i: -closest[i])[:NEAREST_FACTS]
        return [facts[i] for i in order]

    def _consolidation_candidates(self, snapshot: MemorySnapshot) -> list[Mapping[str, Any]]:
        if not self._config.consolidation_enabled:
            return []
        protected = set(self._config.staleness_protected_categories)
        by_category: dict[str, list[Mapping[str, Any]]] = {}
        for fact in snapshot.facts.values():
            if fact["category"] not in protected:
                by_category.setdefault(fact["category"], []).append(fact)
        return [
            fact
            for facts in by_category.values()
            if len(facts) >= self._config.consolidation_min_facts
            for fact in facts
        ]
