"""DeerMem through the contract: layout, search, secrets, capacity, undo, custom storage."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import random
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem import edits as edits_module
from deerflow.agents.memory.backends.deermem.deermem.core import index as index_module
from deerflow.agents.memory.backends.deermem.deermem.core.changes import (
    ChangeSet,
    CommitResult,
    MemorySnapshot,
)
from deerflow.agents.memory.backends.deermem.deermem.core.paths import UserPaths, safe_user_id
from deerflow.agents.memory.backends.deermem.deermem.core.storage import (
    FileMemoryStorage,
    MemoryStorage,
)
from deerflow.agents.memory.backends.deermem.deermem.views import RecordViews
from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactEvictedError,
    FactNotFoundError,
    MemoryConflictError,
    build_memory_manager,
    empty_document,
)
from deerflow.config import MemoryConfig


def make(root: Path, **settings: Any) -> DeerMemMemoryManager:
    return DeerMemMemoryManager.from_config({"storage_path": str(root), **settings})


def files_of(root: Path) -> dict[str, bytes]:
    """Every memory file's bytes, lock files, journals and the derived index aside."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file()
        and ".retrieval" not in p.parts
        and p.name not in (".memory.lock", ".journal.json")
        and p.name != "history.jsonl"
    }


def test_is_the_default_backend_through_the_factory(tmp_path: Path) -> None:
    manager = build_memory_manager(MemoryConfig(), home=tmp_path)
    assert isinstance(manager, DeerMemMemoryManager)


def test_unknown_backend_keys_warn_once_with_a_did_you_mean_and_strict_refuses_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert make(tmp_path, max_fact=10)._config.max_facts == 100
        make(tmp_path, max_fact=10)
    warnings = [r.getMessage() for r in caplog.records if "max_fact:" in r.getMessage()]
    assert warnings == [
        "memory.backend_config.max_fact: unknown key (did you mean 'max_facts'?); it is ignored"
    ]
    with pytest.raises(
        ValueError,
        match=r"memory\.backend_config\.max_fact: unknown key \(did you mean 'max_facts'\?\); "
        r"refused because memory\.backend_config\.strict is true",
    ):
        make(tmp_path, max_fact=10, strict=True)
    with pytest.raises(ValueError, match=r"memory\.backend_config\.strict: must be true or false"):
        make(tmp_path, strict="yes")


def test_max_facts_accepts_deerflow_values_and_warns_about_costs_above_500(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert make(tmp_path, max_facts=500)._config.max_facts == 500
    assert "max_facts" not in caplog.text
    with caplog.at_level(logging.WARNING):
        assert make(tmp_path, max_facts=1000)._config.max_facts == 1000
    assert "max_facts=1000 is above 500" in caplog.text
    for refused in (9, 10_001):
        with pytest.raises(ValueError, match=r"memory\.backend_config\.max_facts: "):
            make(tmp_path, max_facts=refused)


def test_empty_storage_class_means_the_default_storage(tmp_path: Path) -> None:
    assert isinstance(make(tmp_path, storage_class="").storage, FileMemoryStorage)


def test_alice_layout_and_out_of_band_edit(tmp_path: Path) -> None:
    manager = make(tmp_path)
    doc, fact_id = manager.create_fact(
        "Prefers uv over pip", "preference", 0.9, user_id="alice@example.com"
    )
    assert fact_id is not None
    assert [f["id"] for f in doc["facts"]] == [fact_id]
    paths = UserPaths(tmp_path, safe_user_id("alice@example.com"))
    assert paths.manifest.is_file()
    assert "facts" not in paths.manifest.read_text()
    (fact_file,) = (paths.agents / "__default__" / "facts").glob("??/*.md")
    assert fact_file.stem == fact_id
    assert f"\nid: {fact_id}\n" in fact_file.read_text()
    fact_file.write_text(
        fact_file.read_text()
        .replace("uv over pip\n", "uv over pip and poetry\n", 1)
        .replace("\nPrefers uv over pip\n", "\nPrefers uv over pip and poetry\n")
    )
    reloaded = manager.reload_memory(user_id="alice@example.com")
    assert reloaded["facts"][0]["content"] == "Prefers uv over pip and poetry"
    assert manager.get_context("alice@example.com").endswith("Prefers uv over pip and poetry")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("don't", "I don't drink coffee after noon"),
        ("e-mail", "Prefers e-mail over phone calls"),
        ('"quoted phrase"', 'Calls it the "quoted phrase" rule'),
        ("pnpm*", "Uses pnpm workspaces"),
        ("用户喜欢喝茶", "用户喜欢喝茶，不喜欢咖啡"),
        ("DEPLOY friday", "Never deploys on a Friday"),
    ],
)
def test_search_handles_what_users_type(tmp_path: Path, query: str, expected: str) -> None:
    manager = make(tmp_path)
    for content in [
        "I don't drink coffee after noon",
        "Prefers e-mail over phone calls",
        'Calls it the "quoted phrase" rule',
        "Uses pnpm workspaces",
        "用户喜欢喝茶，不喜欢咖啡",
        "Never deploys on a Friday",
        "Works in Lisbon",
    ]:
        manager.create_fact(content, user_id="u")
    results = manager.search(query, user_id="u")
    assert results, query
    assert results[0]["content"] == expected
    assert "score" in results[0]


