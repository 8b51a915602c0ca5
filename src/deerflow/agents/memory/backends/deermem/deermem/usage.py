"""Access heat of facts: how often `search` returned them lately (`hybrid-v1`).

One small sidecar per bucket, `agents/{bucket}/.metadata/fact-usage.json`:

    {"version": 1, "facts": {"fact_…": {"accessHeat": 2.7, "accessCount": 4,
                                        "lastAccessedAt": "2026-…Z"}}}

It is derived usage data, not memory: a sidecar that cannot be read is logged and started afresh,
never an error. It holds ids and numbers only, at most `MAX_ENTRIES` of them (the coldest go).
Writes are atomic; concurrent processes may lose an increment, never the file. The first write of
a sidecar in a process removes the temp files that writers killed mid-write left beside it.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Protocol

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.atomic import (
    atomic_write,
    remove_stale_temps,
)
from deerflow.agents.memory.backends.deermem.deermem.core.paths import safe_user_id, user_paths
from deerflow.agents.memory.backends.deermem.deermem.governance import parse_time

__all__ = [
    "MAX_ENTRIES",
    "USAGE_FILE",
    "FactUsage",
    "UsageEntry",
    "UsageStore",
    "capacity_heat",
    "decayed_heat",
    "heat",
    "record_hits",
]

logger = logging.getLogger(__name__)

USAGE_FILE: Final = "fact-usage.json"
VERSION: Final = 1
MAX_ENTRIES: Final = 1000
SWEPT_SIZE: Final = 10_000  # sidecars remembered as swept; forgetting one only sweeps it again


@dataclass(frozen=True, slots=True)
class UsageEntry:
    """The access record of one fact."""

    heat: float
    count: int
    last_accessed: datetime

    def as_dict(self) -> dict[str, Any]:
        return {
            "accessHeat": round(self.heat, 6),
            "accessCount": self.count,
            "lastAccessedAt": self.last_accessed.isoformat().replace("+00:00", "Z"),
        }


def decayed_heat(entry: UsageEntry, now: datetime, half_life_days: float) -> float:
    """The entry's heat decayed to `now`: heat * 2^(-days since last access / half-life)."""
    days = max((now - entry.last_accessed).total_seconds(), 0.0) / 86400
    return entry.heat * float(2.0 ** (-days / half_life_days))


def record_hits(
    entries: Mapping[str, UsageEntry],
    fact_ids: Iterable[str],
    now: datetime,
    half_life_days: float,
) -> dict[str, UsageEntry]:
    """`entries` after one search returned `fact_ids`: each decays to now, then gains 1.

    At most `MAX_ENTRIES` are kept: the facts just hit, then the hottest at `now`.
    """
    updated = dict(entries)
    hit = list(dict.fromkeys(fact_ids))
    for fact_id in hit:
        old = updated.get(fact_id)
        heat = 1.0 if old is None else decayed_heat(old, now, half_life_days) + 1.0
        count = 1 if old is None else old.count + 1
        updated[fact_id] = UsageEntry(heat, count, now)
    if len(updated) > MAX_ENTRIES:
        just_hit = set(hit)
        hottest = sorted(
            updated.items(),
            key=lambda item: (item[0] in just_hit, decayed_heat(item[1], now, half_life_days)),
            reverse=True,
        )
        updated = dict(hottest[:MAX_ENTRIES])
    return updated


class UsageStore(Protocol):
    """Where an engine keeps how often each fact was found by search."""

    def load(self, user_id: str, bucket: str) -> dict[str, UsageEntry]: ...

    def record(
        self,
        user_id: str,
        bucket: str,
        fact_ids: Iterable[str],
        now: datetime,
        half_life_days: float,
    ) -> None: ...


def heat(
    store: UsageStore, user_id: str, bucket: str, now: datetime, half_life_days: float
) -> dict[str, float]:
    """Fact id → heat decayed to `now`, the input of the capacity policy."""
    return {
        fact_id: decayed_heat(entry, now, half_life_days)
        for fact_id, entry in store.load(user_id, bucket).items()
    }


def capacity_heat(
    store: UsageStore, config: DeerMemConfig, user_id: str, bucket: str, now: datetime
) -> dict[str, float] | None:
    """The heat the capacity policy needs: only `hybrid-v1` reads the usage store."""
    if config.fact_eviction_policy != "hybrid-v1":
        return None
    return heat(store, user_id, bucket, now, config.eviction_access_half_life_days)


class FactUsage:
    """The access-heat sidecars under one storage root (the files engine's `UsageStore`)."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._swept: set[Path] = set()

    def path(self, user_id: str, bucket: str) -> Path:
        return user_paths(self._root, safe_user_id(user_id)).metadata_dir(bucket) / USAGE_FILE

    def load(self, user_id: str, bucket: str) -> dict[str, UsageEntry]:
        """The bucket's entries; empty (with a warning) when the sidecar cannot be read."""
        path = self.path(user_id, bucket)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError:
            logger.warning("fact usage %s is unreadable; access heat starts afresh", path)
            return {}
        try:
            document = json.loads(raw)
            facts = document["facts"]
            if not isinstance(facts, dict):
                raise TypeError("facts is not an object")
        except (ValueError, TypeError, KeyError):
            logger.warning("fact usage %s is corrupt; access heat starts afresh", path)
            return {}
        entries = {fact_id: _entry(value) for fact_id, value in facts.items()}
        return {fact_id: entry for fact_id, entry in entries.items() if entry is not None}

    def record(
        self,
        user_id: str,
        bucket: str,
        fact_ids: Iterable[str],
        now: datetime,
        half_life_days: float,
    ) -> None:
        """Count one access of each of `fact_ids` (facts that still exist) and save atomically."""
        ids = list(fact_ids)
        if not ids:
            return
        with self._lock:
            entries = record_hits(self.load(user_id, bucket), ids, now, half_life_days)
            document = {
                "version": VERSION,
                "facts": {fact_id: entry.as_dict() for fact_id, entry in sorted(entries.items())},
            }
            data = json.dumps(document, indent=1, sort_keys=True).encode("utf-8") + b"\n"
            path = self.path(user_id, bucket)
            atomic_write(path, data)
            if path not in self._swept:
                # Other processes write it without a shared lock, so only the temp files of
                # writers that have ended go (one that loses its temp file loses an increment).
                remove_stale_temps(path, only_of_ended_processes=True)
                if len(self._swept) >= SWEPT_SIZE:
                    self._swept.clear()
                self._swept.add(path)


def _entry(value: Any) -> UsageEntry | None:
    """One stored entry, or None when it is malformed (it is dropped, not an error)."""
    if not isinstance(value, dict):
        return None
    heat, count = value.get("accessHeat"), value.get("accessCount")
    last = parse_time(value.get("lastAccessedAt"))
    if (
        isinstance(heat, bool)
        or not isinstance(heat, int | float)
        or not math.isfinite(heat)
        or heat < 0
        or isinstance(count, bool)
        or not isinstance(count, int)
        or count < 0
        or last is None
    ):
        return None
    return UsageEntry(float(heat), count, last)
