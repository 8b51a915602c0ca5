"""Turn one extraction into one change of the stored memory.

The order is fixed: reinforcement, summaries, staleness decisions, new facts (with exact and
near-duplicate merging), the capacity policy, contradiction removals, consolidation. Each step
has guardrails, and every decision ends up in the one `ChangeSet` (one commit, one audit entry).
"""

from __future__ import annotations

import heapq
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet, MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.scrub import fact_secret, find_secret
from deerflow.agents.memory.backends.deermem.deermem.governance import (
    CapacityPolicy,
    choose_evictions,
    content_tokens,
    is_stale,
    jaccard,
    normalized,
    parse_time,
)
from deerflow.agents.memory.backends.deermem.deermem.paraphrase import (
    Similarity,
    differs,
    paraphrase_scores,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.proposals import (
    Extraction,
    NewFact,
)

__all__ = ["ApplyOutcome", "Similarity", "apply_extraction", "stale_candidates"]

MAX_EXTENSION_DAYS: Final = 3650


@dataclass(slots=True)
class ApplyOutcome:
    """The change to commit and what happened to each proposal, for the metrics."""

    changes: ChangeSet
    metrics: dict[str, int] = field(default_factory=dict)


def stale_candidates(
    snapshot: MemorySnapshot, config: DeerMemConfig, now: datetime
) -> list[Mapping[str, Any]]:
    """Facts due for review, oldest first: they ride along in the extraction call."""
    if not config.staleness_review_enabled:
        return []
    protected = set(config.staleness_protected_categories)
    found = [
        fact
        for fact in snapshot.facts.values()
        if fact["category"] not in protected and is_stale(fact, now, config.staleness_age_days)
    ]
    if len(found) < config.staleness_min_candidates:
        return []
    return sorted(found, key=lambda fact: str(fact.get("updatedAt", "")))


class _Bucket:
    """The bucket as the steps change it: records by id, plus what to write and remove."""

    def __init__(self, snapshot: MemorySnapshot) -> None:
        self.bucket = snapshot.bucket
        self.facts: dict[str, dict[str, Any]] = {k: dict(v) for k, v in snapshot.facts.items()}
        self.changed: set[str] = set()
        self.removed: set[str] = set()

    def update(self, fact_id: str, **fields: Any) -> None:
        self.facts[fact_id].update(fields)
        self.changed.add(fact_id)

    def add(self, record: dict[str, Any]) -> None:
        self.facts[record["id"]] = record
        self.changed.add(record["id"])

    def remove(self, fact_id: str) -> None:
        if self.facts.pop(fact_id, None) is not None:
            self.changed.discard(fact_id)
            self.removed.add(fact_id)


def apply_extraction(
    snapshot: MemorySnapshot,
    extraction: Extraction,
    config: DeerMemConfig,
    *,
    now: datetime,
    stamp: str,
    thread_id: str,
    signals: Iterable[str] = (),
    heat: Mapping[str, float] | None = None,
    similarity: Similarity | None = None,
) -> ApplyOutcome:
    """The change set for one extraction over `snapshot`; nothing is written here.

    `heat` is the bucket's access heat (fact id → heat decayed to `now`), read by the caller
    from the usage sidecar when the capacity policy is `hybrid-v1`. `similarity`, given when
    embeddings are on, lets near-duplicate detection also match by meaning.
    """
    state = _Bucket(snapshot)
    metrics: dict[str, int] = {}

    def count(name: str, amount: int = 1) -> None:
        metrics[name] = metrics.get(name, 0) + amount

    # 1. Reinforcement: only when the user actually confirmed something in this batch.
    if "reinforcement" in set(signals):
        for fact_id in extraction.reinforce:
            if fact_id in state.facts:
                _confirm(state, fact_id, stamp)
                count("facts_reinforced")

    # 2. Summaries (already gated to user/descriptive by the extraction step).
    summaries = {part: dict(sections) for part, sections in extraction.summaries.items()}
    summaries = _without_secrets(summaries, count)

    # 3. Staleness: only facts that really are candidates, and only so many per cycle.
    candidates = {fact["id"] for fact in stale_candidates(snapshot, config, now)}
    proposed = [i for i in dict.fromkeys(extraction.stale_remove) if i in candidates]
    capped = heapq.nsmallest(
        config.staleness_max_removals_per_cycle,
        proposed,
        key=lambda i: float(state.facts[i]["confidence"]),
    )
    for fact_id in capped:
        state.remove(fact_id)
    count("stale_removed", len(capped))
    for fact_id, extra_days in extraction.stale_extend:
        if fact_id in candidates and fact_id not in proposed:
            age = (now - (parse_time(state.facts[fact_id].get("createdAt")) or now)).days
            state.update(
                fact_id,
                expected_valid_days=min(max(age, 0) + extra_days, MAX_EXTENSION_DAYS),
                lastConfirmedAt=stamp,
            )
            count("stale_extended")

    # 4. New facts (and replacements named by removals), merged with what is already there.
    new_facts = [
        *extraction.new_facts,
        *(r.replacement for r in extraction.removals if r.replacement),
    ]
    count("facts_extracted", len(new_facts))
    # A near repeat's own wording is kept in the audit entry: a wrong merge can be seen and undone.
    merged: list[str] = []
    for fact in new_facts:
        if fact.confidence < config.fact_confidence_threshold:
            count("rejected_low_confidence")
            continue
        count("facts_passed_confidence")
        record = _record(fact, state.bucket, stamp, thread_id)
        if fact_secret(record) is not None:
            count("rejected_secret")
            continue
        existing = _same_fact(state, fact, config, similarity)
        if existing is not None:
            _confirm(state, existing, stamp, confidence=fact.confidence)
            count("facts_merged_dedup")
            if normalized(state.facts[existing]["content"]) != normalized(fact.content):
                merged.append(f"{existing} <- {json.dumps(fact.content, ensure_ascii=False)}")
            continue
        state.add(record)

    # 5. Capacity: the policy's weakest go (one choice for all writes); the audit entry names them.
    evicted_ids = choose_evictions(
        list(state.facts.values()), CapacityPolicy.from_config(config), now=now, heat=heat
    )
    for fact_id in evicted_ids:
        state.remove(fact_id)
    count("facts_evicted", len(evicted_ids))

    # 6. Contradictions: the model must say why.
    for removal in extraction.removals:
        if removal.reason.strip() and removal.fact_id in state.facts:
            state.remove(removal.fact_id)
            count("facts_removed")

    # 7. Consolidation: merges facts about one aspect, never raising confidence.
    if config.consolidation_enabled:
        _consolidate(state, extraction, config, stamp, thread_id, count)

    reason = f"extraction from thread {thread_id}"
    if merged:
        reason += f"; merged near repeats {', '.join(merged)}"
    if evicted_ids:
        reason += f"; capacity evicted {', '.join(evicted_ids)}"
    changes = ChangeSet(
        actor="extraction",
        reason=reason,
        summaries=summaries,
        upserts=[state.facts[i] for i in sorted(state.changed) if i in state.facts],
        deletes=[(state.bucket, i) for i in sorted(state.removed) if i in snapshot.facts],
        expected_revision=snapshot.revision,
    )
    return ApplyOutcome(changes, metrics)


def _confirm(state: _Bucket, fact_id: str, stamp: str, confidence: float | None = None) -> None:
    fact = state.facts[fact_id]
    count = fact.get("confirmationCount")
    fields: dict[str, Any] = {
        "lastConfirmedAt": stamp,
        "confirmationCount": count + 1 if isinstance(count, int) and count > 0 else 1,
        "updatedAt": stamp,
    }
    if confidence is not None and confidence > float(fact["confidence"]):
        fields["confidence"] = confidence
    state.update(fact_id, **fields)


def _same_fact(
    state: _Bucket, fact: NewFact, config: DeerMemConfig, similarity: Similarity | None
) -> str | None:
    """The stored fact this one repeats: same text, or (with dedup on) nearly the same.

    Nearly the same: the most similar fact of the same category by token Jaccard, at or above
    `fact_dedup_similarity_threshold`, unless the two `paraphrase.differs` (polarity, a closed
    class of values, a comparison's order, with embeddings a swapped value); failing that, with
    embeddings, the most similar by `paraphrase.paraphrase_scores` at or above
    `fact_dedup_semantic_threshold`.
    """
    key = normalized(fact.content)
    for fact_id, stored in state.facts.items():
        if normalized(stored["content"]) == key:
            return fact_id
    if not config.fact_dedup_enabled:
        return None
    peers = [(i, f["content"]) for i, f in state.facts.items() if f["category"] == fact.category]
    tokens = content_tokens(fact.content)
    overlap = config.fact_dedup_similarity_threshold
    lexical: list[tuple[float, str]] = []
    for i, text in peers:
        value = jaccard(tokens, content_tokens(text))
        if value >= overlap and differs(fact.content, text, similarity):
            value = 0.0
        lexical.append((value, i))
    found = _best(lexical, overlap)
    if found is None and similarity is not None and peers:
        threshold = config.fact_dedup_semantic_threshold
        texts = [text for _, text in peers]
        scores = paraphrase_scores(fact.content, texts, similarity, threshold=threshold)
        semantic = [(value, i) for value, (i, _) in zip(scores, peers, strict=True)]
        found = _best(semantic, threshold)
    return found


def _best(scored: Sequence[tuple[float, str]], threshold: float) -> str | None:
    """The id with the highest score at or above `threshold` (the first of equals), or None."""
    best: tuple[float, str] | None = None
    for score, fact_id in scored:
        if score >= threshold and (best is None or score > best[0]):
            best = (score, fact_id)
    return None if best is None else best[1]


def _record(fact: NewFact, bucket: str, stamp: str, thread_id: str) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": f"fact_{uuid.uuid4().hex}",
        "category": fact.category,
        "confidence": fact.confidence,
        "createdAt": stamp,
        "updatedAt": stamp,
        "source": {"type": "conversation", "threadId": thread_id},
        "agent_name": bucket,
        "content": fact.content,
    }
    optional = {
        "sourceError": fact.source_error,
        "topics": list(fact.topics) or None,
        "expected_valid_days": fact.expected_valid_days,
        "event_time": fact.event_time,
    }
    record.update((key, value) for key, value in optional.items() if value is not None)
    return record