def test_search_never_crosses_scopes_even_with_identical_ids(tmp_path: Path) -> None:
    manager = make(tmp_path)
    shared_id = "fact_0123456789abcdef0123456789abcdef"
    for user, agent in [("ann", None), ("ben", None), ("ann", "coder")]:
        manager.import_memory(
            {"facts": [{"id": shared_id, "content": f"secret plan of {user} {agent}"}]},
            user_id=user,
            agent_name=agent,
        )
    for user, agent in [("ann", None), ("ben", None), ("ann", "coder")]:
        results = manager.search("secret plan", user_id=user, agent_name=agent, top_k=10)
        assert [r["content"] for r in results] == [f"secret plan of {user} {agent}"]
    assert manager.search("secret plan", user_id="carl") == []


def test_search_filters_by_category_before_top_k(tmp_path: Path) -> None:
    manager = make(tmp_path)
    for i in range(8):
        manager.create_fact(f"tea note {i}", "preference", 0.9, user_id="u")
    manager.create_fact("tea allergy", "constraint", 0.3, user_id="u")
    results = manager.search("tea", 1, user_id="u", category="constraint")
    assert [r["content"] for r in results] == ["tea allergy"]
    with pytest.raises(ValueError, match="category"):
        manager.search("tea", user_id="u", category="gossip")
    with pytest.raises(ValueError, match="top_k"):
        manager.search("tea", 0, user_id="u")


@pytest.fixture(name="manager")
def one_fact_indexed(tmp_path: Path) -> DeerMemMemoryManager:
    """A manager over `tmp_path` holding one fact of user "u", its retrieval index open."""
    manager = make(tmp_path)
    manager.create_fact("likes ramen", user_id="u")
    manager.search("ramen", user_id="u")
    return manager


