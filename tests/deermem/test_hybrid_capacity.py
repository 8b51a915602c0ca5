"""The `hybrid-v1` capacity policy: score, correction reserve, access heat sidecar."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig, parse_config
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet
from deerflow.agents.memory.backends.deermem.deermem.core.paths import UserPaths
from deerflow.agents.memory.backends.deermem.deermem.governance import (
    CapacityPolicy,
    capacity_evictions,
    choose_evictions,
    confirmation_freshness,
    hybrid_score,
    keep_order,
    normalized_heat,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.apply import apply_extraction
from deerflow.agents.memory.backends.deermem.deermem.pipeline.extraction import (
    Extraction,
    Labels,
    NewFact,
)
from deerflow.agents.memory.backends.deermem.deermem.usage import (
    MAX_ENTRIES,
    FactUsage,
    UsageEntry,
    decayed_heat,
    heat,
    record_hits,
)
from deerflow.agents.memory.manager import FactEvictedError

from .pipeline_helpers import ScriptedModel, reply

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
HYBRID = CapacityPolicy(max_facts=10, name="hybrid-v1")
CONFIDENCE = CapacityPolicy(max_facts=10)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def fact(
    number: int,
    confidence: float,
    *,
    category: str = "preference",
    created_days_ago: float = 200,
    confirmed_days_ago: float | None = None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": f"fact_{number:08x}",
        "category": category,
        "confidence": confidence,
        "createdAt": iso(NOW - timedelta(days=created_days_ago)),
        "updatedAt": iso(NOW - timedelta(days=created_days_ago)),
        "content": f"fact number {number}",
    }
    if confirmed_days_ago is not None:
        record["lastConfirmedAt"] = iso(NOW - timedelta(days=confirmed_days_ago))
    return record


def usage_path(root: Path, user: str = "u", bucket: str = "__default__") -> Path:
    return UserPaths(root, user).metadata_dir(bucket) / "fact-usage.json"


# -- scoring ---------------------------------------------------------------------------------


def test_confirmation_freshness_halves_every_half_life_and_never_confirmed_counts_half() -> None:
    assert confirmation_freshness(fact(1, 0.8, confirmed_days_ago=0), NOW, 90) == 1.0
    assert confirmation_freshness(fact(1, 0.8, confirmed_days_ago=90), NOW, 90) == 0.5
    assert confirmation_freshness(fact(1, 0.8, created_days_ago=0), NOW, 90) == 0.5
    assert confirmation_freshness(fact(1, 0.8, created_days_ago=90), NOW, 90) == 0.25
    unreadable = fact(1, 0.8) | {"createdAt": "yesterday"}
    assert confirmation_freshness(unreadable, NOW, 90) == 0.0
    future = fact(1, 0.8, confirmed_days_ago=-5)
    assert confirmation_freshness(future, NOW, 90) == 1.0


def test_access_heat_is_log_normalised_and_decays_with_its_half_life() -> None:
    assert normalized_heat(0) == 0.0
    assert normalized_heat(-1) == 0.0
    assert normalized_heat(2) == pytest.approx(0.5)  # ln 3 / ln 9
    assert normalized_heat(8) == pytest.approx(1.0)
    assert normalized_heat(1000) == 1.0
    entry = UsageEntry(heat=4.0, count=4, last_accessed=NOW - timedelta(days=30))
    assert decayed_heat(entry, NOW, 30) == pytest.approx(2.0)


def test_hybrid_score_weighs_confidence_freshness_and_heat() -> None:
    record = fact(1, 0.8, confirmed_days_ago=90)
    score, components = hybrid_score(record, HYBRID, now=NOW, heat=2.0)
    assert components == {
        "confidence": 0.8,
        "freshness": 0.5,
        "access": pytest.approx(0.5),
    }
    assert score == pytest.approx(0.65 * 0.8 + 0.25 * 0.5 + 0.10 * 0.5)
    bad_confidence = fact(2, 0.8) | {"confidence": "high"}
    assert hybrid_score(bad_confidence, HYBRID, now=NOW)[1]["confidence"] == 0.5


def test_record_hits_decays_adds_one_and_stays_bounded() -> None:
    old = UsageEntry(heat=2.0, count=2, last_accessed=NOW - timedelta(days=30))
    entries = record_hits({"fact_00000001": old}, ["fact_00000001", "fact_00000002"], NOW, 30)
    assert entries["fact_00000001"] == UsageEntry(2.0, 3, NOW)
    assert entries["fact_00000002"] == UsageEntry(1.0, 1, NOW)
    many = {f"fact_{i:08x}": UsageEntry(float(i), 1, NOW) for i in range(MAX_ENTRIES + 5)}
    bounded = record_hits(many, ["fact_ffffffff"], NOW, 30)
    assert len(bounded) == MAX_ENTRIES
    assert "fact_ffffffff" in bounded
    assert "fact_00000000" not in bounded


# -- choosing what goes ------------------------------------------------------------------------


def bucket_with_a_hot_fact() -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Ten old unconfirmed facts at 0.8 and one at 0.7 confirmed today and often searched."""
    facts = [fact(i, 0.8) for i in range(1, 11)]
    hot = fact(99, 0.7, confirmed_days_ago=0)
    return [hot, *facts], {hot["id"]: 8.0}