def _consolidate(
    state: _Bucket,
    extraction: Extraction,
    config: DeerMemConfig,
    stamp: str,
    thread_id: str,
    count: Any,
) -> None:
    protected = set(config.staleness_protected_categories)
    consumed: set[str] = set()
    merged = 0
    for group in extraction.consolidations:
        if merged >= config.consolidation_max_groups_per_cycle:
            break
        sources = list(dict.fromkeys(group.source_ids))
        usable = (
            2 <= len(sources) <= config.consolidation_max_sources
            and all(i in state.facts and i not in consumed for i in sources)
            and all(state.facts[i]["category"] not in protected for i in sources)
        )
        if not usable or not group.content.strip():
            count("consolidations_rejected")
            continue
        best = max(float(state.facts[i]["confidence"]) for i in sources)
        confidence = min(group.confidence, best)
        if confidence < config.fact_confidence_threshold:
            count("consolidations_rejected")
            continue
        fact = NewFact(group.content.strip(), group.category, confidence, group.labels)
        record = _record(fact, state.bucket, stamp, thread_id)
        record["source"] = {"type": "consolidation", "threadId": thread_id}
        record["consolidatedFrom"] = sources
        errors = [state.facts[i].get("sourceError") for i in sources]
        if texts := [e for e in errors if isinstance(e, str) and e]:
            record["sourceError"] = "\n".join(dict.fromkeys(texts))
        if fact_secret(record) is not None:
            count("consolidations_rejected")
            continue
        for fact_id in sources:
            state.remove(fact_id)
        consumed.update(sources)
        state.add(record)
        merged += 1
        count("facts_consolidated", len(sources))


def _without_secrets(summaries: dict[str, dict[str, str]], count: Any) -> dict[str, dict[str, str]]:
    kept: dict[str, dict[str, str]] = {}
    for part, sections in summaries.items():
        for section, text in sections.items():
            if find_secret(text) is None:
                kept.setdefault(part, {})[section] = text
            else:
                count("rejected_secret")
    return kept