def test_index_failure_after_commit_heals_on_the_next_search(
    manager: DeerMemMemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(index_module.RetrievalIndex, "apply", broken)
    manager.create_fact("likes udon", user_id="u")
    monkeypatch.undo()
    assert [r["content"] for r in manager.search("udon", user_id="u")] == ["likes udon"]


def garble_index(root: Path) -> None:
    """Overwrite the retrieval index and its WAL files with junk, in place."""
    for path in (root / ".retrieval").glob("index.sqlite3*"):
        path.write_bytes(b"\xa5" * path.stat().st_size)


def test_an_index_garbled_while_open_is_recreated_and_no_commit_is_reported_failed(
    manager: DeerMemMemoryManager, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    garble_index(tmp_path)
    manager.create_fact("likes udon", user_id="u")  # committed, and reported so
    assert [r["content"] for r in manager.search("udon", user_id="u")] == ["likes udon"]
    assert [r["content"] for r in manager.search("ramen", user_id="u")] == ["likes ramen"]
    assert "is unreadable; recreating it from the files" in caplog.text


def test_a_search_whose_index_another_thread_recreates_under_it_still_answers(
    manager: DeerMemMemoryManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paused, resume = threading.Event(), threading.Event()
    search = index_module.RetrievalIndex.search

    def pausing(self: index_module.RetrievalIndex, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name.startswith("paused"):
            paused.set()
            assert resume.wait(10)
        return search(self, *args, **kwargs)

    monkeypatch.setattr(index_module.RetrievalIndex, "search", pausing)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="paused") as pool:
        pending = pool.submit(manager.search, "ramen", user_id="u")
        assert paused.wait(10)
        garble_index(tmp_path)
        assert [r["content"] for r in manager.search("ramen", user_id="u")] == ["likes ramen"]
        resume.set()
        assert [r["content"] for r in pending.result()] == ["likes ramen"]


def test_a_closed_manager_refuses_searches_by_type(manager: DeerMemMemoryManager) -> None:
    manager.close()
    with pytest.raises(index_module.IndexClosedError, match="is closed"):
        manager.search("ramen", user_id="u")


def test_index_catches_up_with_writes_of_another_process(tmp_path: Path) -> None:
    first, second = make(tmp_path), make(tmp_path)
    first.create_fact("likes ramen", user_id="u")
    assert second.search("ramen", user_id="u")
    storage = FileMemoryStorage(first.storage.config)  # a writer that never touches the index
    from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet

    snapshot = storage.load("u", None)
    (fact_id,) = snapshot.facts
    storage.save("u", ChangeSet(actor="t", reason="r", deletes=[("__default__", fact_id)]))
    assert second.search("ramen", user_id="u") == []


@pytest.mark.parametrize(
    "content",
    [
        "my OpenAI key is sk-proj-Abcdefghijklmnopqrstuvwxyz0123",
        "db password: hunter2hunter2",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
        "use postgresql://app:s3cretpass@db:5432/app",
    ],
)
def test_secret_looking_content_is_refused_on_every_write_path(
    tmp_path: Path, content: str
) -> None:
    manager = make(tmp_path)
    with pytest.raises(ValueError, match=r"content: refused, .*secrets are never stored"):
        manager.create_fact(content, user_id="u")
    _, fact_id = manager.create_fact("harmless", user_id="u")
    with pytest.raises(ValueError, match="refused"):
        manager.update_fact(fact_id or "", content=content, user_id="u")
    with pytest.raises(ValueError, match=r"facts\[0\]\.content: refused"):
        manager.import_memory({"facts": [{"content": content}]}, user_id="u")
    assert [f["content"] for f in manager.get_memory(user_id="u")["facts"]] == ["harmless"]
    with pytest.raises(ValueError, match=r"user\.workContext: refused"):
        manager.update_summary("user", "workContext", content, user_id="u")
    assert manager.get_memory(user_id="u")["user"]["workContext"]["summary"] == ""


def test_a_summary_edit_is_recorded_and_reverted(tmp_path: Path) -> None:
    manager = make(tmp_path)
    manager.update_summary("user", "workContext", "Data engineer", user_id="u")
    revision = manager.get_memory(user_id="u")["revision"]

    document = manager.update_summary(
        "user", "workContext", "  Platform lead\r\non Kafka  ", user_id="u", agent_name="coder"
    )

    assert document["user"]["workContext"]["summary"] == "Platform lead\non Kafka"
    assert document["revision"] == revision + 1
    assert make(tmp_path).get_memory(user_id="u")["user"]["workContext"]["summary"] == (
        "Platform lead\non Kafka"
    ), "stored, not cached"
    entry = manager.get_history(user_id="u", agent_name="coder", limit=1)[0]
    assert (entry["actor"], entry["reason"]) == ("manual", "update_summary user.workContext")
    assert entry["before"]["summaries"] == {"user": {"workContext": "Data engineer"}}
    assert entry["after"]["summaries"] == {"user": {"workContext": "Platform lead\non Kafka"}}
    same = manager.update_summary("user", "workContext", "Platform lead\non Kafka", user_id="u")
    assert same["revision"] == revision + 1, "an unchanged text is not a change"

    manager.revert_change(entry["change_id"], user_id="u")

    assert manager.get_memory(user_id="u")["user"]["workContext"]["summary"] == "Data engineer"


def test_crud_validation_and_errors(tmp_path: Path) -> None:
    manager = make(tmp_path)
    _, fact_id = manager.create_fact("Lives in Porto", "identity", 0.8, user_id="u")
    assert fact_id
    with pytest.raises(DuplicateFactError) as info:
        manager.create_fact("  lives   in PORTO ", user_id="u")
    assert info.value.existing_fact_id == fact_id
    doc = manager.update_fact(fact_id, confidence=0.95, user_id="u")
    (fact,) = doc["facts"]
    assert (fact["content"], fact["category"], fact["confidence"]) == (
        "Lives in Porto",
        "identity",
        0.95,
    )
    with pytest.raises(FactNotFoundError):
        manager.update_fact("fact_00000000", content="x", user_id="u")
    with pytest.raises(FactNotFoundError):
        manager.delete_fact(fact_id, user_id="u", agent_name="other")
    with pytest.raises(ValueError, match="fact_id"):
        manager.delete_fact("../../etc", user_id="u")
    with pytest.raises(ValueError, match="agent_name"):
        manager.get_memory(user_id="u", agent_name="bad/agent")
    assert manager.delete_fact(fact_id, user_id="u")["facts"] == []


def test_capacity_evicts_the_weakest_and_reports_it(tmp_path: Path) -> None:
    manager = make(tmp_path, max_facts=10)
    ids = [
        manager.create_fact(f"fact number {i}", confidence=0.5 + i / 100, user_id="u")[1]
        for i in range(10)
    ]
    with pytest.raises(FactEvictedError, match="max_facts=10"):
        manager.create_fact("weak fact", confidence=0.1, user_id="u")
    assert len(manager.get_memory(user_id="u")["facts"]) == 10
    doc, new_id = manager.create_fact("strong fact", confidence=0.99, user_id="u")
    stored = {f["id"] for f in doc["facts"]}
    assert new_id in stored
    assert ids[0] not in stored
    latest = manager.get_history(user_id="u", limit=1)[0]
    assert f"capacity evicted {ids[0]}" in latest["reason"]
    assert [f["id"] for f in latest["before"]["facts"]] == [ids[0]]


def test_eviction_ties_and_changed_facts_follow_the_policy_not_a_stale_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every fact is stamped in the same second, so the order within equal confidences decides.
    monkeypatch.setattr(edits_module, "utc_now", lambda: "2026-01-01T00:00:00Z")
    manager = make(tmp_path, max_facts=10)
    for i in range(10):
        manager.create_fact(f"fact number {i}", confidence=0.4 if i % 2 else 0.6, user_id="u")
    snapshot = manager.storage.load("u", None)
    weakest = min(snapshot.facts.values(), key=lambda f: f["confidence"])["id"]
    # Raising the weakest fact's confidence makes a new record: the next tie must go instead.
    manager.update_fact(weakest, confidence=0.9, user_id="u")
    snapshot = manager.storage.load("u", None)
    expected = min(snapshot.facts.values(), key=lambda f: f["confidence"])["id"]
    assert expected != weakest
    doc, _ = manager.create_fact("a strong fact", confidence=0.99, user_id="u")
    assert expected not in {f["id"] for f in doc["facts"]}
    assert weakest in {f["id"] for f in doc["facts"]}


def test_duplicates_are_checked_against_edited_files_after_reload(tmp_path: Path) -> None:
    manager = make(tmp_path)
    _, porto = manager.create_fact("Lives in Porto", user_id="u")
    _, other = manager.create_fact("Works remotely", user_id="u")
    assert porto
    assert other
    (fact_file,) = (UserPaths(tmp_path, "u").agents / "__default__" / "facts").glob(
        f"??/{porto}.md"
    )
    fact_file.write_text(fact_file.read_text().replace("Lives in Porto", "Lives in Lisbon"))
    manager.reload_memory(user_id="u")
    with pytest.raises(DuplicateFactError) as info:
        manager.create_fact("lives in  LISBON", user_id="u")
    assert info.value.existing_fact_id == porto
    with pytest.raises(DuplicateFactError) as info:
        manager.update_fact(other, content="Lives in Lisbon", user_id="u")
    assert info.value.existing_fact_id == porto
    manager.update_fact(porto, content="lives in lisbon", user_id="u")  # its own text: allowed
    assert manager.create_fact("Lives in Porto", user_id="u")[1]


def test_returned_documents_share_nothing_with_the_next_call(tmp_path: Path) -> None:
    manager = make(tmp_path)
    manager.get_memory(user_id="u")  # documents from now on are carried over each commit
    fact = {"content": "Uses uv", "category": "preference", "topics": ["python"]}
    manager.import_memory({"facts": [fact]}, user_id="u")
    doc, _ = manager.create_fact("Lives in Porto", user_id="u")
    before = manager.get_memory(user_id="u")
    for returned in doc["facts"]:
        returned["content"] = "changed"
        if "topics" in returned:
            returned["topics"].append("changed")
    doc["user"]["workContext"]["summary"] = "changed"
    assert manager.get_memory(user_id="u") == before
    assert "changed" not in str(manager.get_memory(user_id="u"))


def test_views_kept_across_commits_equal_views_built_afresh(tmp_path: Path) -> None:
    manager = make(tmp_path, max_facts=12)
    rng = random.Random(7)
    old = manager.storage.load("u", None)
    states: dict[str | None, object] = {}
    for step in range(60):
        if step == 30:
            old = manager.storage.load("u", None)
        agent = rng.choice([None, "coder"])
        facts = manager.get_memory(user_id="u", agent_name=agent)["facts"]
        action = rng.random()
        if facts and action < 0.2:
            manager.delete_fact(rng.choice(facts)["id"], user_id="u", agent_name=agent)
        elif facts and action < 0.4:
            fact_id = rng.choice(facts)["id"]
            manager.update_fact(fact_id, confidence=rng.random(), user_id="u", agent_name=agent)
        elif action < 0.45:
            kept = [{"content": f["content"], "topics": ["t"]} for f in facts[:5]]
            manager.import_memory({"facts": kept}, user_id="u", agent_name=agent)
            states.pop(agent, None)  # an import reads the bucket's files again: views anew
        else:
            confidence = rng.choice([0.1, 0.99])
            with contextlib.suppress(FactEvictedError):
                manager.create_fact(
                    f"fact {step}", confidence=confidence, user_id="u", agent_name=agent
                )
        snapshot = manager.storage.load("u", agent)
        document = manager.get_memory(user_id="u", agent_name=agent)
        assert document == RecordViews().document(snapshot)
        assert [f["id"] for f in document["facts"]] == sorted(snapshot.facts)
        columns = manager._views.columns(snapshot)
        assert columns == RecordViews().columns(snapshot)
        assert columns.ids == list(snapshot.facts)
        # Carried over each commit, not built again.
        assert (
            states.setdefault(agent, manager._views._buckets[("u", snapshot.bucket)])
            is (manager._views._buckets[("u", snapshot.bucket)])
        )
    # A snapshot from before the last 30 commits still gets its own facts, and then the latest.
    assert old.facts
    assert manager._views.document(old) == RecordViews().document(old)
    latest = manager.storage.load("u", None)
    assert manager.get_memory(user_id="u") == RecordViews().document(latest)


def test_a_carry_over_stopped_half_way_is_not_used_again(monkeypatch: pytest.MonkeyPatch) -> None:
    def record(fact_id: str) -> dict[str, Any]:
        return {"id": fact_id, "content": fact_id, "category": "context", "confidence": 0.5}

    def snapshot(facts: dict[str, Any], changed_from: Any = None) -> MemorySnapshot:
        return MemorySnapshot("u", "__default__", 1, "", {}, facts, (), changed_from)

    views = RecordViews()
    before = {"fact_a": record("fact_a"), "fact_b": record("fact_b")}
    views.columns(snapshot(before))
    # The commit deletes fact_a, then adds fact_c, whose view fails.
    after = snapshot(
        {"fact_b": before["fact_b"], "fact_c": record("fact_c")}, (before, ("fact_a", "fact_c"))
    )

    def failing_view(_: Any) -> Any:
        raise RuntimeError("stopped")

    with monkeypatch.context() as patch:
        patch.setattr(views, "_view", failing_view)
        with pytest.raises(RuntimeError, match="stopped"):
            views.columns(after)
    assert views.columns(after) == RecordViews().columns(after)
    assert views.columns(after).ids == ["fact_b", "fact_c"]


def test_revert_restores_a_deleted_fact_byte_identically(tmp_path: Path) -> None:
    manager = make(tmp_path)
    _, fact_id = manager.create_fact("Deploys with Helm", "knowledge", 0.7, user_id="u")
    path = UserPaths(tmp_path, "u").fact_file("__default__", fact_id or "")
    original = path.read_bytes()
    manager.delete_fact(fact_id or "", user_id="u")
    deletion = manager.get_history(user_id="u", limit=1)[0]
    assert deletion["actor"] == "manual"
    assert deletion["after"]["facts"] == []
    undo = manager.revert_change(deletion["change_id"], user_id="u")
    assert undo["reverts"] == deletion["change_id"]
    assert path.read_bytes() == original
    with pytest.raises(ValueError, match="already reverted"):
        manager.revert_change(deletion["change_id"], user_id="u")
    with pytest.raises(ValueError, match="no change"):
        manager.revert_change("chg_missing", user_id="u")
    assert manager.search("Helm", user_id="u")[0]["id"] == fact_id


def test_clear_then_revert_restores_everything(tmp_path: Path) -> None:
    manager = make(tmp_path)
    manager.import_memory(
        {
            "user": {"workContext": {"summary": "Platform engineer"}},
            "facts": [{"content": "likes Go"}],
        },
        user_id="u",
    )
    manager.create_fact("reviews Rust code", user_id="u", agent_name="coder")
    before = files_of(tmp_path / "users")
    manager.clear_memory(user_id="u")
    assert manager.get_memory(user_id="u")["facts"] == []
    assert manager.get_memory(user_id="u", agent_name="coder")["facts"] == []
    assert manager.get_memory(user_id="u")["user"]["workContext"]["summary"] == ""
    clear = manager.get_history(user_id="u", limit=1)[0]
    manager.revert_change(clear["change_id"], user_id="u")
    after = files_of(tmp_path / "users")
    manifest = next(k for k in before if k.endswith("memory.json"))
    assert {k: v for k, v in after.items() if k != manifest} == {
        k: v for k, v in before.items() if k != manifest
    }
    assert manager.get_memory(user_id="u")["user"]["workContext"]["summary"] == "Platform engineer"


def test_revert_refuses_when_the_fact_changed_since(tmp_path: Path) -> None:
    manager = make(tmp_path)
    _, fact_id = manager.create_fact("Uses zsh", user_id="u")
    manager.update_fact(fact_id or "", content="Uses fish", user_id="u")
    update = manager.get_history(user_id="u", limit=1)[0]
    manager.update_fact(fact_id or "", content="Uses nushell", user_id="u")
    with pytest.raises(MemoryConflictError):
        manager.revert_change(update["change_id"], user_id="u")


def test_revert_refuses_when_the_fact_changed_back_to_the_same_revision(tmp_path: Path) -> None:
    """Undo restores a file's bytes, revision included, so a fact's revision can repeat: the
    check is on the bytes the reverted change left."""
    manager = make(tmp_path)
    _, fact_id = manager.create_fact("Deploys on Fridays", user_id="u")
    assert fact_id

    def last() -> str:
        return str(manager.get_history(user_id="u", limit=1)[0]["change_id"])

    manager.update_fact(fact_id, content="Deploys on Mondays", user_id="u")
    to_mondays = last()
    manager.update_fact(fact_id, content="Deploys on Tuesdays", user_id="u")
    manager.revert_change(last(), user_id="u")  # back to Mondays, revision 2 again
    undo_of_tuesdays = last()
    manager.revert_change(to_mondays, user_id="u")  # back to Fridays, revision 1
    manager.update_fact(fact_id, content="Deploys on Wednesdays", user_id="u")  # revision 2
    with pytest.raises(MemoryConflictError, match="has changed since"):
        manager.revert_change(undo_of_tuesdays, user_id="u")
    [fact] = manager.get_memory(user_id="u")["facts"]
    assert fact["content"] == "Deploys on Wednesdays"


def test_clear_one_agent_keeps_the_rest(tmp_path: Path) -> None:
    manager = make(tmp_path)
    manager.create_fact("default fact", user_id="u")
    manager.create_fact("coder fact", user_id="u", agent_name="coder")
    manager.clear_memory(user_id="u", agent_name="coder")
    assert [f["content"] for f in manager.get_memory(user_id="u")["facts"]] == ["default fact"]
    assert manager.get_memory(user_id="u", agent_name="coder")["facts"] == []


def test_import_validates_everything_before_writing(tmp_path: Path) -> None:
    manager = make(tmp_path)
    manager.create_fact("keep me", user_id="u")
    bad_documents = [
        (
            {"facts": [{"content": "ok"}, {"content": "x", "confidence": 2}]},
            r"facts\[1\]\.confidence",
        ),
        (
            {"facts": [{"content": "same"}, {"content": "SAME"}]},
            r"facts\[1\]: same content as facts\[0\]",
        ),
        ({"facts": "nope"}, "facts: must be a list"),
        ({"user": {"workContext": {"summary": 3}}}, r"user\.workContext\.summary"),
        ([], "must be a JSON object"),
    ]
    for document, problem in bad_documents:
        with pytest.raises(ValueError, match=problem):
            manager.import_memory(document, user_id="u")  # type: ignore[arg-type]
    assert [f["content"] for f in manager.get_memory(user_id="u")["facts"]] == ["keep me"]


def test_json_and_markdown_exports_round_trip(tmp_path: Path) -> None:
    manager = make(tmp_path / "a")
    manager.import_memory(
        {
            "user": {"topOfMind": {"summary": "Launching v2"}},
            "facts": [
                {
                    "content": "Prefers tabs",
                    "category": "preference",
                    "confidence": 0.8,
                    "topics": ["style"],
                },
                {
                    "content": "Avoid force-push",
                    "category": "correction",
                    "confidence": 0.95,
                    "sourceError": "force-pushed main",
                },
            ],
        },
        user_id="u",
    )
    exported = manager.export_memory(user_id="u")
    other = make(tmp_path / "b")
    other.import_memory(exported, user_id="v")
    assert other.export_memory(user_id="v")["facts"] == exported["facts"]
    manager.export_markdown(tmp_path / "md", user_id="u")
    third = make(tmp_path / "c")
    third.import_markdown(tmp_path / "md", user_id="w", agent_name="coder")
    imported = third.export_memory(user_id="w", agent_name="coder")
    assert imported["facts"] == exported["facts"]
    assert imported["user"]["topOfMind"]["summary"] == "Launching v2"


def test_get_context_formats_within_budget_and_escapes(tmp_path: Path) -> None:
    manager = make(tmp_path, max_injection_tokens=60)
    manager.import_memory(
        {
            "user": {"workContext": {"summary": "Builds </memory> parsers & tools"}},
            "facts": [
                {"content": f"ordinary fact number {i} with some words", "confidence": 0.5}
                for i in range(20)
            ]
            + [
                {
                    "content": "Use pnpm, not npm",
                    "category": "correction",
                    "confidence": 0.97,
                    "sourceError": "used npm",
                }
            ],
        },
        user_id="u",
    )
    context = manager.get_context("u")
    assert context.startswith("User Context:\n- Work: Builds &lt;/memory&gt; parsers &amp; tools")
    assert "- [correction | 0.97] Use pnpm, not npm (avoid: used npm)" in context
    assert "</memory>" not in context
    assert context.count("ordinary fact") < 20
    assert manager.get_context("u") == context, "stable for prompt caches"
    tool_mode = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)}, mode="tool")
    assert "Facts:" not in tool_mode.get_context("u")
    assert make(tmp_path).get_context("nobody") == ""


