"""What a fact carries beyond its content, and what a write rests on (found by an audit of
inputs, hand edits and undo, 2026-12-03):

* optional and unknown fields (docs/data-format.md) on every write path: checked, scrubbed of
  secrets, found by the audit, kept through a Markdown round trip, never breaking a read;
* writes against hand edits the process has not read;
* history and undo rules: per-agent views, malformed lines, undo that would duplicate or
  overfill.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem import imports
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import OPTIONAL_PUBLIC_FIELDS
from deerflow.agents.memory.backends.deermem.deermem.core.paths import shard_of
from deerflow.agents.memory.backends.deermem.deermem.pipeline.apply import apply_extraction
from deerflow.agents.memory.backends.deermem.deermem.pipeline.extraction import (
    Consolidation,
    Extraction,
    Labels,
    NewFact,
)
from tests.deermem.storage_helpers import reopened

SECRET = "used password: Hunter2xyz! on prod"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.fixture
def manager(tmp_path: Path) -> DeerMemMemoryManager:
    return DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})


def fact(**fields: Any) -> dict[str, Any]:
    return {"content": "Use pnpm, not npm", "category": "correction", **fields}


def state(manager: DeerMemMemoryManager) -> tuple[int, list[dict[str, Any]]]:
    document = manager.reload_memory(user_id="u")
    return document["revision"], document["facts"]


def test_every_optional_field_has_a_check_on_import() -> None:
    assert set(imports._OPTIONAL_CHECKS) == set(OPTIONAL_PUBLIC_FIELDS)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sourceError", {"a": 1}),
        ("sourceError", 7),
        ("sourceError", "   "),
        ("topics", "pnpm"),
        ("topics", ["pnpm", 3]),
        ("consolidatedFrom", [""]),
        ("consolidatedFrom", ["sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2"]),
        ("sourceError", "used npm\x1b[2J"),
        ("topics", ["a\ud800"]),
        ("event_time", "2024\x00"),
        ("expected_valid_days", 0),
        ("expected_valid_days", 10**30),
        ("expected_valid_days", 2.5),
        ("expected_valid_days", True),
        ("confirmationCount", -1),
        ("lastConfirmedAt", "last tuesday"),
        ("event_time", ["2023-05-08"]),
        ("createdAt", "not a date"),
        ("updatedAt", 20230508),
    ],
)
def test_an_import_with_a_malformed_optional_field_names_it_and_writes_nothing(
    manager: DeerMemMemoryManager, field: str, value: Any
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    before = state(manager)
    with pytest.raises(ValueError, match=rf"^facts\[1\]\.{field}: (must|holds) "):
        manager.import_memory({"facts": [fact(), fact(content="x", **{field: value})]}, user_id="u")
    assert state(manager) == before


def test_well_formed_optional_fields_round_trip(manager: DeerMemMemoryManager) -> None:
    fields = {
        "sourceError": "Used npm",
        "topics": ["pnpm", "javascript"],
        "expected_valid_days": 365,
        "lastConfirmedAt": "2026-11-01T10:00:00Z",
        "confirmationCount": 2,
        "consolidatedFrom": ["fact_0123456789abcdef"],
        "event_time": "2023-05-08",
    }
    manager.import_memory({"facts": [fact(**fields)]}, user_id="u")
    [stored] = manager.reload_memory(user_id="u")["facts"]
    assert {key: stored[key] for key in fields} == fields


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"sourceError": SECRET}, "sourceError"),
        ({"topics": ["deploys", "token sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2"]}, r"topics\[1\]"),
        ({"event_time": "when password: Hunter2xyz! was set"}, "event_time"),
    ],
)
def test_a_secret_in_any_text_of_an_imported_fact_is_refused(
    manager: DeerMemMemoryManager, fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=rf"^facts\[0\]\.{named}: refused, .*never stored"):
        manager.import_memory({"facts": [fact(**fields)]}, user_id="u")
    assert state(manager) == (0, [])


def test_a_secret_in_a_markdown_export_s_source_error_is_refused(
    manager: DeerMemMemoryManager, tmp_path: Path
) -> None:
    manager.import_memory({"facts": [fact(sourceError="Used npm")]}, user_id="u")
    folder = tmp_path / "export"
    manager.export_markdown(folder, user_id="u")
    [path] = (folder / "facts").glob("*.md")
    path.write_text(path.read_text().replace("sourceError: Used npm", f"sourceError: '{SECRET}'"))
    before = state(manager)
    with pytest.raises(ValueError, match=r"sourceError: refused"):
        manager.import_markdown(folder, user_id="v")
    assert manager.get_memory(user_id="v")["revision"] == 0
    assert state(manager) == before


def test_the_pipeline_drops_a_proposed_fact_whose_source_error_holds_a_secret(
    manager: DeerMemMemoryManager,
) -> None:
    config = manager._config
    labels = Labels("user", "durable", "descriptive")
    proposals = (
        NewFact("Use pnpm", "correction", 0.9, labels, source_error=SECRET),
        NewFact("Drinks tea", "preference", 0.9, labels, topics=("password: Hunter2xyz!",)),
        NewFact("Lives in Porto", "identity", 0.9, labels, source_error="Said Lisbon"),
    )
    result = Extraction({}, proposals, (), (), (), (), (), {})
    outcome = apply_extraction(
        manager.storage.load("u", None), result, config, now=NOW, stamp="s", thread_id="t"
    )
    manager.storage.save("u", outcome.changes)
    assert [f["content"] for f in state(manager)[1]] == ["Lives in Porto"]
    assert outcome.metrics["rejected_secret"] == 2


def test_a_consolidation_does_not_carry_a_hand_written_secret_along(
    manager: DeerMemMemoryManager,
) -> None:
    _, first = manager.create_fact("Uses npm", "knowledge", 0.9, user_id="u")
    _, second = manager.create_fact("Uses yarn", "knowledge", 0.9, user_id="u")
    assert first
    assert second
    hand_edit(manager, first, f"sourceError: '{SECRET}'")
    result = Extraction(
        {},
        (),
        (),
        (),
        (),
        (),
        (
            Consolidation(
                (first, second),
                "Uses a JS package manager",
                "knowledge",
                0.9,
                Labels("user", "durable", "descriptive"),
            ),
        ),
        {},
    )
    config = manager._config.model_copy(update={"consolidation_enabled": True})
    outcome = apply_extraction(
        manager.storage.load("u", None), result, config, now=NOW, stamp="s", thread_id="t"
    )
    assert outcome.metrics["consolidations_rejected"] == 1
    assert not outcome.changes.upserts


def hand_edit(manager: DeerMemMemoryManager, fact_id: str, line: str) -> Path:
    """Add a front-matter line to a fact's file by hand, then reload."""
    [path] = Path(manager.backend_config["storage_path"]).rglob(f"{fact_id}.md")
    path.write_text(path.read_text().replace("\nschemaVersion:", f"\n{line}\nschemaVersion:"))
    manager.reload_memory(user_id="u")
    return path


