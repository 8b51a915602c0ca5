"""A health report of one fact bucket: what `deerflow memory audit` prints.

Read-only and deterministic for a given `now`: exact and near duplicates, stale facts, facts
never retrieved, secret-looking content and facts without provenance, each as a count, a rate
over the bucket's facts and the fact ids, so an operator can act on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import combinations
from typing import Any

from deerflow.agents.memory.backends.deermem.deermem.core.changes import MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.scrub import fact_secret
from deerflow.agents.memory.backends.deermem.deermem.governance import (
    content_tokens,
    is_stale,
    jaccard,
    normalized,
)

__all__ = ["AuditReport", "NearDuplicate", "SecretFinding", "audit_bucket"]


@dataclass(frozen=True, slots=True)
class NearDuplicate:
    """Two facts of one category whose token sets overlap by `similarity` (Jaccard)."""

    first: str
    second: str
    similarity: float


@dataclass(frozen=True, slots=True)
class SecretFinding:
    fact_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The findings for one bucket, in fact id order; rates are counts over `total`.

    Attributes:
        exact_duplicates: groups of ids with the same normalised content.
        near_duplicates: pairs at or above `near_duplicate_threshold`, exact duplicates aside.
        stale: facts neither updated nor confirmed within their valid age.
        never_retrieved: None when retrieval is not tracked.
    """

    user_id: str
    bucket: str
    audited_at: str
    total: int
    staleness_age_days: int
    near_duplicate_threshold: float
    exact_duplicates: tuple[tuple[str, ...], ...]
    near_duplicates: tuple[NearDuplicate, ...]
    stale: tuple[str, ...]
    never_retrieved: tuple[str, ...] | None
    secrets: tuple[SecretFinding, ...]
    without_provenance: tuple[str, ...]

    @property
    def exact_duplicate_count(self) -> int:
        """Facts that repeat an earlier one: each group but its first member."""
        return sum(len(group) - 1 for group in self.exact_duplicates)

    @property
    def near_duplicate_count(self) -> int:
        """Facts with at least one near duplicate."""
        return len({i for pair in self.near_duplicates for i in (pair.first, pair.second)})

    def rate(self, count: int) -> float:
        """`count` over the bucket's facts; 0.0 for an empty bucket."""
        return count / self.total if self.total else 0.0

    def as_dict(self) -> dict[str, Any]:
        never = self.never_retrieved
        return {
            "user_id": self.user_id,
            "bucket": self.bucket,
            "audited_at": self.audited_at,
            "total": self.total,
            "exact_duplicates": self._finding(
                self.exact_duplicate_count, groups=[list(group) for group in self.exact_duplicates]
            ),
            "near_duplicates": self._finding(
                self.near_duplicate_count,
                threshold=self.near_duplicate_threshold,
                pairs=[
                    {"ids": [pair.first, pair.second], "similarity": round(pair.similarity, 3)}
                    for pair in self.near_duplicates
                ],
            ),
            "stale": self._finding(
                len(self.stale), age_days=self.staleness_age_days, ids=list(self.stale)
            ),
            "never_retrieved": None
            if never is None
            else self._finding(len(never), ids=list(never)),
            "secrets": self._finding(
                len(self.secrets),
                facts=[{"id": s.fact_id, "reason": s.reason} for s in self.secrets],
            ),
            "without_provenance": self._finding(
                len(self.without_provenance), ids=list(self.without_provenance)
            ),
        }

    def _finding(self, count: int, **details: Any) -> dict[str, Any]:
        return {"count": count, "rate": round(self.rate(count), 4), **details}


def audit_bucket(
    snapshot: MemorySnapshot,
    *,
    now: datetime,
    staleness_age_days: int = 90,
    near_duplicate_threshold: float = 0.7,
    retrieved_ids: set[str] | None = None,
) -> AuditReport:
    """Audit the facts of `snapshot`'s bucket.

    Args:
        snapshot: the bucket to audit.
        now: the time staleness is measured against (naive means UTC).
        staleness_age_days: the age after which a fact without `expected_valid_days` is stale.
        near_duplicate_threshold: the token Jaccard similarity that makes a near duplicate.
        retrieved_ids: ids of facts ever returned by retrieval, or None when not tracked.

    Raises:
        ValueError: a non-positive age, or a threshold outside (0, 1].
    """
    if staleness_age_days <= 0:
        raise ValueError(f"staleness_age_days: must be positive, got {staleness_age_days}")
    if not 0 < near_duplicate_threshold <= 1:
        raise ValueError(
            f"near_duplicate_threshold: must be in (0, 1], got {near_duplicate_threshold}"
        )
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    facts = [snapshot.facts[fact_id] for fact_id in sorted(snapshot.facts)]
    secrets = []
    for fact in facts:
        found = fact_secret(fact)
        if found is not None:
            field, reason = found
            secrets.append(
                SecretFinding(fact["id"], reason if field == "content" else f"{field} {reason}")
            )
    return AuditReport(
        user_id=snapshot.user_id,
        bucket=snapshot.bucket,
        audited_at=now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        total=len(facts),
        staleness_age_days=staleness_age_days,
        near_duplicate_threshold=near_duplicate_threshold,
        exact_duplicates=_exact_duplicates(facts),
        near_duplicates=_near_duplicates(facts, near_duplicate_threshold),
        stale=tuple(f["id"] for f in facts if is_stale(f, now, staleness_age_days)),
        never_retrieved=None
        if retrieved_ids is None
        else tuple(f["id"] for f in facts if f["id"] not in retrieved_ids),
        secrets=tuple(secrets),
        without_provenance=tuple(f["id"] for f in facts if not _has_provenance(f.get("source"))),
    )


def _exact_duplicates(facts: list[Mapping[str, Any]]) -> tuple[tuple[str, ...], ...]:
    groups: dict[str, list[str]] = {}
    for fact in facts:
        groups.setdefault(normalized(fact["content"]), []).append(fact["id"])
    return tuple(tuple(ids) for ids in groups.values() if len(ids) > 1)


def _near_duplicates(facts: list[Mapping[str, Any]], threshold: float) -> tuple[NearDuplicate, ...]:
    # O(n²) over one bucket: 125k cheap comparisons at 500 facts, 50M at max_facts=10000.
    tokens = {fact["id"]: content_tokens(fact["content"]) for fact in facts}
    pairs = []
    for a, b in combinations(facts, 2):
        if a.get("category") != b.get("category"):
            continue
        if normalized(a["content"]) == normalized(b["content"]):
            continue  # an exact duplicate, reported as such
        similarity = jaccard(tokens[a["id"]], tokens[b["id"]])
        if similarity >= threshold:
            pairs.append(NearDuplicate(a["id"], b["id"], similarity))
    return tuple(pairs)


def _has_provenance(source: Any) -> bool:
    """A source that says where the fact came from: a stored `{type, ...}` or a public string."""
    kind = source.get("type") if isinstance(source, Mapping) else source
    return isinstance(kind, str) and kind not in ("", "unknown")