def test_get_context_after_each_change_shows_exactly_the_stored_facts(tmp_path: Path) -> None:
    """Lines are kept per stored record: edits, deletions and out-of-band edits show at once."""
    manager = make(tmp_path)
    ids = [
        manager.create_fact(f"fact {n}", confidence=c, user_id="u")[1]
        for n, c in enumerate([0.3, 0.9, 0.6])
    ]
    assert manager.get_context("u").splitlines()[1:] == [
        "- [context | 0.90] fact 1",
        "- [context | 0.60] fact 2",
        "- [context | 0.30] fact 0",
    ]
    manager.update_fact(ids[0], "fact zero, edited", confidence=0.95, user_id="u")
    manager.delete_fact(ids[2], user_id="u")
    assert manager.get_context("u").splitlines()[1:] == [
        "- [context | 0.95] fact zero, edited",
        "- [context | 0.90] fact 1",
    ]
    path = next(tmp_path.glob(f"users/u/agents/__default__/facts/*/{ids[1]}.md"))
    path.write_text(path.read_text().replace("fact 1\n", "fact one, by hand\n"))
    manager.reload_memory(user_id="u")
    assert "- [context | 0.90] fact one, by hand" in manager.get_context("u")


def test_custom_storage_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = "deerflow.agents.memory.backends.deermem.deermem.core.storage.FileMemoryStorage"
    assert isinstance(make(tmp_path, storage_class=path).storage, FileMemoryStorage)
    for bad, detail in [
        ("no.such.module.Storage", "ModuleNotFoundError"),
        ("pathlib.Path", "is not a MemoryStorage subclass"),
    ]:
        with pytest.raises(ValueError, match="failed to load") as info:
            make(tmp_path, storage_class=bad)
        message = str(info.value)
        assert message.startswith(f"backend_config.storage_class={bad!r} failed to load: ")
        assert detail in message
        assert message.endswith(
            "Refusing to silently fall back because memory is persistent state."
        )