def test_the_audit_finds_a_secret_written_into_a_source_error_by_hand(
    manager: DeerMemMemoryManager,
) -> None:
    _, fact_id = manager.create_fact("Use pnpm", "correction", user_id="u")
    assert fact_id
    hand_edit(manager, fact_id, f"sourceError: '{SECRET}'")
    [report] = manager.audit(user_id="u")
    assert [(s["id"], s["reason"].split()[0]) for s in report["secrets"]["facts"]] == [
        (fact_id, "sourceError")
    ]


def test_a_hand_written_source_error_that_is_not_text_does_not_break_the_context(
    manager: DeerMemMemoryManager,
) -> None:
    _, fact_id = manager.create_fact("Use pnpm", "correction", user_id="u")
    assert fact_id
    hand_edit(manager, fact_id, "sourceError: {a: 1}\nexpected_valid_days: 1000000000000000000000")
    assert "Use pnpm" in manager.get_context("u")
    assert manager.audit(user_id="u")[0]["stale"]["ids"] == []


def test_import_refuses_a_document_that_is_not_an_export(manager: DeerMemMemoryManager) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    before = state(manager)
    with pytest.raises(ValueError, match=r"unknown key 'Facts'"):
        manager.import_memory({"Facts": [fact()]}, user_id="u")
    with pytest.raises(ValueError, match=r"none of user, history and facts"):
        manager.import_memory({"version": "2.0"}, user_id="u")
    assert state(manager) == before
    exported = json.loads(json.dumps(manager.export_memory(user_id="u")))
    manager.import_memory(exported, user_id="u")  # every key of an export is accepted
    assert state(manager)[1] == before[1]


