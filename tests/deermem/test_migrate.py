"""Migration of the old single-file layout: backups, buckets, refusals, idempotence."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem.deermem import migrate as migrate_module
from deerflow.agents.memory.backends.deermem.deermem.core.atomic import SyncBatch
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet
from deerflow.agents.memory.backends.deermem.deermem.core.journal import Journal
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    FACT_ID_PATTERN,
    UserPaths,
    safe_user_id,
)
from deerflow.agents.memory.backends.deermem.deermem.core.storage import FileMemoryStorage
from deerflow.agents.memory.backends.deermem.deermem.history import revert_changes
from deerflow.agents.memory.backends.deermem.deermem.migrate import (
    MigrationError,
    find_legacy,
    migrate,
    migrate_if_needed,
)
from deerflow.agents.memory.manager import MemoryCorruptionError
from tests.deermem.storage_helpers import fact, storage_at

SECRET = "My OpenAI key is sk-proj-4fG7hK2mN9pQ3rS8tV1wX6yZ0aB5cD"


def wired(root: Path) -> FileMemoryStorage:
    """File storage that migrates each user when it opens it, as DeerMem's manager builds it."""
    return FileMemoryStorage(storage_at(root).config, open_user=migrate_if_needed)


def v1_fact(content: str, fact_id: str | None = "fact_1a2b3c4d", **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": fact_id,
        "content": content,
        "category": "preference",
        "confidence": 0.9,
        "createdAt": "2025-03-01T08:00:00Z",
        "source": "thread-1",
    }
    record.update(fields)
    return record


def v1_document(*facts: dict[str, Any], **summaries: str) -> dict[str, Any]:
    """A v1 document; `summaries` maps section names (workContext, recentMonths...) to text."""

    def part(names: tuple[str, ...]) -> dict[str, Any]:
        return {
            name: {"summary": summaries.get(name, ""), "updatedAt": "2025-03-01T08:00:00Z"}
            for name in names
        }

    return {
        "version": "1.0",
        "lastUpdated": "2025-03-01T08:00:00Z",
        "user": part(("workContext", "personalContext", "topOfMind")),
        "history": part(("recentMonths", "earlierContext", "longTermBackground")),
        "facts": list(facts),
    }


def write_json(path: Path, document: dict[str, Any]) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8")
    path.write_bytes(data)
    return data


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root, lock files aside (taking a lock is not a change)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name != ".memory.lock"
    }


def summary(storage: FileMemoryStorage, user: str, part: str, section: str) -> str:
    return storage.load(user, None).summaries[part][section]["summary"]


def test_root_and_agent_files_move_into_the_default_users_buckets(tmp_path: Path) -> None:
    root_bytes = write_json(
        tmp_path / "memory.json",
        v1_document(
            v1_fact("Prefers uv over pip"),
            v1_fact("Collects stamps", "legacy-7", category="hobby", source=None),
            workContext="Backend engineer",
        ),
    )
    agent_bytes = write_json(
        tmp_path / "agents" / "coder" / "memory.json",
        v1_document(
            v1_fact("Uses pnpm, not npm", "fact_00ff00ff"), personalContext="Lives in Oslo"
        ),
    )
    (tmp_path / "agents" / "coder" / "SOUL.md").write_text("the agent's own definition")
    storage = storage_at(tmp_path)

    report = migrate(tmp_path, storage)

    assert report.ok, report.as_dict()
    [user] = report.users
    assert (user.user_id, user.facts, user.buckets) == (
        "default",
        3,
        {"__default__": 2, "coder": 1},
    )
    assert user.summaries == ["user.workContext", "user.personalContext"]
    assert (tmp_path / "memory.json.v1.bak").read_bytes() == root_bytes
    assert (tmp_path / "agents" / "coder" / "memory.json.v1.bak").read_bytes() == agent_bytes
    assert not (tmp_path / "memory.json").exists()
    assert not (tmp_path / "agents" / "coder" / "memory.json").exists()
    assert (tmp_path / "agents" / "coder" / "SOUL.md").exists(), "only memory.json is removed"

    fresh = storage_at(tmp_path)
    facts = {f["content"]: f for f in fresh.load("default", None).facts.values()}
    assert facts["Prefers uv over pip"]["id"] == "fact_1a2b3c4d"
    assert facts["Prefers uv over pip"]["source"] == {
        "type": "conversation",
        "threadId": "thread-1",
    }
    stamps = facts["Collects stamps"]
    assert FACT_ID_PATTERN.match(stamps["id"])
    assert (stamps["legacyId"], stamps["category"], stamps["categoryExtension"]) == (
        "legacy-7",
        "other",
        "hobby",
    )
    assert stamps["source"]["type"] == "unknown"
    [coder_fact] = fresh.load("default", "coder").facts.values()
    assert coder_fact["content"] == "Uses pnpm, not npm"
    path = UserPaths(tmp_path, "default").fact_file("coder", "fact_00ff00ff")
    assert path.read_text().endswith("# Uses pnpm, not npm\n\nUses pnpm, not npm\n")
    assert summary(fresh, "default", "user", "workContext") == "Backend engineer"
    assert summary(fresh, "default", "user", "personalContext") == "Lives in Oslo"
    [entry] = fresh.read_history("default")
    assert (entry["actor"], entry["change_id"]) == ("migration", user.change_id)