def test_an_import_is_undone_as_a_whole(tmp_path: Path) -> None:
    manager = make(tmp_path)
    manager.create_fact("kept before the import", user_id="u")
    before = manager.export_memory(user_id="u")
    manager.import_memory(
        {"facts": [{"content": "imported one"}, {"content": "imported two"}]}, user_id="u"
    )
    imported = manager.get_history(user_id="u", limit=1)[0]
    assert imported["actor"] == "import"
    manager.revert_change(imported["change_id"], user_id="u")
    assert manager.export_memory(user_id="u")["facts"] == before["facts"]


def test_an_unreadable_index_is_rebuilt_from_the_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = make(tmp_path)
    manager.create_fact("likes ramen", user_id="u")
    manager.close()
    index_file = tmp_path / ".retrieval" / "index.sqlite3"
    for suffix in ("-wal", "-shm"):
        Path(f"{index_file}{suffix}").unlink(missing_ok=True)
    index_file.write_bytes(b"this is not a database" * 100)
    reopened = make(tmp_path)  # the index is opened by the first search (or `warm()`)
    assert [r["content"] for r in reopened.search("ramen", user_id="u")] == ["likes ramen"]
    assert "recreating it from the files" in caplog.text


class WholeBucketStorage(FileMemoryStorage):
    """A storage that relies on the seam's default `load_facts` (built on `load`)."""

    load_facts = MemoryStorage.load_facts


