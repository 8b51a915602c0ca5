"""Files damaged or misplaced by hand: each read names the file as corrupt and leaves it alone;
an edit that keeps the revision is still seen."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.core.journal import Journal, JournalEntry
from deerflow.agents.memory.backends.deermem.deermem.core.paths import shard_of
from deerflow.agents.memory.manager import MemoryCorruptionError
from tests.deermem.storage_helpers import reopened


@pytest.fixture
def manager(tmp_path: Path) -> DeerMemMemoryManager:
    return DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})


def user_dir(manager: DeerMemMemoryManager) -> Path:
    return Path(manager.backend_config["storage_path"]) / "users" / "u"


@pytest.mark.parametrize("where", ["another shard", "no shard"])
def test_a_fact_file_outside_its_shard_folder_is_corruption(
    manager: DeerMemMemoryManager, where: str
) -> None:
    _, fact_id = manager.create_fact("Drinks tea", user_id="u")
    assert fact_id
    [path] = user_dir(manager).rglob(f"{fact_id}.md")
    other = "00" if shard_of(fact_id) != "00" else "01"
    folder = path.parent.parent / other if where == "another shard" else path.parent.parent
    folder.mkdir(exist_ok=True)
    moved = path.rename(folder / path.name)
    data = moved.read_bytes()
    for reader in (reopened(manager), manager):
        with pytest.raises(MemoryCorruptionError, match=re.escape(str(moved))):
            reader.reload_memory(user_id="u")
    with pytest.raises(MemoryCorruptionError):
        manager.clear_memory(user_id="u")
    assert moved.read_bytes() == data


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.pop("history"),
        lambda d: d.update(user={"workContext": "I work at ACME"}),
        lambda d: d.update(user=[]),
        lambda d: d["history"].pop("recentMonths"),
    ],
)
def test_a_memory_json_of_the_wrong_shape_is_corruption_before_any_write(
    manager: DeerMemMemoryManager, edit: object
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    manifest = user_dir(manager) / "memory.json"
    document = json.loads(manifest.read_text())
    edit(document)  # type: ignore[operator]
    manifest.write_text(json.dumps(document))
    data = manifest.read_bytes()
    for call in (
        lambda: manager.get_context("u"),
        lambda: manager.create_fact("Lives in Porto", user_id="u"),
        lambda: reopened(manager).reindex(),
    ):
        with pytest.raises(MemoryCorruptionError, match=r"memory\.json: unreadable"):
            call()
    assert manifest.read_bytes() == data


def test_a_summary_edited_by_hand_without_a_new_revision_reaches_the_context(
    manager: DeerMemMemoryManager,
) -> None:
    manager.import_memory({"user": {"workContext": {"summary": "Works at Initech"}}}, user_id="u")
    assert "Initech" in manager.get_context("u")
    manifest = user_dir(manager) / "memory.json"
    manifest.write_text(manifest.read_text().replace("Initech", "ACME Corp"))
    assert "ACME Corp" in manager.get_context("u")


@pytest.mark.parametrize(
    "entry", ["../outside.md", "/tmp/outside.md", "//tmp/outside.md", "", "a\x00b"]
)
def test_a_pending_journal_naming_a_file_outside_the_user_is_refused(
    manager: DeerMemMemoryManager, tmp_path: Path, entry: str
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    outside = tmp_path / "users" / "outside.md"
    outside.write_bytes(b"not memory")
    revision = manager.get_memory(user_id="u")["revision"]
    Journal(
        operation_id="chg_x",
        previous_revision=revision,
        next_revision=revision + 1,
        entries=(JournalEntry(entry, None),),
        history_line=b'{"change_id": "chg_x"}\n',
        history_size=0,
    ).write(user_dir(manager) / ".journal.json")
    with pytest.raises(MemoryCorruptionError, match="not inside the user's directory"):
        reopened(manager).get_memory(user_id="u")
    assert outside.read_bytes() == b"not memory"


def stored_files(manager: DeerMemMemoryManager) -> dict[str, bytes]:
    """Every file of the user, lock file aside: what a refused operation must leave alone."""
    root = user_dir(manager)
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name != ".memory.lock"
    }


def refusals(manager: DeerMemMemoryManager) -> list[Callable[[], object]]:
    """What a user does next: reads, a write, a search, a reindex (each in a fresh process too)."""
    return [
        lambda: manager.get_memory(user_id="u"),
        lambda: reopened(manager).get_context("u"),
        lambda: manager.create_fact("Lives in Porto", user_id="u"),
        lambda: reopened(manager).search("tea", user_id="u"),
        lambda: reopened(manager).reindex(),
    ]


@pytest.mark.parametrize(
    ("value", "named"),
    [(10**30, "revision 10"), (True, "revision True"), (-3, "revision -3"), ("5", "revision '5'")],
)
def test_a_memory_json_revision_out_of_range_is_corruption(
    manager: DeerMemMemoryManager, value: object, named: str
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    manifest = user_dir(manager) / "memory.json"
    manifest.write_text(
        manifest.read_text().replace('"revision": 1', f'"revision": {json.dumps(value)}')
    )
    before = stored_files(manager)
    for call in refusals(manager):
        with pytest.raises(
            MemoryCorruptionError, match=f"memory.json: unreadable: {re.escape(named)}"
        ):
            call()
    assert stored_files(manager) == before


def test_a_fact_revision_out_of_range_is_corruption(manager: DeerMemMemoryManager) -> None:
    _, fact_id = manager.create_fact("Drinks tea", user_id="u")
    [path] = user_dir(manager).rglob(f"{fact_id}.md")
    path.write_text(path.read_text().replace("revision: 1", f"revision: {10**30}"))
    before = stored_files(manager)
    with pytest.raises(MemoryCorruptionError, match=re.escape(str(path))):
        reopened(manager).reindex()
    with pytest.raises(MemoryCorruptionError, match="not a non-negative 64-bit integer"):
        manager.update_fact(fact_id, "Drinks coffee", user_id="u")
    assert stored_files(manager) == before


def test_a_memory_json_naming_another_user_is_corruption(
    manager: DeerMemMemoryManager,
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    manager.create_fact("Drinks coffee", user_id="v")
    manifest = user_dir(manager) / "memory.json"
    manifest.write_text(manifest.read_text().replace('"userId": "u"', '"userId": "v"'))
    before = stored_files(manager)
    for call in refusals(manager):
        with pytest.raises(MemoryCorruptionError, match=r"userId 'v' is not the user"):
            call()
    assert stored_files(manager) == before


def test_a_directory_where_a_fact_file_belongs_is_corruption(
    manager: DeerMemMemoryManager,
) -> None:
    _, fact_id = manager.create_fact("Drinks tea", user_id="u")
    assert fact_id
    [path] = user_dir(manager).rglob(f"{fact_id}.md")
    path.unlink()
    (path / "inside.txt").parent.mkdir()
    before = stored_files(manager)
    for call in (
        lambda: reopened(manager).reload_memory(user_id="u"),
        lambda: manager.reload_memory(user_id="u"),
        lambda: reopened(manager).reindex(),
        lambda: reopened(manager).update_fact(fact_id, "Drinks coffee", user_id="u"),
    ):
        with pytest.raises(MemoryCorruptionError, match=f"{re.escape(str(path))}: a directory"):
            call()
    assert stored_files(manager) == before


def test_a_directory_where_memory_json_belongs_is_corruption(
    manager: DeerMemMemoryManager,
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    manifest = user_dir(manager) / "memory.json"
    manifest.unlink()
    manifest.mkdir()
    with pytest.raises(MemoryCorruptionError, match=r"memory\.json: a directory"):
        reopened(manager).get_memory(user_id="u")


def test_a_torn_history_tail_is_refused_before_the_next_append(
    manager: DeerMemMemoryManager,
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    history = user_dir(manager) / "history.jsonl"
    with open(history, "ab") as handle:
        handle.write(b'{"change_id": "chg_torn", "at": "2026')
    before = stored_files(manager)
    for writer in (reopened(manager), manager):
        with pytest.raises(
            MemoryCorruptionError, match=r"history\.jsonl: its last line .* cut off"
        ):
            writer.create_fact("Lives in Porto", user_id="u")
    assert stored_files(manager) == before  # neither extended nor anything else written


def test_a_last_history_entry_without_its_newline_gets_one(
    manager: DeerMemMemoryManager,
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    history = user_dir(manager) / "history.jsonl"
    history.write_bytes(history.read_bytes().rstrip(b"\n"))  # as an editor may save it
    reopened(manager).create_fact("Lives in Porto", user_id="u")
    assert [entry["revision"] for entry in manager.get_history(user_id="u")] == [2, 1]