def test_a_confirmed_often_searched_fact_survives_where_confidence_would_evict_it() -> None:
    facts, heat = bucket_with_a_hot_fact()
    hot_id = facts[0]["id"]
    assert choose_evictions(facts, CONFIDENCE, now=NOW, heat=heat) == [hot_id]
    evicted = choose_evictions(facts, HYBRID, now=NOW, heat=heat)
    assert len(evicted) == 1
    assert evicted != [hot_id]
    # Without its heat and its confirmation it is the weakest again.
    cold = [facts[0] | {"lastConfirmedAt": iso(NOW - timedelta(days=400))}, *facts[1:]]
    assert choose_evictions(cold, HYBRID, now=NOW) == [hot_id]


def test_kept_order_keys_choose_exactly_what_the_facts_themselves_would() -> None:
    # Few distinct values, so ties are many and the order within them decides.
    facts = [
        fact(i, (0.3, 0.5, 0.7)[i % 3], created_days_ago=i % 2) | {"updatedAt": f"t{i % 4}"}
        for i in range(25)
    ]
    keys = [keep_order(f) for f in facts]
    for policy in (CONFIDENCE, HYBRID):
        expected = choose_evictions(facts, policy, now=NOW)
        assert len(expected) == 15
        assert choose_evictions(facts, policy, now=NOW, order_keys=keys) == expected
    # The three weakest tie on both keys: they go in the order given.
    assert choose_evictions(facts, CONFIDENCE, now=NOW)[:3] == [
        "fact_00000000",
        "fact_0000000c",
        "fact_00000018",
    ]
    backwards = facts[::-1]
    assert choose_evictions(backwards, CONFIDENCE, now=NOW, order_keys=keys[::-1])[:3] == [
        "fact_00000018",
        "fact_0000000c",
        "fact_00000000",
    ]


def test_nothing_goes_within_capacity_and_the_weakest_go_first() -> None:
    facts = [fact(i, 0.5 + i / 100) for i in range(10)]
    assert choose_evictions(facts, HYBRID, now=NOW) == []
    more = [*facts, fact(10, 0.95), fact(11, 0.96)]
    assert choose_evictions(more, HYBRID, now=NOW) == ["fact_00000000", "fact_00000001"]
    assert choose_evictions(more, CONFIDENCE, now=NOW) == ["fact_00000000", "fact_00000001"]