def test_search_works_on_a_storage_without_a_load_facts_override(tmp_path: Path) -> None:
    manager = make(tmp_path, storage_class=f"{__name__}.WholeBucketStorage")
    manager.create_fact("likes ramen", user_id="u")
    assert [r["content"] for r in manager.search("ramen", user_id="u")] == ["likes ramen"]
    fresh = make(tmp_path)  # cold cache: only the hits are read
    assert [r["content"] for r in fresh.search("ramen", user_id="u")] == ["likes ramen"]


class DictStorage(MemoryStorage):
    """DeerFlow's documented custom storage: only `load`, `reload` and `save`, kept in a dict."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.revision = 0
        self.facts: dict[tuple[str, str], dict[str, Any]] = {}

    def load(self, user_id: str | None, agent_name: str | None) -> MemorySnapshot:
        bucket = agent_name or "__default__"
        summaries = {part: empty_document()[part] for part in ("user", "history")}
        facts = {fact_id: f for (b, fact_id), f in self.facts.items() if b == bucket}
        buckets = tuple(sorted({b for b, _ in self.facts}))
        return MemorySnapshot(
            user_id or "default", bucket, self.revision, "", summaries, facts, buckets
        )

    reload = load

    def save(self, user_id: str | None, changes: ChangeSet) -> CommitResult:
        self.revision += 1
        for record in changes.upserts:
            self.facts[(record["agent_name"], record["id"])] = {**record, "revision": self.revision}
        return CommitResult(self.revision, f"change-{self.revision}", "", tuple(changes.upserts))


def test_a_custom_storage_with_only_load_reload_and_save_runs(tmp_path: Path) -> None:
    manager = make(tmp_path, storage_class=f"{__name__}.DictStorage")
    assert isinstance(manager.storage, DictStorage)

    _, fact_id = manager.create_fact("Prefers uv over pip", user_id="u")

    assert manager.storage.facts[("__default__", fact_id)]["content"] == "Prefers uv over pip"
    assert [f["content"] for f in manager.get_memory(user_id="u")["facts"]] == [
        "Prefers uv over pip"
    ]


def test_search_hits_read_one_by_one_see_edits_after_reload(tmp_path: Path) -> None:
    make(tmp_path).create_fact("Edits with vim", user_id="u")
    fresh = make(tmp_path)  # nothing cached: search reads only its hit
    (hit,) = fresh.search("vim", user_id="u")
    path = UserPaths(tmp_path, "u").fact_file("__default__", hit["id"])
    path.write_text(path.read_text().replace("Edits with vim\n", "Edits with vim and helix\n"))
    assert fresh.search("vim", user_id="u")[0]["content"] == "Edits with vim", "cached"
    fresh.reload_memory(user_id="u")
    assert fresh.search("vim", user_id="u")[0]["content"] == "Edits with vim and helix"


def test_concurrent_writes_of_one_user_in_one_process_all_land(tmp_path: Path) -> None:
    """A gateway serves one user's requests on many threads: none may end in a conflict.

    (Two concurrent edits of the same fact may: that conflict is real, see test_storage.)
    """
    manager = make(tmp_path)

    def write(i: int) -> None:
        _, fact_id = manager.create_fact(f"Fact number {i} about topic {i * 7}", "knowledge", 0.7)
        assert fact_id is not None
        manager.update_fact(fact_id, confidence=0.8)
        if i % 3 == 0:
            manager.delete_fact(fact_id)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(write, range(60)))  # re-raises the first failure
    facts = manager.get_memory()["facts"]
    assert len(facts) == 40
    assert {f["confidence"] for f in facts} == {0.8}


def test_context_order_is_confidence_then_update_time_then_id_as_the_tuple_orders_them() -> None:
    """`by_confidence` orders on one bytes key; it must order records as `(confidence,
    updatedAt, id)` does, with texts that begin one another and texts holding NULs."""
    rng = random.Random(7)
    confidences = [0.0, -0.0, 1.0, 5e-324, 1e-300, 0.1, 0.1 + 1e-16, 0.5, 0.9999999999999999]
    times = ["", "2026-01-01T00:00:00Z", "2026-01-01", "2026-01-01\0", "2026-01-01\0\1", "2026-é"]
    times += ["2026-😀", "2026\0\0", "2026\0"]
    ids = ["fact_a", "fact_a\0", "fact_a\0b", "fact_\x01", "fact_é", "fact_😀"]
    records = [
        {
            "id": f"{rng.choice(ids)}{n:04x}"[: rng.choice([6, 7, 8, 12])] + f"#{n}" * (n % 2),
            "content": f"fact {n}",
            "category": "context",
            "confidence": rng.choice(confidences + [rng.random() for _ in range(3)]),
            "updatedAt": rng.choice(times),
        }
        for n in range(600)
    ]
    facts = {record["id"]: record for record in records}
    snapshot = MemorySnapshot("u", "__default__", 1, "", {}, facts, ("__default__",))
    ranked = [entry.record["id"] for entry in RecordViews().by_confidence(snapshot)]
    by_tuple = sorted(
        facts.values(), key=lambda r: (r["confidence"], r["updatedAt"], r["id"]), reverse=True
    )
    assert ranked == [record["id"] for record in by_tuple]


def test_renders_during_concurrent_writes_end_as_a_fresh_render(tmp_path: Path) -> None:
    """Threads writing one bucket while others render it: the kept order is changed in place,
    so a render must never see it half-moved, and the last render must be a fresh one's."""
    manager = make(tmp_path, max_facts=40)
    stop = False

    def write(worker: int) -> None:
        rng = random.Random(worker)
        for step in range(30):
            confidence = rng.choice([0.5, 0.7, rng.random()])
            with contextlib.suppress(FactEvictedError, MemoryConflictError):
                manager.create_fact(f"w{worker} s{step}", "context", confidence, user_id="u")

    def render() -> int:
        renders = 0
        while not stop:
            lines = manager.get_context(user_id="u").splitlines()
            assert len(lines) == len(set(lines)), "a fact shown twice"
            renders += 1
        return renders

    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        renderers = [pool.submit(render) for _ in range(2)]
        list(pool.map(write, range(4)))
        stop = True
        assert all(r.result() > 0 for r in renderers)
    assert manager.get_context(user_id="u") == make(tmp_path, max_facts=40).get_context(user_id="u")


