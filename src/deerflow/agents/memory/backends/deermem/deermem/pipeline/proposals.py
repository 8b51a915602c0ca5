"""What an extraction proposes, as plain data: shared by the extraction and apply steps.

Kept apart from `extraction.py` so that applying, and the write path's imports, do not load
LangChain's model machinery (hundreds of milliseconds) until an extraction actually runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deerflow.agents.memory.manager import MemoryManagerError

__all__ = ["Consolidation", "Extraction", "ExtractionError", "Labels", "NewFact", "Removal"]


@dataclass(frozen=True)
class Labels:
    """The classification the model gave a proposal: `user|thread|project`,
    `durable|temporary`, `descriptive|transactional`."""

    scope: str
    durability: str
    authority: str


@dataclass(frozen=True)
class NewFact:
    """A fact to store, as proposed by the model and passed by the gate."""

    content: str
    category: str
    confidence: float
    labels: Labels
    source_error: str | None = None
    topics: tuple[str, ...] = ()
    expected_valid_days: int | None = None
    event_time: str | None = None


@dataclass(frozen=True)
class Removal:
    """A stored fact the conversation contradicts; `replacement` says what is true now."""

    fact_id: str
    reason: str
    replacement: NewFact | None = None


@dataclass(frozen=True)
class Consolidation:
    """Several stored facts about one aspect, merged into one."""

    source_ids: tuple[str, ...]
    content: str
    category: str
    confidence: float
    labels: Labels


@dataclass(frozen=True)
class Extraction:
    """What one extraction proposes, after the gate.

    Attributes:
        summaries: replaced sections by part, `{"user": {"workContext": text}, "history": {...}}`.
        new_facts: facts to add (a removal's replacement is not repeated here).
        reinforce: ids of facts the conversation confirmed.
        removals: contradicted facts.
        stale_remove: ids of stale facts to remove.
        stale_extend: (id, extra days) of stale facts still plausible.
        consolidations: merges of existing facts.
        rejected: proposals the gate dropped, counted by reason (see `GATE_REASONS`).
    """

    summaries: dict[str, dict[str, str]]
    new_facts: tuple[NewFact, ...]
    reinforce: tuple[str, ...]
    removals: tuple[Removal, ...]
    stale_remove: tuple[str, ...]
    stale_extend: tuple[tuple[str, int], ...]
    consolidations: tuple[Consolidation, ...]
    rejected: dict[str, int]


class ExtractionError(MemoryManagerError):
    """The extraction call failed or its reply was unusable; memory is left unchanged.

    Attributes:
        metrics: what is known of the attempt (`token_usage`, `duration_ms`, `model_name`).
    """

    def __init__(self, message: str, *, metrics: Mapping[str, Any] | None = None) -> None:
        self.metrics = dict(metrics or {})
        super().__init__(message)