def test_correction_reserve_keeps_the_best_corrections_and_releases_unused_slots() -> None:
    assert HYBRID.reserved_correction_slots == 1
    assert CapacityPolicy(max_facts=100, name="hybrid-v1").reserved_correction_slots == 10
    assert CapacityPolicy(max_facts=500, name="hybrid-v1").reserved_correction_slots == 10
    assert CapacityPolicy(max_facts=11, name="hybrid-v1").reserved_correction_slots == 2
    none = CapacityPolicy(max_facts=100, name="hybrid-v1", correction_reserved_fraction=0)
    assert none.reserved_correction_slots == 0

    strong = [fact(i, 0.95, created_days_ago=0) for i in range(10)]
    weak_corrections = [
        fact(20, 0.3, category="correction"),
        fact(21, 0.4, category="correction"),
    ]
    evicted = choose_evictions([*strong, *weak_corrections], HYBRID, now=NOW)
    # The best correction (0.4) holds the one reserved slot; the other competes and loses,
    # and so does the first of the equally strong facts.
    assert evicted == ["fact_00000014", "fact_00000000"]
    kept = {f["id"] for f in [*strong, *weak_corrections]} - set(evicted)
    assert "fact_00000015" in kept
    assert len(kept) == 10
    # The confidence policy has no reserve.
    assert set(choose_evictions([*strong, *weak_corrections], CONFIDENCE, now=NOW)) == {
        "fact_00000014",
        "fact_00000015",
    }
    # With no correction present, the reserved slot goes back to general competition.
    assert choose_evictions([*strong, fact(30, 0.1)], HYBRID, now=NOW) == ["fact_0000001e"]


def test_capacity_evictions_refuses_a_new_fact_that_would_go_at_once() -> None:
    facts = {f["id"]: f for f in (fact(i, 0.9, created_days_ago=0) for i in range(10))}
    weak = fact(50, 0.1, created_days_ago=0)
    for policy in (CONFIDENCE, HYBRID):
        with pytest.raises(FactEvictedError, match="max_facts=10"):
            capacity_evictions(facts, weak, policy, now=NOW)
    strong = fact(51, 0.99, created_days_ago=0)
    assert capacity_evictions(facts, strong, HYBRID, now=NOW) == ["fact_00000000"]


def test_manual_create_and_extraction_apply_make_the_same_choice(tmp_path: Path) -> None:
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
    facts, heat = bucket_with_a_hot_fact()
    seeds = [f | {"agent_name": "__default__", "source": {"type": "manual"}} for f in facts[:10]]
    manager.storage.save("u", ChangeSet(actor="manual", reason="seed", upserts=seeds))
    snapshot = manager.storage.load("u", None)
    config = DeerMemConfig(
        storage_path=str(tmp_path), fact_eviction_policy="hybrid-v1", max_facts=10
    )
    new = NewFact("a brand new fact", "preference", 0.9, Labels("user", "durable", "descriptive"))
    outcome = apply_extraction(
        snapshot,
        Extraction({}, (new,), (), (), (), (), (), {}),
        config,
        now=NOW,
        stamp=iso(NOW),
        thread_id="t1",
        heat=heat,
    )
    from_apply = [fact_id for _, fact_id in outcome.changes.deletes]
    record = {"id": "fact_abcdef01", "category": "preference", "confidence": 0.9}
    record |= {"createdAt": iso(NOW), "updatedAt": iso(NOW), "content": "a brand new fact"}
    policy = CapacityPolicy.from_config(config)
    from_create = capacity_evictions(snapshot.facts, record, policy, now=NOW, heat=heat)
    assert from_apply == from_create
    assert len(from_apply) == 1
    assert facts[0]["id"] not in from_apply
    assert f"capacity evicted {from_apply[0]}" in outcome.changes.reason
    # And the confidence policy, through the same function, evicts the hot fact in both.
    plain = DeerMemConfig(storage_path=str(tmp_path), max_facts=10)
    outcome = apply_extraction(
        snapshot,
        Extraction({}, (new,), (), (), (), (), (), {}),
        plain,
        now=NOW,
        stamp=iso(NOW),
        thread_id="t1",
        heat=heat,
    )
    assert [i for _, i in outcome.changes.deletes] == [facts[0]["id"]]
    assert capacity_evictions(snapshot.facts, record, CONFIDENCE, now=NOW) == [facts[0]["id"]]


# -- configuration -----------------------------------------------------------------------------