def test_context_order_carried_over_commits_is_the_order_of_a_fresh_read(tmp_path: Path) -> None:
    """The manager keeps each bucket's context order and moves it with every commit; after
    hundreds of creates, updates (ties included), deletes and evictions it must equal the
    order a new process derives from the same files."""
    rng = random.Random(11)
    manager = make(tmp_path, max_facts=60)
    ids: list[str] = []
    for step in range(400):
        action = rng.random()
        confidence = rng.choice([0.5, 0.5, 0.9, rng.random()])
        if action < 0.5 or len(ids) < 5:
            with contextlib.suppress(FactEvictedError):  # less confident than a full bucket
                _, fact_id = manager.create_fact(f"fact {step}", "context", confidence, user_id="u")
                ids.append(fact_id or "")
        elif action < 0.8:
            fact_id = rng.choice(ids)
            try:
                manager.update_fact(fact_id, confidence=confidence, user_id="u")
            except FactNotFoundError:  # evicted since
                ids.remove(fact_id)
        else:
            fact_id = ids.pop(rng.randrange(len(ids)))
            with contextlib.suppress(FactNotFoundError):
                manager.delete_fact(fact_id, user_id="u")
        manager.get_context(user_id="u")  # the kept order follows each commit
    assert manager.get_context(user_id="u") == make(tmp_path, max_facts=60).get_context(user_id="u")
    snapshot = manager.storage.load("u", None)
    kept = [entry.record for entry in manager._views.by_confidence(snapshot)]
    fresh = [entry.record for entry in RecordViews().by_confidence(snapshot)]
    assert kept == fresh
    assert [record["id"] for record in kept] == [
        record["id"]
        for record in sorted(
            snapshot.facts.values(),
            key=lambda r: (r["confidence"], r["updatedAt"], r["id"]),
            reverse=True,
        )
    ]


