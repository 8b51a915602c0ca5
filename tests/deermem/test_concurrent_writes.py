"""Concurrent writers of one user: creates commute, conditional writes do not.

A create computed at one revision is redone on a newer one inside the commit (duplicates and
capacity checked against the current facts), so writers that only add distinct facts never see
a conflict; a write given `expected_revision` is never redone.
"""

from __future__ import annotations

import json
import random
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem import edits as edits_module
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet, CommitResult
from deerflow.agents.memory.manager import DuplicateFactError, MemoryConflictError
from tests.deermem.storage_helpers import LONG, LONG_TIMEOUT, spawn


def make(root: Path, **settings: Any) -> DeerMemMemoryManager:
    return DeerMemMemoryManager.from_config({"storage_path": str(root), **settings})


def overtaken(manager: DeerMemMemoryManager, meanwhile: Callable[[], object]) -> None:
    """Make each commit of `manager` find that `meanwhile` (another writer) committed first,
    after `manager` computed its change: a retry from a new snapshot would be overtaken too."""
    storage = manager.storage
    save = storage.save

    def save_after_the_other(user_id: str | None, changes: ChangeSet) -> CommitResult:
        meanwhile()
        return save(user_id, changes)

    storage.save = save_after_the_other  # type: ignore[method-assign]


def test_an_overtaken_create_is_rebased_not_refused(tmp_path: Path) -> None:
    mine, other = make(tmp_path), make(tmp_path)
    mine.create_fact("Reads novels")
    overtaken(mine, lambda: other.create_fact(f"Drinks tea {len(other.get_history())}"))
    document, fact_id = mine.create_fact("Lives in Lisbon")
    assert document["revision"] == 3  # not retried: a retry would be overtaken again
    contents = sorted(f["content"] for f in document["facts"])
    assert contents == ["Drinks tea 1", "Lives in Lisbon", "Reads novels"]
    [entry] = [e for e in mine.get_history() if e["revision"] == 3]
    assert [f["id"] for f in entry["after"]["facts"]] == [fact_id]


def test_two_concurrent_creates_of_one_content_store_it_once(tmp_path: Path) -> None:
    mine, other = make(tmp_path), make(tmp_path)
    overtaken(mine, lambda: other.create_fact("Drinks tea"))
    with pytest.raises(DuplicateFactError) as refused:
        mine.create_fact("drinks  TEA")
    [kept] = other.get_memory()["facts"]
    assert refused.value.existing_fact_id == kept["id"]
    assert mine.get_memory()["revision"] == 1


def test_a_rebased_create_makes_room_in_a_bucket_filled_meanwhile(tmp_path: Path) -> None:
    mine, other = make(tmp_path, max_facts=10), make(tmp_path, max_facts=10)
    for i in range(8):
        mine.create_fact(f"Fact number {i}", confidence=0.9)
    mine.create_fact("The weakest fact", confidence=0.1)
    overtaken(mine, lambda: other.create_fact("Filled the last place", confidence=0.9))
    document, _ = mine.create_fact("Computed while there was room", confidence=0.8)
    contents = {f["content"] for f in document["facts"]}
    assert len(contents) == 10
    assert "Computed while there was room" in contents
    assert "The weakest fact" not in contents
    assert "capacity evicted" in mine.get_history(limit=1)[0]["reason"]


@pytest.mark.parametrize("operation", ["update", "delete", "create"])
def test_a_conditional_write_is_never_rebased(tmp_path: Path, operation: str) -> None:
    mine, other = make(tmp_path), make(tmp_path)
    _, fact_id = mine.create_fact("Drinks tea")
    overtaken(mine, lambda: other.create_fact("Lives in Lisbon"))
    write = {
        "update": lambda: mine.update_fact(fact_id, "Drinks coffee", expected_revision=1),
        "delete": lambda: mine.delete_fact(fact_id, expected_revision=1),
        "create": lambda: mine.create_fact("Reads novels", expected_revision=1),
    }[operation]
    with pytest.raises(MemoryConflictError):
        write()
    document = other.get_memory()
    assert document["revision"] == 2
    assert sorted(f["content"] for f in document["facts"]) == ["Drinks tea", "Lives in Lisbon"]