@pytest.mark.parametrize("case", ["manifest is a list", "no version", "a folder named .md"])
def test_a_folder_that_is_not_a_markdown_export_is_refused(
    manager: DeerMemMemoryManager, tmp_path: Path, case: str
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    folder = tmp_path / "export"
    manager.export_markdown(folder, user_id="u")
    if case == "manifest is a list":
        (folder / "memory.json").write_text("[]")
    elif case == "no version":
        (folder / "memory.json").write_text('{"user": {}, "history": {}}')
    else:
        (folder / "facts" / "fact_00.md").mkdir()
    before = state(manager)
    with pytest.raises(ValueError, match=r"not a DeerMem Markdown export|not a fact file"):
        manager.import_markdown(folder, user_id="u")
    assert state(manager) == before


def edit_body(manager: DeerMemMemoryManager, fact_id: str, old: str, new: str) -> None:
    [path] = Path(manager.backend_config["storage_path"]).rglob(f"{fact_id}.md")
    path.write_text(path.read_text().replace(old, new))


def test_an_update_does_not_write_over_a_hand_edit_the_process_has_not_read(
    manager: DeerMemMemoryManager,
) -> None:
    _, fact_id = manager.create_fact("Drinks tea", user_id="u")
    assert fact_id
    edit_body(manager, fact_id, "Drinks tea", "Drinks green tea")  # no reload
    manager.update_fact(fact_id, confidence=0.9, user_id="u")
    [stored] = manager.reload_memory(user_id="u")["facts"]
    assert (stored["content"], stored["confidence"]) == ("Drinks green tea", 0.9)


def test_clear_and_import_work_after_a_fact_file_is_removed_by_hand(
    manager: DeerMemMemoryManager,
) -> None:
    _, gone = manager.create_fact("Drinks tea", user_id="u")
    manager.create_fact("Lives in Porto", user_id="u")
    [path] = Path(manager.backend_config["storage_path"]).rglob(f"{gone}.md")
    path.unlink()
    manager.import_memory({"facts": [{"content": "Uses uv"}]}, user_id="u")
    assert [f["content"] for f in manager.get_memory(user_id="u")["facts"]] == ["Uses uv"]
    manager.create_fact("Likes jazz", user_id="u")
    next(Path(manager.backend_config["storage_path"]).rglob("fact_*.md")).unlink()
    assert manager.clear_memory(user_id="u")["facts"] == []


def test_search_finds_a_hand_edit_after_reload(manager: DeerMemMemoryManager) -> None:
    _, fact_id = manager.create_fact("Drinks tea", user_id="u")
    assert fact_id
    assert manager.search("tea", user_id="u")
    edit_body(manager, fact_id, "Drinks tea", "Drinks espresso")
    manager.reload_memory(user_id="u")
    assert manager.search("tea", user_id="u") == []
    assert [f["id"] for f in manager.search("espresso", user_id="u")] == [fact_id]


def test_an_agent_s_history_shows_neither_another_agent_s_facts_nor_takes_a_bad_limit(
    manager: DeerMemMemoryManager,
) -> None:
    manager.import_memory(
        {
            "user": {"workContext": {"summary": "Platform team"}},
            "facts": [{"content": "codename Falcon"}],
        },
        user_id="u",
    )
    [entry] = manager.get_history(user_id="u", agent_name="coder")  # the shared summaries
    assert entry["after"]["summaries"] == {"user": {"workContext": "Platform team"}}
    assert entry["before"]["facts"] == entry["after"]["facts"] == []
    [own] = manager.get_history(user_id="u")
    assert [f["content"] for f in own["after"]["facts"]] == ["codename Falcon"]
    for limit in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="limit: must be a positive integer"):
            manager.get_history(user_id="u", limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "line",
    [
        '{"change_id": "chg_x", "broken": true}',
        '["chg_x"]',
        '{"change_id": "c", "at": "", "actor": "", "reason": "", "revision": 2, '
        '"before": {"summaries": {}, "facts": [{"agent": "a"}]}, '
        '"after": {"summaries": {}, "facts": []}}',
    ],
)
def test_an_audit_line_of_the_wrong_shape_is_corruption(
    manager: DeerMemMemoryManager, line: str
) -> None:
    from deerflow.agents.memory.manager import MemoryCorruptionError

    manager.create_fact("Drinks tea", user_id="u")
    history = Path(manager.backend_config["storage_path"]) / "users" / "u" / "history.jsonl"
    with history.open("a") as handle:
        handle.write(line + "\n")
    with pytest.raises(MemoryCorruptionError, match=r"history\.jsonl:2: "):
        manager.get_history(user_id="u")