def test_failure_policy_is_ignored_as_its_warning_says(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """DeerMem is always fail_open on reads and logs a failed add(): a `failure_policy` in its
    config is an unknown key, warned about as ignored, so the host must not act on it either."""
    from deerflow.agents.memory.manager import memory_read_failures_are_fatal

    policy = {"failure_policy": {"read": "fail_closed", "write": "raise"}}
    with caplog.at_level(logging.WARNING):
        make(tmp_path, **policy).close()
    assert "memory.backend_config.failure_policy: unknown key; it is ignored" in caplog.text
    assert not memory_read_failures_are_fatal(MemoryConfig(backend_config=policy))
    assert not DeerMemMemoryManager.read_failures_are_fatal_for_config(policy)
    assert not DeerMemMemoryManager.write_failures_are_fatal_for_config(policy)


def test_agent_names_leaves_out_a_bucket_emptied_by_delete_or_clear(tmp_path: Path) -> None:
    """`agent_names` (and so the LangGraph store's `list_namespaces`) names the buckets that
    hold facts: one whose last fact was deleted, or that was cleared, is not among them."""
    manager = make(tmp_path)
    try:
        _, fact_id = manager.create_fact("Uses vim daily", user_id="u", agent_name="coder")
        manager.create_fact("Writes release notes", user_id="u", agent_name="writer")
        assert manager.agent_names(user_id="u") == ["coder", "writer"]
        assert fact_id is not None
        manager.delete_fact(fact_id, user_id="u", agent_name="coder")
        assert manager.agent_names(user_id="u") == ["writer"]
        manager.clear_memory(user_id="u", agent_name="writer")
        assert manager.agent_names(user_id="u") == []
    finally:
        manager.close()