def test_weights_must_sum_to_one_and_the_error_names_them() -> None:
    config = parse_config({"storage_path": "/x", "fact_eviction_policy": "hybrid-v1"})
    assert (config.eviction_confidence_weight, config.eviction_access_weight) == (0.65, 0.10)
    assert CapacityPolicy.from_config(config).reserved_correction_slots == 10
    with pytest.raises(ValueError, match="must sum to 1") as error:
        parse_config({"storage_path": "/x", "eviction_access_weight": 0.2})
    for key in (
        "eviction_confidence_weight",
        "eviction_confirmation_weight",
        "eviction_access_weight",
    ):
        assert key in str(error.value)
    balanced = {"eviction_confidence_weight": 0.5, "eviction_access_weight": 0.25}
    assert parse_config({"storage_path": "/x", **balanced}).eviction_access_weight == 0.25
    with pytest.raises(ValueError, match="fact_eviction_policy"):
        parse_config({"storage_path": "/x", "fact_eviction_policy": "lru"})


# -- the access heat sidecar ---------------------------------------------------------------------


@pytest.fixture
def hybrid(tmp_path: Path) -> Iterator[DeerMemMemoryManager]:
    manager = DeerMemMemoryManager.from_config(
        {"storage_path": str(tmp_path), "fact_eviction_policy": "hybrid-v1", "max_facts": 10}
    )
    yield manager
    manager.close()


def test_search_records_hits_under_hybrid_only_and_get_context_never(
    tmp_path: Path, hybrid: DeerMemMemoryManager
) -> None:
    _, fact_id = hybrid.create_fact("Deploys with Helm charts", "knowledge", 0.8, user_id="u")
    hybrid.get_context("u", query="Helm")
    assert not usage_path(tmp_path).exists(), "get_context never records access"
    assert [hit["id"] for hit in hybrid.search("Helm", user_id="u")] == [fact_id]
    hybrid.search("Helm", user_id="u")
    stored = json.loads(usage_path(tmp_path).read_text())
    assert stored["version"] == 1
    entry = stored["facts"][fact_id]
    assert entry["accessCount"] == 2
    assert entry["accessHeat"] == pytest.approx(2.0, abs=1e-3)
    assert set(entry) == {"accessHeat", "accessCount", "lastAccessedAt"}, "ids and numbers only"

    plain_root = tmp_path / "plain"
    plain = DeerMemMemoryManager.from_config({"storage_path": str(plain_root)})
    plain.create_fact("Deploys with Helm charts", "knowledge", 0.8, user_id="u")
    assert plain.search("Helm", user_id="u")
    assert not usage_path(plain_root).exists(), "the confidence policy records nothing"
    plain.close()


def test_search_skips_facts_whose_file_is_gone(tmp_path: Path) -> None:
    usage = FactUsage(tmp_path)
    usage.record("u", "__default__", [], NOW, 30)
    assert not usage_path(tmp_path).exists(), "no hits, no file"
    usage.record("u", "agent-x", ["fact_00000001"], NOW, 30)
    assert heat(usage, "u", "agent-x", NOW + timedelta(days=30), 30) == {
        "fact_00000001": pytest.approx(0.5)
    }


def test_the_first_write_removes_temp_files_of_writers_killed_mid_write(tmp_path: Path) -> None:
    path = usage_path(tmp_path)
    path.parent.mkdir(parents=True)
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, pathlib, sys\n"
            "from deerflow.agents.memory.backends.deermem.deermem.core import atomic\n"
            "atomic._temp_beside(pathlib.Path(sys.argv[1])).write_bytes(b'{')\n"
            "os.kill(os.getpid(), 9)",
            str(path),
        ],
        check=False,
    )
    assert killed.returncode == -9
    (left,) = path.parent.iterdir()
    live = path.parent / f".{path.name}.{os.getpid()}.0123abcd.tmp"  # a writer still running
    other = path.parent / f".notes.json.{killed_pid(left)}.0123abcd.tmp"
    for temp in (live, other):
        temp.write_bytes(b"{")
    FactUsage(tmp_path).record("u", "__default__", ["fact_00000001"], NOW, 30)
    assert sorted(path.parent.iterdir()) == sorted([path, live, other])
    assert json.loads(path.read_text())["facts"]["fact_00000001"]["accessCount"] == 1


def killed_pid(temp: Path) -> int:
    return int(temp.name.split(".")[-3])


