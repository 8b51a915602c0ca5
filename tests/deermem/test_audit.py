"""The bucket audit: duplicates, staleness, retrieval, secrets, provenance, rates."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem.deermem.audit import audit_bucket
from deerflow.agents.memory.backends.deermem.deermem.core.changes import MemorySnapshot

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
RECENT = "2026-11-20T10:00:00Z"
OLD = "2026-01-01T10:00:00Z"


def record(fact_id: str, content: str, **fields: Any) -> dict[str, Any]:
    stored: dict[str, Any] = {
        "id": fact_id,
        "content": content,
        "category": "preference",
        "confidence": 0.8,
        "createdAt": RECENT,
        "updatedAt": RECENT,
        "source": {"type": "conversation", "threadId": "t1"},
    }
    stored.update(fields)
    return stored


def snapshot(*records: Mapping[str, Any]) -> MemorySnapshot:
    return MemorySnapshot(
        user_id="alice",
        bucket="__default__",
        revision=3,
        last_updated=RECENT,
        summaries={},
        facts={r["id"]: r for r in records},
        buckets=("__default__",),
    )


def test_a_healthy_bucket_has_no_findings() -> None:
    report = audit_bucket(snapshot(record("fact_01", "Prefers uv over pip")), now=NOW)
    assert (report.total, report.exact_duplicates, report.near_duplicates) == (1, (), ())
    assert (report.stale, report.secrets, report.without_provenance) == ((), (), ())
    assert report.never_retrieved is None, "not tracked"
    assert report.as_dict()["never_retrieved"] is None


def test_exact_duplicates_ignore_case_and_spacing() -> None:
    report = audit_bucket(
        snapshot(
            record("fact_01", "Prefers uv over pip"),
            record("fact_02", "  prefers UV   over pip"),
            record("fact_03", "Prefers uv over pip", category="knowledge"),
            record("fact_04", "Lives in Oslo"),
        ),
        now=NOW,
    )
    assert report.exact_duplicates == (("fact_01", "fact_02", "fact_03"),)
    assert report.exact_duplicate_count == 2
    assert report.as_dict()["exact_duplicates"]["rate"] == 0.5
    assert report.near_duplicates == (), "exact duplicates are not counted twice"


def test_near_duplicates_stay_within_a_category() -> None:
    facts = snapshot(
        record("fact_01", "User prefers uv over pip for Python projects"),
        record("fact_02", "User prefers uv over pip for Python work"),
        record("fact_03", "User prefers uv over pip for Python tasks", category="goal"),
        record("fact_04", "用户喜欢使用pnpm管理依赖"),
        record("fact_05", "用户喜欢使用pnpm管理依赖包"),
        record("fact_06", "Lives in Oslo"),
    )
    report = audit_bucket(facts, now=NOW)
    pairs = [(p.first, p.second) for p in report.near_duplicates]
    assert pairs == [("fact_01", "fact_02"), ("fact_04", "fact_05")]
    assert all(p.similarity >= 0.7 for p in report.near_duplicates)
    assert report.near_duplicate_count == 4
    assert audit_bucket(facts, now=NOW, near_duplicate_threshold=1.0).near_duplicates == ()


def test_stale_facts_use_the_latest_update_or_confirmation() -> None:
    report = audit_bucket(
        snapshot(
            record("fact_01", "old", updatedAt=OLD, createdAt=OLD),
            record("fact_02", "old but confirmed", updatedAt=OLD, lastConfirmedAt=RECENT),
            record("fact_03", "old, valid for a year", updatedAt=OLD, expected_valid_days=365),
            record("fact_04", "recent, valid a day", expected_valid_days=1, updatedAt=RECENT),
            record("fact_05", "no time at all", createdAt="", updatedAt="soon"),
            record("fact_06", "fresh"),
        ),
        now=NOW,
    )
    assert report.stale == ("fact_01", "fact_04", "fact_05")
    lenient = audit_bucket(
        snapshot(record("fact_01", "x", updatedAt=OLD)), now=NOW, staleness_age_days=400
    )
    assert lenient.stale == ()


def test_never_retrieved_is_reported_when_tracked() -> None:
    facts = snapshot(record("fact_01", "a"), record("fact_02", "b"))
    report = audit_bucket(facts, now=NOW, retrieved_ids={"fact_02", "fact_gone"})
    assert report.never_retrieved == ("fact_01",)
    assert report.as_dict()["never_retrieved"] == {"count": 1, "rate": 0.5, "ids": ["fact_01"]}


def test_secrets_and_missing_provenance_are_flagged() -> None:
    report = audit_bucket(
        snapshot(
            record("fact_01", "api_key=sk-proj-4fG7hK2mN9pQ3rS8tV1wX6yZ0aB5cD"),
            record("fact_02", "I forgot my password yesterday"),
            record("fact_03", "no source", source=None),
            record("fact_04", "unknown source", source={"type": "unknown", "threadId": None}),
            record("fact_05", "public string source", source="thread-9"),
            record("fact_06", "public unknown", source="unknown"),
        ),
        now=NOW,
    )
    assert [s.fact_id for s in report.secrets] == ["fact_01"]
    assert report.secrets[0].reason
    assert report.without_provenance == ("fact_03", "fact_04", "fact_06")


def test_the_report_is_json_and_rates_are_over_the_total() -> None:
    report = audit_bucket(
        snapshot(
            record("fact_01", "a", source=None), record("fact_02", "b"), record("fact_03", "c")
        ),
        now=NOW.replace(tzinfo=None),
        retrieved_ids=set(),
    )
    data = json.loads(json.dumps(report.as_dict()))
    assert (data["user_id"], data["bucket"], data["total"]) == ("alice", "__default__", 3)
    assert data["audited_at"] == "2026-12-01T10:00:00Z"
    assert data["without_provenance"] == {"count": 1, "rate": 0.3333, "ids": ["fact_01"]}
    assert data["never_retrieved"]["rate"] == 1.0
    assert data["near_duplicates"] == {"count": 0, "rate": 0.0, "threshold": 0.7, "pairs": []}
    assert data["stale"]["age_days"] == 90


def test_an_empty_bucket_has_zero_rates() -> None:
    data = audit_bucket(snapshot(), now=NOW, retrieved_ids=set()).as_dict()
    assert data["total"] == 0
    assert data["never_retrieved"] == {"count": 0, "rate": 0.0, "ids": []}


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"staleness_age_days": 0}, "staleness_age_days"),
        ({"near_duplicate_threshold": 0.0}, "near_duplicate_threshold"),
        ({"near_duplicate_threshold": 1.5}, "near_duplicate_threshold"),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        audit_bucket(snapshot(), now=NOW, **settings)
