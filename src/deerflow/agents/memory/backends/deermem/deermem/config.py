"""DeerMem's own keys under `memory.backend_config`, with their defaults."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from deerflow.agents.memory.backends.deermem.deermem.embeddings import EXTRA, missing_modules
from deerflow.agents.memory.backends.deermem.deermem.model_settings import model_settings
from deerflow.agents.memory.manager import FACT_CATEGORIES, parse_backend_config

__all__ = ["COSTLY_MAX_FACTS", "DeerMemConfig", "parse_config"]

logger = logging.getLogger(__name__)

# DeerFlow's own ceiling. Above it a bucket still works, but each write's eviction and audit
# scans, the injected context and `deerflow memory audit` (quadratic in a bucket) cost more.
COSTLY_MAX_FACTS: Final = 500


class DeerMemConfig(BaseModel):
    """Validated DeerMem settings. Unknown keys are warned about (`parse_backend_config`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    storage_path: str = Field(min_length=1)
    storage_class: str | None = None
    # Where the memory lives: `files` under `storage_path`, or `postgres` at `database_url`
    # (several replicas share one memory there; `storage_path` then keeps derived caches only).
    storage: Literal["files", "postgres"] = "files"
    database_url: str | None = Field(default=None, min_length=1)
    database_pool_size: int = Field(default=5, ge=1, le=100)
    database_schema: str = Field(default="deermem", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    # A replica renews its claim on the conversation it extracts every third of this; one that
    # died leaves it to the others this long after its last renewal.
    queue_lease_seconds: float = Field(default=60.0, ge=1, le=3600)
    file_lock_timeout_seconds: float = Field(default=10.0, gt=0)
    max_facts: int = Field(default=100, ge=10, le=10_000)
    fact_eviction_policy: Literal["confidence", "hybrid-v1"] = "confidence"
    eviction_confidence_weight: float = Field(default=0.65, ge=0, le=1)
    eviction_confirmation_weight: float = Field(default=0.25, ge=0, le=1)
    eviction_access_weight: float = Field(default=0.10, ge=0, le=1)
    eviction_confirmation_half_life_days: float = Field(default=90.0, ge=1, le=3650)
    eviction_access_half_life_days: float = Field(default=30.0, ge=1, le=3650)
    eviction_correction_reserved_fraction: float = Field(default=0.10, ge=0, le=1)
    eviction_correction_reserved_max: int = Field(default=10, ge=0, le=100)
    max_injection_tokens: int = Field(default=2000, gt=0)
    guaranteed_categories: tuple[str, ...] = ("correction",)
    guaranteed_token_budget: int = Field(default=500, ge=0)
    fact_confidence_threshold: float = Field(default=0.7, ge=0, le=1)
    fact_dedup_enabled: bool = False
    fact_dedup_similarity_threshold: float = Field(default=0.7, gt=0, le=1)
    fact_dedup_semantic_threshold: float = Field(default=0.83, gt=0, le=1)
    staleness_review_enabled: bool = False
    staleness_age_days: int = Field(default=90, ge=1, le=3650)
    staleness_min_candidates: int = Field(default=3, ge=1, le=50)
    staleness_max_removals_per_cycle: int = Field(default=10, ge=1, le=50)
    staleness_protected_categories: tuple[str, ...] = ("correction",)
    consolidation_enabled: bool = False
    consolidation_min_facts: int = Field(default=8, ge=3, le=30)
    consolidation_max_groups_per_cycle: int = Field(default=3, ge=1, le=10)
    consolidation_max_sources: int = Field(default=8, ge=2, le=20)
    debounce_seconds: float = Field(default=30.0, ge=0, le=3600)
    debounce_max_wait_seconds: float = Field(default=120.0, ge=0, le=86400)
    queue_max_depth: int = Field(default=1000, ge=0)
    patterns_dir: str | None = None
    model: dict[str, Any] | None = None
    extraction_prompt: Literal["auto", "full", "compact"] = "auto"
    retrieval_relevance_enabled: bool = False
    retrieval_relevance_weight: float = Field(default=0.5, ge=0, le=1)
    retrieval_diversity_weight: float = Field(default=0.0, ge=0, le=1)
    # Validated even when left unset: hybrid search is the default, so a missing numpy or
    # model2vec must stop the start, not the first search.
    retrieval_embeddings: bool = Field(default=True, validate_default=True)
    retrieval_semantic_weight: float = Field(default=0.3, ge=0, le=1)
    retrieval_thread_context: float = Field(default=0.5, ge=0, le=1)

    @field_validator("storage_class", mode="before")
    @classmethod
    def _empty_is_default(cls, value: Any) -> Any:
        # DeerFlow spells the default `storage_class: ""` in its documented block, or `file`.
        return None if value in ("", "file") else value

    @field_validator("max_facts")
    @classmethod
    def _warn_when_costly(cls, value: int) -> int:
        if value > COSTLY_MAX_FACTS:
            logger.warning(
                "memory.backend_config.max_facts=%d is above %d: every write scans the whole "
                "bucket for eviction and duplicates, and `deerflow memory audit` compares every "
                "pair of facts, so large buckets make writes and audits slower",
                value,
                COSTLY_MAX_FACTS,
            )
        return value

    @field_validator("model")
    @classmethod
    def _model_names_a_provider(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # The model is built at the first extraction (a missing integration only stops that);
        # a misspelt key or provider is a configuration error and stops the start.
        model_settings(value)
        return value

    @field_validator("patterns_dir")
    @classmethod
    def _patterns_load(cls, value: str | None) -> str | None:
        # The worker reads them only at its first extraction; a bad folder must stop the start
        # (and `deerflow config check`), not fail every conversation later.
        if value is not None:  # imported here: a process that only reads never loads the pipeline
            from deerflow.agents.memory.backends.deermem.deermem.pipeline.signals import (
                SignalPatterns,
            )

            SignalPatterns.load(Path(value))
        return value

    @field_validator("retrieval_embeddings")
    @classmethod
    def _extra_installed(cls, value: bool) -> bool:
        missing = missing_modules() if value else []
        if missing:
            raise ValueError(
                f"hybrid search (true by default) needs {', '.join(missing)}, part of the base "
                f"install, missing here: reinstall with pip install 'deerflow-memory[{EXTRA}]', "
                "or set it to false for lexical retrieval only"
            )
        return value

    @field_validator("guaranteed_categories", "staleness_protected_categories")
    @classmethod
    def _known_categories(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [category for category in value if category not in FACT_CATEGORIES]
        if unknown:
            raise ValueError(f"unknown categories {unknown}; known: {', '.join(FACT_CATEGORIES)}")
        return value

    @model_validator(mode="after")
    def _one_storage(self) -> DeerMemConfig:
        if self.storage == "postgres":
            if self.database_url is None:
                raise ValueError("storage: postgres needs database_url (e.g. $DATABASE_URL)")
            if self.storage_class is not None:
                raise ValueError(
                    "storage_class is a files storage; it cannot be used with postgres"
                )
        elif self.database_url is not None:
            raise ValueError("database_url is read only with storage: postgres")
        return self

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> DeerMemConfig:
        weights = (
            self.eviction_confidence_weight,
            self.eviction_confirmation_weight,
            self.eviction_access_weight,
        )
        if abs(sum(weights) - 1.0) > 1e-9:
            raise ValueError(
                "eviction_confidence_weight + eviction_confirmation_weight + "
                f"eviction_access_weight must sum to 1, got {sum(weights):g}"
            )
        return self


def parse_config(backend_config: dict[str, Any]) -> DeerMemConfig:
    """Validate `backend_config`; errors name `memory.backend_config.<key>`."""
    return parse_backend_config(DeerMemConfig, backend_config)