def test_a_v1_per_user_file_is_replaced_by_the_current_layout(tmp_path: Path) -> None:
    paths = UserPaths(tmp_path, "alice")
    legacy = write_json(
        paths.manifest, v1_document(v1_fact("Likes tea"), topOfMind="Shipping v2", recentMonths="")
    )
    hashed = UserPaths(tmp_path, safe_user_id("bob@example.com"))
    write_json(
        hashed.manifest, v1_document(v1_fact("Likes coffee")) | {"userId": "bob@example.com"}
    )

    report = migrate(tmp_path, storage_at(tmp_path))

    assert report.ok, report.as_dict()
    assert sorted(user.user_id for user in report.users) == ["alice", "bob@example.com"]
    assert (paths.dir / "memory.json.v1.bak").read_bytes() == legacy
    manifest = json.loads(paths.manifest.read_text())
    assert (manifest["version"], manifest["revision"], "facts" in manifest) == ("2.0", 1, False)
    fresh = storage_at(tmp_path)
    assert [f["content"] for f in fresh.load("alice", None).facts.values()] == ["Likes tea"]
    assert summary(fresh, "alice", "user", "topOfMind") == "Shipping v2"
    bob = fresh.load("bob@example.com", None)
    assert [f["content"] for f in bob.facts.values()] == ["Likes coffee"]
    assert list(fresh.user_ids()) == ["alice", "bob@example.com"]


def test_a_per_user_file_without_version_2_or_with_facts_counts_as_legacy(tmp_path: Path) -> None:
    document = v1_document(v1_fact("Likes tea")) | {"version": "2.0", "revision": 3}
    write_json(UserPaths(tmp_path, "carl").manifest, document)
    assert [source.kind for source in find_legacy(tmp_path)] == ["user"]
    assert migrate(tmp_path, storage_at(tmp_path)).ok
    assert find_legacy(tmp_path) == []


def test_the_first_read_migrates_and_later_reads_do_not_look_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_json(tmp_path / "memory.json", v1_document(v1_fact("Prefers uv over pip")))
    storage = wired(tmp_path)

    snapshot = storage.load(None, None)

    assert [f["content"] for f in snapshot.facts.values()] == ["Prefers uv over pip"]
    assert migrate_if_needed(storage, "default") is None
    monkeypatch.setattr(migrate_module, "_sources_of", _must_not_scan)
    storage.save("default", ChangeSet("manual", "t", upserts=[fact("Likes tea")]))
    assert len(storage.load(None, None).facts) == 2
    assert len(storage.reload("default", "coder").facts) == 0
    assert len(storage.read_history("default")) == 2


def _must_not_scan(*args: object) -> None:
    raise AssertionError("looked for legacy files again although the user was opened")


def test_a_user_whose_opening_failed_is_opened_again(tmp_path: Path) -> None:
    legacy = tmp_path / "memory.json"
    write_json(legacy, v1_document(v1_fact("Fine"), v1_fact("   ", "fact_0000e0e0")))
    storage = wired(tmp_path)
    for _ in range(2):
        with pytest.raises(MigrationError, match="content"):
            storage.load(None, None)
    write_json(legacy, v1_document(v1_fact("Fine")))

    assert [f["content"] for f in storage.load(None, None).facts.values()] == ["Fine"]