def test_revert_refuses_to_restore_a_fact_stored_again_since(
    manager: DeerMemMemoryManager,
) -> None:
    from deerflow.agents.memory.manager import DuplicateFactError

    _, fact_id = manager.create_fact("Drinks tea", user_id="u")
    assert fact_id
    manager.delete_fact(fact_id, user_id="u")
    deletion = manager.get_history(user_id="u", limit=1)[0]["change_id"]
    manager.create_fact("drinks  TEA", user_id="u")
    before = state(manager)
    with pytest.raises(DuplicateFactError):
        manager.revert_change(deletion, user_id="u")
    assert state(manager) == before


def test_revert_refuses_to_overfill_a_bucket(tmp_path: Path) -> None:
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path), "max_facts": 10})
    ids = [manager.create_fact(f"Uses tool {n}", user_id="u")[1] for n in range(10)]
    manager.delete_fact(ids[0] or "", user_id="u")
    deletion = manager.get_history(user_id="u", limit=1)[0]["change_id"]
    manager.create_fact("Uses tool 10", user_id="u")
    before = state(manager)
    with pytest.raises(ValueError, match="would hold 11 facts, over max_facts=10"):
        manager.revert_change(deletion, user_id="u")
    assert state(manager) == before
    manager.delete_fact(ids[1] or "", user_id="u")
    manager.revert_change(deletion, user_id="u")  # room again
    assert len(state(manager)[1]) == 10


def test_a_markdown_export_round_trips_unknown_keys_and_the_source(
    manager: DeerMemMemoryManager, tmp_path: Path
) -> None:
    from deerflow.agents.memory.backends.deermem.deermem.core.factfile import read_fact_file

    _, fact_id = manager.create_fact("Owns a cat named Miso", user_id="u")
    assert fact_id
    path = hand_edit(manager, fact_id, "customField:\n  a:\n  - 1\n  - 2\nlegacyId: x1")
    path.write_text(path.read_text().replace("type: manual", "type: unknown"))
    manager.reload_memory(user_id="u")
    before = read_fact_file(path)
    folder = tmp_path / "export"
    manager.export_markdown(folder, user_id="u")
    manager.clear_memory(user_id="u")
    manager.import_markdown(folder, user_id="u")
    users = Path(manager.backend_config["storage_path"]) / "users"
    [after_path] = users.rglob(f"{fact_id}.md")
    after = read_fact_file(after_path)
    assert after["customField"] == {"a": [1, 2]}
    assert after["legacyId"] == "x1"
    assert after["source"] == {"type": "unknown", "threadId": None}
    assert after == before