@pytest.mark.parametrize("value", [True, -1, "3", 1.0])
def test_a_malformed_expected_revision_is_bad_input(tmp_path: Path, value: object) -> None:
    manager = make(tmp_path)
    _, fact_id = manager.create_fact("Drinks tea")
    with pytest.raises(ValueError, match="expected_revision"):
        manager.delete_fact(fact_id, expected_revision=value)  # type: ignore[arg-type]
    assert len(manager.get_memory()["facts"]) == 1


@pytest.mark.timeout(LONG_TIMEOUT)
def test_processes_creating_distinct_facts_see_no_conflict(tmp_path: Path) -> None:
    """8 processes creating distinct facts for one user, past the bucket's capacity."""
    per_process = 200 if LONG else 25
    writers = [
        spawn("concurrent_writer", str(tmp_path), "shared", f"p{i}", str(per_process), "manager")
        for i in range(8)
    ]
    committed: list[str] = []
    errors: list[str] = []
    for writer in writers:
        out, _ = writer.communicate(timeout=900)
        assert writer.returncode == 0
        outcome = json.loads(out)
        committed += outcome["committed"]
        errors += outcome["errors"]
    assert errors == []
    assert len(committed) == 8 * per_process
    manager = make(tmp_path)
    document = manager.get_memory(user_id="shared")
    stored = [f["content"] for f in document["facts"]]
    assert len(stored) == min(len(committed), 100) == len(set(stored))  # max_facts: 100
    assert set(stored) <= set(committed)
    assert document["revision"] == len(committed)
    assert len(manager.get_history(user_id="shared", limit=10_000)) == len(committed)


@pytest.mark.timeout(LONG_TIMEOUT)
def test_kill_9_during_concurrent_creates_loses_no_acknowledged_create(tmp_path: Path) -> None:
    """Two processes create facts for one user (overtaking each other) and are killed at a
    random moment, again and again: every create they acknowledged is stored, nothing else but
    the one each had in flight, and the memory reads back whole."""
    rng = random.Random(2112)
    acknowledged: set[str] = set()
    possible: set[str] = set()
    rounds = 150 if LONG else 6
    for round_ in range(rounds):
        # Memory that earlier kills left behind is written again; four rounds of at most 2 x 60
        # creates stay within the bucket's 500 facts, so no acknowledged fact is evicted.
        user = f"kill-{round_ // 4}"
        writers = [
            spawn("crash_writer", str(tmp_path), user, "60", "creates", f"r{round_}{name}")
            for name in "ab"
        ]
        for writer in writers:
            assert writer.stdout is not None
            assert writer.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.05, 0.4))
        for writer in writers:
            writer.send_signal(signal.SIGKILL)
        for name, writer in zip("ab", writers, strict=True):
            writer.wait()
            assert writer.stdout is not None
            printed = writer.stdout.read().split("\n")[:-1]
            acknowledged.update(f"{user}/{line}" for line in printed)
            possible.update(f"{user}/r{round_}{name} fact {i}" for i in range(len(printed) + 1))
    assert len(acknowledged) > 20
    manager = make(tmp_path)
    stored: set[str] = set()
    for n in range(-(-rounds // 4)):
        user = f"kill-{n}"
        document = manager.get_memory(user_id=user)
        stored.update(f"{user}/{fact['content']}" for fact in document["facts"])
        history = manager.get_history(user_id=user, limit=10_000)
        assert [entry["revision"] for entry in history] == list(range(document["revision"], 0, -1))
        assert {f["content"] for f in manager.search("fact", top_k=500, user_id=user)} == {
            fact["content"] for fact in document["facts"]
        }
    assert acknowledged <= stored, "an acknowledged create was lost"
    assert stored <= acknowledged | possible


def test_an_overtaken_create_whose_id_was_taken_meanwhile_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids are fresh uuids, or the caller's own choice: either way a create never overwrites
    a fact that took its id in between."""
    same = uuid.UUID(int=7)
    monkeypatch.setattr(edits_module.uuid, "uuid4", lambda: same)
    mine, other = make(tmp_path), make(tmp_path)
    overtaken(mine, lambda: other.create_fact("Drinks tea"))
    with pytest.raises(DuplicateFactError) as refused:
        mine.create_fact("Lives in Lisbon")
    assert refused.value.existing_fact_id == f"fact_{same.hex}"
    assert [f["content"] for f in other.get_memory()["facts"]] == ["Drinks tea"]