def test_a_legacy_file_put_there_later_waits_for_migrate_or_the_next_process(
    tmp_path: Path,
) -> None:
    storage = wired(tmp_path)
    storage.save("default", ChangeSet("manual", "t", upserts=[fact("Likes tea")]))
    write_json(tmp_path / "agents" / "coder" / "memory.json", v1_document(v1_fact("Uses pnpm")))

    assert storage.load("default", "coder").facts == {}, "opened already: not looked at again"
    [coder_fact] = wired(tmp_path).load("default", "coder").facts.values()
    assert coder_fact["content"] == "Uses pnpm"


def test_concurrent_first_reads_migrate_once(tmp_path: Path) -> None:
    write_json(tmp_path / "memory.json", v1_document(v1_fact("Prefers uv over pip")))
    storage = wired(tmp_path)

    with ThreadPoolExecutor(8) as pool:
        snapshots = list(pool.map(lambda _: storage.load(None, None), range(8)))

    assert {len(snapshot.facts) for snapshot in snapshots} == {1}
    assert len(storage.read_history("default")) == 1


def test_processes_that_open_a_legacy_user_at_once_migrate_it_once(tmp_path: Path) -> None:
    legacy = write_json(UserPaths(tmp_path, "alice").manifest, v1_document(v1_fact("Likes tea")))
    code = (
        "import sys\n"
        "from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager\n"
        "m = DeerMemMemoryManager.from_config({'storage_path': sys.argv[1]})\n"
        "print([f['content'] for f in m.get_memory(user_id='alice')['facts']])\n"
    )
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]

    outputs = [reader.communicate(timeout=120)[0] for reader in readers]

    assert [reader.returncode for reader in readers] == [0] * 4
    assert outputs == ["['Likes tea']\n"] * 4
    [entry] = storage_at(tmp_path).read_history("alice")
    assert entry["actor"] == "migration"
    assert (UserPaths(tmp_path, "alice").dir / "memory.json.v1.bak").read_bytes() == legacy


def test_a_per_agent_summary_that_conflicts_is_refused_and_nothing_changes(
    tmp_path: Path,
) -> None:
    storage = storage_at(tmp_path)
    storage.save("default", ChangeSet("manual", "t", summaries={"user": {"workContext": "Chef"}}))
    write_json(
        tmp_path / "agents" / "coder" / "memory.json",
        v1_document(v1_fact("Uses pnpm"), workContext="Backend engineer"),
    )
    before = tree(tmp_path)

    with pytest.raises(MigrationError, match=r"summary user\.workContext differs") as caught:
        wired(tmp_path).load("default", "coder")

    assert isinstance(caught.value, MemoryCorruptionError)
    assert tree(tmp_path) == before, "legacy file kept, no backup, no fact"
    report = migrate(tmp_path, storage_at(tmp_path))
    assert not report.ok
    assert "agents/coder/memory.json" in str(report.users[0].error)


def test_a_per_agent_summary_equal_to_the_stored_one_is_adopted(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    storage.save("default", ChangeSet("manual", "t", summaries={"user": {"workContext": "Chef"}}))
    write_json(
        tmp_path / "agents" / "coder" / "memory.json",
        v1_document(v1_fact("Uses pnpm"), workContext="Chef", topOfMind="Knife skills"),
    )
    [user] = migrate(tmp_path, storage).users
    assert (user.error, user.summaries) == (None, ["user.topOfMind"])
    assert summary(storage, "default", "user", "workContext") == "Chef"


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (
            v1_fact(SECRET, "fact_5ec12e70"),
            r"facts\[1\] \(id 'fact_5ec12e70'\): content looks like",
        ),
        (v1_fact("   ", "fact_0000e0e0"), r"facts\[1\] \(id 'fact_0000e0e0'\): content"),
        (v1_fact("Tall", "fact_0000c0c0", confidence=7), r"facts\[1\].*between 0 and 1"),
        (v1_fact("Tall", "fact_0000c0c1", confidence="high"), r"facts\[1\].*must be a number"),
    ],
)
def test_an_unusable_fact_aborts_with_nothing_changed(
    tmp_path: Path, bad: dict[str, Any], problem: str
) -> None:
    write_json(tmp_path / "memory.json", v1_document(v1_fact("Fine"), bad, workContext="Dev"))
    before = tree(tmp_path)
    storage = wired(tmp_path)

    with pytest.raises(MigrationError, match=problem):
        storage.load(None, None)

    assert tree(tmp_path) == before