@pytest.mark.parametrize(
    "garbage",
    [b"{not json", b"[]", b'{"facts": 3}', b"\xff\xfe", b'{"facts": {"fact_1": {"x": 1}}}'],
)
def test_a_corrupt_sidecar_is_logged_and_started_afresh(
    tmp_path: Path,
    hybrid: DeerMemMemoryManager,
    caplog: pytest.LogCaptureFixture,
    garbage: bytes,
) -> None:
    _, fact_id = hybrid.create_fact("Deploys with Helm charts", "knowledge", 0.8, user_id="u")
    path = usage_path(tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(garbage)
    with caplog.at_level(logging.WARNING):
        assert [hit["id"] for hit in hybrid.search("Helm", user_id="u")] == [fact_id]
        hybrid.create_fact("Uses pnpm", "preference", 0.9, user_id="u")
    stored = json.loads(path.read_text())
    assert stored["facts"][fact_id]["accessCount"] == 1
    assert len(hybrid.get_memory(user_id="u")["facts"]) == 2, "memory itself is untouched"
    if garbage != b'{"facts": {"fact_1": {"x": 1}}}':
        assert "starts afresh" in caplog.text


def test_search_heat_protects_a_fact_from_manual_create_and_extraction(tmp_path: Path) -> None:
    model = ScriptedModel(responses=[reply({"content": "Prefers tabs", "confidence": 0.95})])
    manager = DeerMemMemoryManager.from_config(
        {
            "storage_path": str(tmp_path),
            "fact_eviction_policy": "hybrid-v1",
            "max_facts": 10,
            "debounce_seconds": 0,
        },
        host_llm_factory=lambda: model,
    )
    _, hot = manager.create_fact("Deploys with Helm charts", "knowledge", 0.7, user_id="u")
    others = [
        manager.create_fact(f"Likes topic {word}", "preference", 0.72, user_id="u")[1]
        for word in (
            "alpha",
            "bravo",
            "charlie",
            "delta",
            "echo",
            "foxtrot",
            "golf",
            "hotel",
            "india",
        )
    ]
    for _ in range(8):
        manager.search("Helm", user_id="u")
    heat = json.loads(usage_path(tmp_path).read_text())["facts"][hot]["accessHeat"]
    assert heat == pytest.approx(8.0, abs=1e-3)
    assert normalized_heat(heat) == pytest.approx(1.0, abs=1e-4)

    # Manual create: full bucket (10), a confident newcomer; the searched fact stays.
    doc, new_id = manager.create_fact("Runs Linux", "context", 0.9, user_id="u")
    stored = {f["id"] for f in doc["facts"]}
    assert new_id in stored
    assert hot in stored
    assert len(stored) == 10
    latest = manager.get_history(user_id="u", limit=1)[0]
    (evicted,) = set(others) - stored
    assert f"capacity evicted {evicted}" in latest["reason"]
    assert [f["id"] for f in latest["before"]["facts"]] == [evicted]

    # Extraction: the same protection through the writer.
    manager.add_nowait("t1", _turn(), user_id="u")
    assert manager.shutdown_flush(10) is True
    facts = manager.reload_memory(user_id="u")["facts"]
    assert hot in {f["id"] for f in facts}
    assert "Prefers tabs" in {f["content"] for f in facts}
    assert len(facts) == 10
    entry = manager.get_history(user_id="u", limit=1)[0]
    assert entry["actor"] == "extraction"
    assert "capacity evicted" in entry["reason"]
    manager.close()


def test_without_hybrid_the_same_bucket_loses_the_searched_fact(tmp_path: Path) -> None:
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path), "max_facts": 10})
    _, hot = manager.create_fact("Deploys with Helm charts", "knowledge", 0.7, user_id="u")
    for i in range(9):
        manager.create_fact(f"Likes topic number {i}", "preference", 0.72, user_id="u")
    for _ in range(8):
        manager.search("Helm", user_id="u")
    doc, _ = manager.create_fact("Runs Linux", "context", 0.9, user_id="u")
    assert hot not in {f["id"] for f in doc["facts"]}
    assert len(doc["facts"]) == 10
    manager.close()


def _turn() -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    return [HumanMessage("I prefer tabs", id="h1"), AIMessage("Noted", id="a1")]
