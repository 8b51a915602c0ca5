"""Rules that keep a bucket healthy on every write: no exact duplicates, bounded capacity."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal

from deerflow.agents.memory.backends.deermem.deermem.core.fts_query import STOP_WORDS
from deerflow.agents.memory.backends.deermem.deermem.core.patterns import lazy_pattern
from deerflow.agents.memory.manager import DuplicateFactError, FactEvictedError

if TYPE_CHECKING:
    from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig

EvictionPolicyName = Literal["confidence", "hybrid-v1"]

# The longest `expected_valid_days` a fact may carry (a hundred years): past it a fact is simply
# never stale, and a hand-written 10**30 cannot overflow the date arithmetic.
MAX_VALID_DAYS: Final = 36_500

__all__ = [
    "MAX_VALID_DAYS",
    "CapacityPolicy",
    "EvictionPolicyName",
    "capacity_evictions",
    "choose_evictions",
    "confirmation_freshness",
    "content_tokens",
    "hybrid_score",
    "is_stale",
    "jaccard",
    "keep_order",
    "normalized",
    "normalized_heat",
    "parse_time",
    "refuse_duplicate",
    "tokenize",
]


def normalized(content: str) -> str:
    """Content as compared for exact duplicates: case-folded, whitespace collapsed."""
    return " ".join(content.casefold().split())


def refuse_duplicate(
    ids: Sequence[str], texts: list[str], content: str, *, ignore_id: str | None = None
) -> None:
    """Raise `DuplicateFactError` if another fact already says exactly this.

    `ids` and `texts` are the stored facts' ids and normalised contents, in the same order, so
    callers can reuse what they cached. The scan is `list.index`, in C: a full bucket's 500
    comparisons cost microseconds rather than a Python loop's tens.
    """
    wanted = normalized(content)
    try:
        at = texts.index(wanted)
        while ids[at] == ignore_id:
            at = texts.index(wanted, at + 1)
    except ValueError:
        return
    raise DuplicateFactError(
        f"an identical fact already exists: {ids[at]}", existing_fact_id=ids[at]
    )


def keep_order(fact: Mapping[str, Any]) -> tuple[float, str]:
    """What the `confidence` policy orders facts by: the least valuable sorts first (lowest
    confidence, then least recently updated). Depends on the fact alone, so callers may cache it.
    """
    # Called for every fact of a full bucket when uncached: the common types go first.
    updated = fact.get("updatedAt", "")
    return (_confidence(fact), updated if type(updated) is str else str(updated))


def _confidence(fact: Mapping[str, Any]) -> float:
    """The stored confidence; anything unreadable counts as 0.5, as in the reference."""
    value = fact.get("confidence")
    if type(value) is float and 0.0 <= value <= 1.0:  # what the storage holds
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.5
    number = float(value)
    return number if 0.0 <= number <= 1.0 else 0.5


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """How a full bucket chooses what goes: `confidence` or `hybrid-v1`."""

    max_facts: int
    name: EvictionPolicyName = "confidence"
    confidence_weight: float = 0.65
    confirmation_weight: float = 0.25
    access_weight: float = 0.10
    confirmation_half_life_days: float = 90.0
    access_half_life_days: float = 30.0
    correction_reserved_fraction: float = 0.10
    correction_reserved_max: int = 10

    @classmethod
    def from_config(cls, config: DeerMemConfig) -> CapacityPolicy:
        return cls(
            max_facts=config.max_facts,
            name=config.fact_eviction_policy,
            confidence_weight=config.eviction_confidence_weight,
            confirmation_weight=config.eviction_confirmation_weight,
            access_weight=config.eviction_access_weight,
            confirmation_half_life_days=config.eviction_confirmation_half_life_days,
            access_half_life_days=config.eviction_access_half_life_days,
            correction_reserved_fraction=config.eviction_correction_reserved_fraction,
            correction_reserved_max=config.eviction_correction_reserved_max,
        )

    @property
    def reserved_correction_slots(self) -> int:
        """Slots held for corrections under `hybrid-v1`: ceil(max_facts * fraction), capped."""
        wanted = math.ceil(round(self.max_facts * self.correction_reserved_fraction, 9))
        return max(0, min(self.correction_reserved_max, wanted, self.max_facts))


def confirmation_freshness(fact: Mapping[str, Any], now: datetime, half_life_days: float) -> float:
    """2^(-days since lastConfirmedAt / half-life); never confirmed: half that, from createdAt.

    A fact with no readable time scores 0; a time in the future counts as now.
    """
    confirmed = parse_time(fact.get("lastConfirmedAt"))
    if confirmed is not None:
        return _decay(now - confirmed, half_life_days)
    created = parse_time(fact.get("createdAt"))
    return 0.0 if created is None else 0.5 * _decay(now - created, half_life_days)


def normalized_heat(decayed_heat: float) -> float:
    """Access heat in 0..1: min(1, ln(1 + heat) / ln 9), so eight recent hits saturate it."""
    if not math.isfinite(decayed_heat) or decayed_heat <= 0:
        return 0.0
    return min(1.0, math.log1p(decayed_heat) / math.log(9))


def _decay(age: timedelta, half_life_days: float) -> float:
    days = max(age.total_seconds(), 0.0) / 86400
    return float(2.0 ** (-days / half_life_days))


def hybrid_score(
    fact: Mapping[str, Any], policy: CapacityPolicy, *, now: datetime, heat: float = 0.0
) -> tuple[float, dict[str, float]]:
    """The `hybrid-v1` score of a fact and its three components (each in 0..1).

    `heat` is the fact's access heat already decayed to `now` (see `usage.decayed_heat`).
    """
    components = {
        "confidence": _confidence(fact),
        "freshness": confirmation_freshness(fact, now, policy.confirmation_half_life_days),
        "access": normalized_heat(heat),
    }
    score = (
        policy.confidence_weight * components["confidence"]
        + policy.confirmation_weight * components["freshness"]
        + policy.access_weight * components["access"]
    )
    return score, components


def choose_evictions(
    facts: Sequence[Mapping[str, Any]],
    policy: CapacityPolicy,
    *,
    now: datetime,
    heat: Mapping[str, float] | None = None,
    order_keys: Sequence[tuple[float, str]] | None = None,
) -> list[str]:
    """The ids that must go so that at most `policy.max_facts` of `facts` stay, weakest first.

    The one capacity decision of DeerMem, used by manual creates and by the extraction apply.
    Pure: the access heat (fact id → heat decayed to `now`) comes in as an argument; facts
    absent from it have none. Nothing goes while the bucket is within its capacity.
    `order_keys`, when given, is `keep_order` of each of `facts`, in order (a caller's cache).

    * `confidence`: the lowest confidence goes first, then the least recently updated.
    * `hybrid-v1`: the lowest `hybrid_score` goes first (ties as above), except that up to
      `reserved_correction_slots` of the kept places go first to the best-scoring corrections.
    """
    overflow = len(facts) - policy.max_facts
    if overflow <= 0:
        return []
    if policy.name == "confidence":
        keys = list(map(keep_order, facts)) if order_keys is None else order_keys
        weakest = heapq.nsmallest(overflow, range(len(facts)), key=keys.__getitem__)
        return [str(facts[at]["id"]) for at in weakest]
    usage = heat or {}
    scores: dict[str, float] = {}
    for fact in facts:
        fact_id = str(fact["id"])
        scores[fact_id], _ = hybrid_score(fact, policy, now=now, heat=usage.get(fact_id, 0.0))

    def strength(fact: Mapping[str, Any]) -> tuple[float, float, str]:
        confidence, updated = keep_order(fact)
        return (scores[str(fact["id"])], confidence, updated)

    # Weakest first, ties in the given order (as `heapq.nsmallest` does for `confidence`).
    ranked = sorted(facts, key=strength)[::-1]
    reserved = [f for f in ranked if f.get("category") == "correction"]
    reserved = reserved[: policy.reserved_correction_slots]
    kept = {str(f["id"]) for f in reserved}
    for fact in ranked:
        if len(kept) >= policy.max_facts:
            break
        kept.add(str(fact["id"]))
    return [str(f["id"]) for f in reversed(ranked) if str(f["id"]) not in kept]


def capacity_evictions(
    facts: Mapping[str, Mapping[str, Any]],
    new: Mapping[str, Any],
    policy: CapacityPolicy,
    *,
    now: datetime,
    heat: Mapping[str, float] | None = None,
    order_keys: Sequence[tuple[float, str]] | None = None,
) -> list[str]:
    """Ids to evict so that the bucket plus `new` holds at most `max_facts` (`choose_evictions`).

    `order_keys`, when given, is `keep_order` of each of `facts.values()`, in order.

    Raises:
        FactEvictedError: `new` itself ranks lowest and would be evicted at once.
    """
    evicted = choose_evictions(
        [*facts.values(), new],
        policy,
        now=now,
        heat=heat,
        order_keys=None if order_keys is None else [*order_keys, keep_order(new)],
    )
    if str(new["id"]) in evicted:
        ranking = (
            f"confidence {new['confidence']}"
            if policy.name == "confidence"
            else f"policy hybrid-v1, score {hybrid_score(new, policy, now=now)[0]:.3f}"
        )
        raise FactEvictedError(
            f"the fact was not stored: the bucket is full (max_facts={policy.max_facts}) and "
            f"every stored fact ranks above it ({ranking})"
        )
    return evicted


_CJK: Final = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3\uf900-\ufaff"
_TOKEN: Final = lazy_pattern(rf"(?P<cjk>[{_CJK}]+)|[^\W_{_CJK}]+")
_MAX_CHARS: Final = 4096  # bounds the work per fact and per query


def tokenize(text: str) -> list[str]:
    """Lower-cased words (letters and digits, split at `_` and punctuation) and CJK bigrams.

    A CJK run of one character is kept as is; longer runs become overlapping bigrams, which is
    how Chinese is matched without a segmenter ("使用pnpm" -> "使用", "pnpm").
    """
    tokens: list[str] = []
    for match in _TOKEN().finditer(text[:_MAX_CHARS].lower()):
        run = match.group()
        if match.group("cjk"):
            tokens.extend(run[i : i + 2] for i in range(max(len(run) - 1, 1)))
        else:
            tokens.append(run)
    return tokens


def content_tokens(text: str) -> frozenset[str]:
    """The words (and CJK bigrams) that carry a fact's meaning, for near-duplicate checks."""
    # The stop words of search: "The user prefers X in chat" repeats "User prefers X".
    return frozenset(tokenize(text)) - STOP_WORDS


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Token-set overlap in 0..1 (0 for two empty sets)."""
    return len(a & b) / len(a | b) if a or b else 0.0


def is_stale(fact: Mapping[str, Any], now: datetime, default_days: int) -> bool:
    """Neither updated nor confirmed within its valid age; a fact with no readable time is."""
    valid_days = fact.get("expected_valid_days")
    if isinstance(valid_days, bool) or not isinstance(valid_days, int) or valid_days <= 0:
        valid_days = default_days
    valid_days = min(valid_days, MAX_VALID_DAYS)
    times = [parse_time(fact.get(key)) for key in ("updatedAt", "lastConfirmedAt", "createdAt")]
    known = [time for time in times if time is not None]
    return not known or now - max(known) > timedelta(days=valid_days)


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 time (naive means UTC), or None when it is missing or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