def test_a_secret_in_a_summary_aborts_too(tmp_path: Path) -> None:
    write_json(tmp_path / "memory.json", v1_document(workContext=SECRET))
    report = migrate(tmp_path, storage_at(tmp_path))
    assert "summary user.workContext: looks like" in str(report.users[0].error)
    assert (tmp_path / "memory.json").exists()


def test_dry_run_lists_sources_and_changes_nothing(tmp_path: Path) -> None:
    write_json(tmp_path / "memory.json", v1_document(v1_fact("A"), workContext="Dev"))
    write_json(tmp_path / "agents" / "coder" / "memory.json", v1_document(v1_fact("B", None)))
    write_json(UserPaths(tmp_path, "alice").manifest, v1_document(v1_fact("C")))
    before = tree(tmp_path)

    sources = find_legacy(tmp_path)
    report = migrate(tmp_path, storage_at(tmp_path), dry_run=True)

    assert [(s.kind, s.user_id, s.agent) for s in sources] == [
        ("root", "default", None),
        ("agent", "default", "coder"),
        ("user", "alice", None),
    ]
    assert report.dry_run
    assert report.ok
    assert [(u.user_id, u.buckets, u.change_id) for u in report.users] == [
        ("default", {"__default__": 1, "coder": 1}, None),
        ("alice", {"__default__": 1}, None),
    ]
    assert report.users[0].backups == [
        tmp_path / "memory.json.v1.bak",
        tmp_path / "agents" / "coder" / "memory.json.v1.bak",
    ]
    json.dumps(report.as_dict())
    assert tree(tmp_path) == before


def test_running_twice_changes_nothing_the_second_time(tmp_path: Path) -> None:
    write_json(tmp_path / "memory.json", v1_document(v1_fact("A"), workContext="Dev"))
    write_json(UserPaths(tmp_path, "alice").manifest, v1_document(v1_fact("C")))
    storage = storage_at(tmp_path)
    assert migrate(tmp_path, storage).ok
    after_first = tree(tmp_path)

    second = migrate(tmp_path, storage)

    assert (second.ok, second.users) == (True, ())
    assert tree(tmp_path) == after_first


def test_the_migration_is_one_revertible_history_entry(tmp_path: Path) -> None:
    write_json(
        tmp_path / "memory.json",
        v1_document(v1_fact("A"), v1_fact("B", "fact_0000000b"), workContext="Dev"),
    )
    storage = storage_at(tmp_path)
    [user] = migrate(tmp_path, storage).users
    entries = storage.read_history("default")
    assert [entry["change_id"] for entry in entries] == [user.change_id]
    snapshot = storage.load("default", None)

    undo = revert_changes(
        entries, str(user.change_id), "default", snapshot.revision, snapshot.summaries
    )
    storage.save("default", undo)

    assert storage.load("default", None).facts == {}
    assert summary(storage, "default", "user", "workContext") == ""


def test_an_existing_different_backup_aborts(tmp_path: Path) -> None:
    write_json(tmp_path / "memory.json", v1_document(v1_fact("A")))
    (tmp_path / "memory.json.v1.bak").write_bytes(b"an older backup")
    before = tree(tmp_path)

    report = migrate(tmp_path, storage_at(tmp_path))

    assert "memory.json.v1.bak exists and differs" in str(report.users[0].error)
    assert tree(tmp_path) == before


def test_an_identical_backup_is_reused(tmp_path: Path) -> None:
    data = write_json(tmp_path / "memory.json", v1_document(v1_fact("A")))
    (tmp_path / "memory.json.v1.bak").write_bytes(data)
    [user] = migrate(tmp_path, storage_at(tmp_path)).users
    assert (user.error, user.backups, user.facts) == (None, [], 1)


