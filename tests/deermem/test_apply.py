"""The apply step: one extraction becomes one change, in the fixed order, with guardrails."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.pipeline.apply import (
    apply_extraction,
    stale_candidates,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.extraction import (
    Consolidation,
    Extraction,
    Labels,
    NewFact,
    Removal,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
STAMP = "2026-12-02T12:00:00Z"
USER = Labels("user", "durable", "descriptive")


def proposal(
    content: str, confidence: float = 0.9, category: str = "preference", **kw: Any
) -> NewFact:
    return NewFact(content, category, confidence, USER, **kw)


def extraction(**fields: Any) -> Extraction:
    base: dict[str, Any] = {
        "summaries": {},
        "new_facts": (),
        "reinforce": (),
        "removals": (),
        "stale_remove": (),
        "stale_extend": (),
        "consolidations": (),
        "rejected": {},
    }
    return Extraction(**(base | fields))


@pytest.fixture
def manager(tmp_path: Path) -> DeerMemMemoryManager:
    return DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})


def run(
    manager: DeerMemMemoryManager,
    result: Extraction,
    signals: tuple[str, ...] = (),
    **settings: Any,
) -> dict[str, int]:
    """Apply `result` for user u and commit it, as the pipeline does."""
    config = DeerMemConfig(storage_path=manager.backend_config["storage_path"], **settings)
    snapshot = manager.storage.load("u", None)
    outcome = apply_extraction(
        snapshot, result, config, now=NOW, stamp=STAMP, thread_id="t1", signals=signals
    )
    manager.storage.save("u", outcome.changes)
    return outcome.metrics


def contents(manager: DeerMemMemoryManager) -> list[str]:
    return sorted(f["content"] for f in manager.reload_memory(user_id="u")["facts"])


def test_new_facts_pass_the_confidence_threshold_and_carry_provenance(
    manager: DeerMemMemoryManager,
) -> None:
    metrics = run(
        manager,
        extraction(new_facts=(proposal("Prefers uv over pip"), proposal("Maybe likes jazz", 0.4))),
    )
    (fact,) = manager.reload_memory(user_id="u")["facts"]
    assert (fact["content"], fact["source"]) == ("Prefers uv over pip", "t1")
    assert metrics["rejected_low_confidence"] == 1
    assert metrics["facts_passed_confidence"] == 1


def test_a_correction_keeps_what_went_wrong(manager: DeerMemMemoryManager) -> None:
    run(
        manager,
        extraction(
            new_facts=(proposal("Use pnpm, not npm", 0.97, "correction", source_error="used npm"),)
        ),
    )
    context = manager.get_context("u")
    assert "- [correction | 0.97] Use pnpm, not npm (avoid: used npm)" in context


def test_near_duplicates_merge_into_the_existing_fact(manager: DeerMemMemoryManager) -> None:
    run(
        manager,
        extraction(new_facts=(proposal("User prefers concise answers", 0.8),)),
        fact_dedup_enabled=True,
    )
    metrics = run(
        manager,
        extraction(new_facts=(proposal("The user prefers concise answers in chat", 0.9),)),
        fact_dedup_enabled=True,
    )
    (fact,) = manager.reload_memory(user_id="u")["facts"]
    assert fact["content"] == "User prefers concise answers"
    assert fact["confidence"] == 0.9
    assert fact["confirmationCount"] == 1
    assert metrics["facts_merged_dedup"] == 1
    # The merged wording is not lost: the change's audit entry names it and where it went.
    (entry,) = manager.get_history(user_id="u", limit=1)
    merged = f'merged near repeats {fact["id"]} <- "The user prefers concise answers in chat"'
    assert merged in entry["reason"]


def test_near_duplicates_that_differ_in_polarity_or_number_stay_apart(
    manager: DeerMemMemoryManager,
) -> None:
    # Word overlap 0.75 and 0.71, above the 0.7 that merges: a merge would drop the new fact.
    stored = ("Reads email on weekends", "Has worked at Acme as a backend developer for 3 years")
    new = ("Never reads email on weekends", "Has worked at Acme as a backend developer for 5 years")
    run(manager, extraction(new_facts=tuple(map(proposal, stored))), fact_dedup_enabled=True)
    metrics = run(manager, extraction(new_facts=tuple(map(proposal, new))), fact_dedup_enabled=True)
    assert contents(manager) == sorted(stored + new)
    assert metrics.get("facts_merged_dedup", 0) == 0


def test_without_dedup_only_exact_repeats_merge(manager: DeerMemMemoryManager) -> None:
    run(manager, extraction(new_facts=(proposal("User prefers concise answers"),)))
    run(
        manager,
        extraction(
            new_facts=(
                proposal("user prefers  CONCISE answers"),
                proposal("The user prefers concise answers in chat"),
            )
        ),
    )
    assert len(contents(manager)) == 2


def test_capacity_evicts_the_weakest_and_revert_brings_one_back(
    manager: DeerMemMemoryManager,
) -> None:
    proposals = tuple(proposal(f"candidate fact {i}", 0.71 + i / 100) for i in range(15))
    metrics = run(manager, extraction(new_facts=proposals), max_facts=10)
    kept = contents(manager)
    assert len(kept) == 10
    assert "candidate fact 0" not in kept
    assert "candidate fact 14" in kept
    assert metrics["facts_evicted"] == 5
    run(manager, extraction(new_facts=(proposal("one more", 0.99),)), max_facts=10)
    entry = manager.get_history(user_id="u", limit=1)[0]
    assert "capacity evicted" in entry["reason"]
    (evicted,) = entry["before"]["facts"]
    manager.revert_change(entry["change_id"], user_id="u")
    assert evicted["content"] in contents(manager)


def test_reinforcement_needs_the_signal(manager: DeerMemMemoryManager) -> None:
    _, fact_id = manager.create_fact("Works in Lisbon", user_id="u")
    run(manager, extraction(reinforce=(fact_id,)))
    assert "confirmationCount" not in manager.reload_memory(user_id="u")["facts"][0]
    run(manager, extraction(reinforce=(fact_id,)), signals=("reinforcement",))
    assert manager.reload_memory(user_id="u")["facts"][0]["confirmationCount"] == 1


def test_removals_need_a_reason_and_may_bring_a_replacement(manager: DeerMemMemoryManager) -> None:
    _, lisbon = manager.create_fact("Lives in Lisbon", user_id="u")
    _, tea = manager.create_fact("Drinks tea", user_id="u")
    run(
        manager,
        extraction(
            removals=(
                Removal(
                    lisbon or "", "moved to Porto", proposal("Lives in Porto", category="identity")
                ),
                Removal(tea or "", "  "),
            )
        ),
    )
    assert contents(manager) == ["Drinks tea", "Lives in Porto"]


def test_summaries_are_written_and_secrets_refused(manager: DeerMemMemoryManager) -> None:
    metrics = run(
        manager,
        extraction(
            summaries={
                "user": {
                    "workContext": "Platform engineer",
                    "topOfMind": "token sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2",
                }
            },
            new_facts=(proposal("db password: hunter2hunter2"),),
        ),
    )
    document = manager.reload_memory(user_id="u")
    assert document["user"]["workContext"]["summary"] == "Platform engineer"
    assert document["user"]["topOfMind"]["summary"] == ""
    assert document["facts"] == []
    assert metrics["rejected_secret"] == 2


def test_staleness_removes_only_candidates_within_the_cap(manager: DeerMemMemoryManager) -> None:
    old = "2026-01-01T00:00:00Z"
    manager.import_memory(
        {
            "facts": [
                {
                    "content": f"old fact {i}",
                    "confidence": 0.5 + i / 100,
                    "createdAt": old,
                    "updatedAt": old,
                }
                for i in range(5)
            ]
            + [{"content": "fresh fact", "createdAt": STAMP, "updatedAt": STAMP}]
        },
        user_id="u",
    )
    config = DeerMemConfig(
        storage_path=manager.backend_config["storage_path"], staleness_review_enabled=True
    )
    snapshot = manager.storage.load("u", None)
    candidates = stale_candidates(snapshot, config, NOW)
    assert len(candidates) == 5
    ids = {f["content"]: f["id"] for f in snapshot.facts.values()}
    run(
        manager,
        extraction(
            stale_remove=(
                ids["old fact 0"],
                ids["old fact 1"],
                ids["old fact 2"],
                ids["fresh fact"],
            ),
            stale_extend=((ids["old fact 3"], 30),),
        ),
        staleness_review_enabled=True,
        staleness_max_removals_per_cycle=2,
    )
    remaining = {f["content"]: f for f in manager.reload_memory(user_id="u")["facts"]}
    assert sorted(remaining) == ["fresh fact", "old fact 2", "old fact 3", "old fact 4"]
    assert remaining["old fact 3"]["expected_valid_days"] == 335 + 30


def test_consolidation_merges_sources_without_raising_confidence(
    manager: DeerMemMemoryManager,
) -> None:
    first = manager.create_fact("Uses black for Python", "preference", 0.8, user_id="u")[1]
    second = manager.create_fact(
        "Formats Python with line length 100", "preference", 0.75, user_id="u"
    )[1]
    group = Consolidation(
        (first or "", second or ""),
        "Formats Python with black, line length 100",
        "preference",
        0.95,
        USER,
    )
    run(manager, extraction(consolidations=(group,)), consolidation_enabled=True)
    (fact,) = manager.reload_memory(user_id="u")["facts"]
    assert fact["content"] == "Formats Python with black, line length 100"
    assert fact["confidence"] == 0.8
    assert sorted(fact["consolidatedFrom"]) == sorted([first, second])
    assert fact["source"] == "consolidation"