def test_a_secret_in_an_unknown_key_of_an_imported_fact_is_refused(
    manager: DeerMemMemoryManager,
) -> None:
    for fields, named in [
        ({"notes": [SECRET]}, r"notes\[0\]"),
        ({"password": "Tr0ub4dor&3"}, "password"),
        ({"creds": {"api_key": "Zx9QwErTyUiOp1234567890abcdEF"}}, r"creds\.api_key"),
        ({"sk-proj-A1b2C3d4E5f6G7h8I9j0K1l2": 1}, "sk-proj-"),
    ]:
        with pytest.raises(ValueError, match=rf"^facts\[0\]\.{named}.*: refused"):
            manager.import_memory({"facts": [fact(**fields)]}, user_id="u")
    assert state(manager) == (0, [])
    for odd in (object(), float("nan"), [[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]]):
        with pytest.raises(ValueError, match=r"^facts\[0\]\.odd: must be text, a number"):
            manager.import_memory({"facts": [fact(odd=odd)]}, user_id="u")


def test_the_audit_finds_a_secret_in_a_key_written_by_hand(manager: DeerMemMemoryManager) -> None:
    _, fact_id = manager.create_fact("Deploys on Fridays", user_id="u")
    assert fact_id
    hand_edit(manager, fact_id, "note: 'password: Hunter2xyz!'")
    [report] = manager.audit(user_id="u")
    assert [s["id"] for s in report["secrets"]["facts"]] == [fact_id]


def test_a_markdown_export_of_no_facts_imports_back_without_its_empty_folder(
    manager: DeerMemMemoryManager, tmp_path: Path
) -> None:
    manager.import_memory({"user": {"workContext": {"summary": "Platform team"}}}, user_id="u")
    folder = tmp_path / "export"
    assert manager.export_markdown(folder, user_id="u") == 0
    (folder / "facts").rmdir()  # what a zip of it gives back
    manager.create_fact("Drinks tea", user_id="u")
    document = manager.import_markdown(folder, user_id="u")
    assert document["facts"] == []
    assert document["user"]["workContext"]["summary"] == "Platform team"


def test_update_clear_and_import_keep_or_remove_what_was_edited_or_added_by_hand(
    manager: DeerMemMemoryManager, tmp_path: Path
) -> None:
    _, fact_id = manager.create_fact("Drinks tea", user_id="u")
    assert fact_id
    path = hand_edit(manager, fact_id, "topics:\n- tea\npinned: true")
    manager.get_memory(user_id="u")  # cached as edited
    path.write_text(path.read_text().replace("pinned: true", "pinned: false"))  # not reloaded
    manager.update_fact(fact_id, confidence=0.9, user_id="u")
    [stored] = reopened(manager).get_memory(user_id="u")["facts"]
    assert (stored["topics"], stored["confidence"]) == (["tea"], 0.9)
    assert "pinned: false" in path.read_text()
    template = path.read_text()
    added = "fact_00000000000000000000000000000001"
    for doing in ("clear", "import"):
        manager.get_memory(user_id="u")
        target = path.parent.parent / shard_of(added) / f"{added}.md"
        target.parent.mkdir(exist_ok=True)
        target.write_text(template.replace(fact_id, added).replace("Drinks tea", "Added"))
        if doing == "clear":
            manager.clear_memory(user_id="u")
        else:
            manager.import_memory({"facts": [{"content": "Likes jazz"}]}, user_id="u")
        contents = [f["content"] for f in reopened(manager).get_memory(user_id="u")["facts"]]
        assert contents == ([] if doing == "clear" else ["Likes jazz"])


@pytest.mark.parametrize("text", ["Platform\x00team", "\x1b[2J", "a\ud800"])
def test_an_imported_summary_follows_the_content_s_rules(
    manager: DeerMemMemoryManager, text: str
) -> None:
    document = {"user": {"workContext": {"summary": text}}}
    with pytest.raises(ValueError, match=r"^user\.workContext\.summary: (holds|must)"):
        manager.import_memory(document, user_id="u")
    assert state(manager) == (0, [])