def test_a_fact_id_already_stored_with_other_content_aborts(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    storage.save(
        "default", ChangeSet("manual", "t", upserts=[fact("Likes tea", id="fact_1a2b3c4d")])
    )
    write_json(tmp_path / "memory.json", v1_document(v1_fact("Likes coffee")))

    report = migrate(tmp_path, storage)

    assert "fact fact_1a2b3c4d already exists in bucket __default__" in str(report.users[0].error)
    assert (tmp_path / "memory.json").exists()


def test_a_commit_that_crashes_is_resumed_on_the_next_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = UserPaths(tmp_path, "alice")
    legacy = write_json(paths.manifest, v1_document(v1_fact("Likes tea"), workContext="Dev"))

    create = SyncBatch.create

    def crash_at_commit_point(batch: SyncBatch, path: Path, data: bytes) -> None:
        if path.name == "memory.json":  # the migration removed it: the commit creates it
            raise OSError("simulated crash")
        create(batch, path, data)

    monkeypatch.setattr(SyncBatch, "create", crash_at_commit_point)
    with pytest.raises(OSError, match="simulated"):
        wired(tmp_path).load("alice", None)
    monkeypatch.undo()
    assert Journal.pending(paths.journal) is not None
    assert not paths.manifest.exists()
    assert [s.kind for s in find_legacy(tmp_path)] == ["user"], "unfinished: still listed"

    snapshot = wired(tmp_path).load("alice", None)

    assert [f["content"] for f in snapshot.facts.values()] == ["Likes tea"]
    assert snapshot.summaries["user"]["workContext"]["summary"] == "Dev"
    assert (paths.dir / "memory.json.v1.bak").read_bytes() == legacy
    assert Journal.pending(paths.journal) is None
    assert len(storage_at(tmp_path).read_history("alice")) == 1


def test_an_empty_legacy_file_still_ends_in_the_current_layout(tmp_path: Path) -> None:
    write_json(UserPaths(tmp_path, "dan").manifest, v1_document())
    [user] = migrate(tmp_path, storage_at(tmp_path)).users
    assert (user.error, user.change_id, user.facts) == (None, None, 0)
    assert find_legacy(tmp_path) == []
    assert storage_at(tmp_path).load("dan", None).revision == 0


def test_a_hashed_user_directory_without_a_user_id_is_reported(tmp_path: Path) -> None:
    write_json(UserPaths(tmp_path, safe_user_id("eve@example.com")).manifest, v1_document())
    [user] = migrate(tmp_path, storage_at(tmp_path)).users
    assert "cannot tell the user id" in str(user.error)
    assert wired(tmp_path).load("eve@example.com", None).revision == 0, "migrates on first read"


def test_an_agent_directory_that_is_no_agent_name_is_refused(tmp_path: Path) -> None:
    write_json(tmp_path / "agents" / "my.agent" / "memory.json", v1_document(v1_fact("A")))
    [user] = migrate(tmp_path, storage_at(tmp_path)).users
    assert "agent_name: 'my.agent' must match" in str(user.error)


def test_another_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="storage root"):
        migrate(tmp_path / "elsewhere", storage_at(tmp_path))


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"version": "1.0", "facts": {"a": 1}}, "facts: must be a list"),
        ({"facts": [], "user": "Dev"}, "user: must be an object"),
        ({"facts": [], "user": {"workContext": {"summary": 3}}}, "workContext: must be text"),
        ({"facts": ["Likes tea"]}, r"facts\[0\]: must be an object"),
        ({"facts": [v1_fact("Tea", category=5)]}, "category: 5 is not text"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_a_malformed_legacy_document_is_refused(
    tmp_path: Path, document: Any, problem: str
) -> None:
    (tmp_path / "memory.json").write_text(json.dumps(document))
    with pytest.raises(MigrationError, match=problem):
        wired(tmp_path).load(None, None)
    assert (tmp_path / "memory.json").exists()


def test_a_bucket_over_max_facts_is_refused_rather_than_cut_at_the_next_write(
    tmp_path: Path,
) -> None:
    facts = [v1_fact(f"Uses Vim number {n}", fact_id=None) for n in range(12)]
    write_json(tmp_path / "agents" / "coder" / "memory.json", v1_document(*facts))
    before = tree(tmp_path)
    report = migrate(tmp_path, storage_at(tmp_path, max_facts=10))
    assert "bucket coder: 12 facts exceed max_facts=10" in str(report.users[0].error)
    assert tree(tmp_path) == before
    report = migrate(tmp_path, storage_at(tmp_path, max_facts=12))
    assert report.ok
    assert len(storage_at(tmp_path).load(None, "coder").facts) == 12


def test_a_secret_in_a_legacy_fact_s_source_error_aborts(tmp_path: Path) -> None:
    bad = v1_fact("Use pnpm", sourceError=SECRET)
    write_json(tmp_path / "memory.json", v1_document(bad))
    report = migrate(tmp_path, storage_at(tmp_path))
    assert "sourceError looks like" in str(report.users[0].error)
