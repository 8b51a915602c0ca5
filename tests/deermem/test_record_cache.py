"""Parsed fact files kept on disk: a new process's first read takes them for unchanged files,
and reads every file that changed, however it changed."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem.deermem.core import record_cache, storage
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet
from deerflow.agents.memory.backends.deermem.deermem.core.paths import UserPaths
from deerflow.agents.memory.backends.deermem.deermem.core.record_cache import RecordCache
from deerflow.agents.memory.manager import MemoryCorruptionError
from tests.deermem.storage_helpers import create, fact, storage_at

RACY = 0.05  # seconds: far above a filesystem clock's tick, far below a test's patience


@pytest.fixture(autouse=True)
def short_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_cache, "RACY_SECONDS", RACY)


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the fact files the storage parses, in order."""
    calls: list[str] = []
    real = storage.parse_fact

    def counting(data: bytes, path: Any, **scope: str) -> dict[str, Any]:
        calls.append(os.path.basename(path))
        return real(data, path, **scope)

    monkeypatch.setattr(storage, "parse_fact", counting)
    return calls


def settle() -> None:
    """Wait until every file written so far is older than the racy window."""
    time.sleep(RACY * 2)


def kept_by_a_first_process(root: Path, user: str, count: int) -> list[dict[str, Any]]:
    """`count` facts committed, then read by a process whose read keeps them; their records."""
    records = [fact(f"fact number {n}", confidence=0.5 + n / 1000) for n in range(count)]
    writer = storage_at(root)
    create(writer, user, *records)
    writer.close()
    settle()
    reader = storage_at(root)
    reader.load(user, None)
    reader.close()
    return records


def fact_path(root: Path, user: str, fact_id: str) -> Path:
    return UserPaths(root, user).fact_file("__default__", fact_id)


def test_a_new_process_reads_unchanged_files_without_parsing_them(
    tmp_path: Path, parsed: list[str]
) -> None:
    kept_by_a_first_process(tmp_path, "ann", 20)
    parsed.clear()
    fresh = storage_at(tmp_path).load("ann", None).facts
    assert parsed == []
    assert fresh == storage_at(tmp_path).reload("ann", None).facts
    assert len(parsed) == 20, "reload reads every file, whatever is kept"


def _in_place_same_size(path: Path) -> None:
    """Rewrite the body in place, same length, and put the modification time back."""
    before = path.stat()
    text = path.read_text()
    with open(path, "r+") as handle:
        handle.write(text.replace("fact number 3", "fact NUMBER 3"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _renamed_over(path: Path) -> None:
    temp = path.with_name("edited.tmp")
    temp.write_text(path.read_text().replace("fact number 3", "fact NUMBER 3"))
    os.replace(temp, path)


@pytest.mark.parametrize("edit", [_in_place_same_size, _renamed_over])
def test_a_file_edited_by_hand_is_read_again(
    tmp_path: Path, parsed: list[str], edit: Callable[[Path], None]
) -> None:
    records = kept_by_a_first_process(tmp_path, "bob", 6)
    edit(fact_path(tmp_path, "bob", records[3]["id"]))
    parsed.clear()
    facts = storage_at(tmp_path).load("bob", None).facts
    assert facts[records[3]["id"]]["content"] == "fact NUMBER 3"
    assert parsed == [f"{records[3]['id']}.md"]


def test_files_removed_or_added_by_hand_are_seen(tmp_path: Path, parsed: list[str]) -> None:
    records = kept_by_a_first_process(tmp_path, "cy", 5)
    gone = fact_path(tmp_path, "cy", records[0]["id"])
    template = fact_path(tmp_path, "cy", records[1]["id"]).read_text()
    gone.unlink()
    newcomer = fact("written by hand")
    path = fact_path(tmp_path, "cy", newcomer["id"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        template.replace(records[1]["id"], newcomer["id"]).replace("fact number 1", "by hand")
    )
    parsed.clear()
    facts = storage_at(tmp_path).load("cy", None).facts
    assert records[0]["id"] not in facts
    assert facts[newcomer["id"]]["content"] == "by hand"
    assert parsed == [path.name]


def test_a_file_corrupted_after_it_was_kept_raises_and_is_left_alone(tmp_path: Path) -> None:
    records = kept_by_a_first_process(tmp_path, "dee", 3)
    path = fact_path(tmp_path, "dee", records[1]["id"])
    broken = path.read_text().replace("confidence: ", "confidence: 9")
    path.write_text(broken)
    with pytest.raises(MemoryCorruptionError, match=r"outside 0\.\.1"):
        storage_at(tmp_path).load("dee", None)
    assert path.read_text() == broken


def test_files_changed_within_the_racy_window_are_not_kept(
    tmp_path: Path, parsed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_cache, "RACY_SECONDS", 60.0)
    create(storage_at(tmp_path), "eve", fact("just written"))
    storage_at(tmp_path).load("eve", None)
    parsed.clear()
    storage_at(tmp_path).load("eve", None)
    assert len(parsed) == 1, "a second change in the same clock tick would go unseen"


def test_records_json_cannot_give_back_are_parsed_every_time(
    tmp_path: Path, parsed: list[str]
) -> None:
    records = kept_by_a_first_process(tmp_path, "fay", 2)
    path = fact_path(tmp_path, "fay", records[0]["id"])
    path.write_text(path.read_text().replace("---\n", "---\nextra:\n  1: one\n", 1).lstrip())
    settle()
    for _ in range(2):
        parsed.clear()
        facts = storage_at(tmp_path).load("fay", None).facts
        assert facts[records[0]["id"]]["extra"] == {1: "one"}  # an int key, as YAML reads it
        assert parsed == [path.name]


def test_scopes_never_share_kept_records(tmp_path: Path) -> None:
    shared_id = fact("x")["id"]
    root = storage_at(tmp_path)
    for user, agent in [("gil", None), ("gil", "coder"), ("hal", None)]:
        bucket = "__default__" if agent is None else agent
        record = fact(f"{user} in {bucket}", bucket=bucket, id=shared_id)
        root.save(
            user,
            ChangeSet(actor="test", reason="create", upserts=[record], expected_revision=None),
        )
    settle()
    for user, agent in [("gil", None), ("gil", "coder"), ("hal", None)]:
        storage_at(tmp_path).load(user, agent)  # kept, each in its own row
    for user, agent in [("gil", None), ("gil", "coder"), ("hal", None)]:
        bucket = "__default__" if agent is None else agent
        facts = storage_at(tmp_path).load(user, agent).facts
        assert [f["content"] for f in facts.values()] == [f"{user} in {bucket}"]


def test_an_unreadable_cache_file_is_recreated(
    tmp_path: Path, parsed: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    kept_by_a_first_process(tmp_path, "ian", 4)
    (tmp_path / ".retrieval" / "records.sqlite3").write_bytes(b"not a database" * 500)
    parsed.clear()
    with caplog.at_level(logging.WARNING):
        facts = storage_at(tmp_path).load("ian", None).facts
    assert len(facts) == 4
    assert len(parsed) == 4
    assert "fact record cache" in caplog.text
    assert "recreating it" in caplog.text
    parsed.clear()
    storage_at(tmp_path).load("ian", None)
    assert parsed == [], "kept again in the new file"


def test_an_unusable_cache_is_turned_off_and_reads_stay_right(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / ".retrieval" / "records.sqlite3").mkdir(parents=True)  # a folder, not a file
    with caplog.at_level(logging.WARNING):
        first = storage_at(tmp_path)
        create(first, "jo", fact("one"), fact("two"))
        settle()
        assert sorted(f["content"] for f in first.load("jo", None).facts.values()) == [
            "one",
            "two",
        ]
        first.reload("jo", None)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "parsing fact files" in warnings[0].getMessage()


def test_a_row_that_is_not_what_put_writes_is_ignored(tmp_path: Path, parsed: list[str]) -> None:
    kept_by_a_first_process(tmp_path, "kim", 3)
    path = tmp_path / ".retrieval" / "records.sqlite3"
    cache = RecordCache(path)
    cache._db.run(lambda conn: conn.execute("UPDATE buckets SET records = '[1, 2]'"))
    cache.close()
    parsed.clear()
    assert len(storage_at(tmp_path).load("kim", None).facts) == 3
    assert len(parsed) == 3


def test_readers_during_commits_see_what_was_committed(tmp_path: Path) -> None:
    writer = storage_at(tmp_path)
    committed: dict[int, list[str]] = {0: []}
    seen: list[tuple[int, list[str]]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            alive: list[dict[str, Any]] = []
            for n in range(60):
                record = fact(f"w{n}")
                deletes = [("__default__", alive.pop(0)["id"])] if n % 3 == 2 else []
                alive.append(record)
                result = writer.save(
                    "lee",
                    ChangeSet(
                        actor="test",
                        reason="write",
                        upserts=[record],
                        deletes=deletes,
                        expected_revision=None,
                    ),
                )
                committed[result.revision] = sorted(r["content"] for r in alive)
                if n % 10 == 0:
                    settle()  # let earlier files age into what a read keeps
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    def read() -> None:
        try:
            while not done.is_set():
                snapshot = storage_at(tmp_path).load("lee", None)  # a new process, each time
                seen.append(
                    (snapshot.revision, sorted(f["content"] for f in snapshot.facts.values()))
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write), *(threading.Thread(target=read) for _ in range(3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(seen) > 10
    for revision, contents in seen:
        assert contents == committed[revision], f"revision {revision}"
    final = storage_at(tmp_path).load("lee", None)
    assert final.facts == storage_at(tmp_path).reload("lee", None).facts


def test_a_kept_record_under_another_files_name_is_not_taken(
    tmp_path: Path, parsed: list[str]
) -> None:
    records = kept_by_a_first_process(tmp_path, "max", 2)
    cache = RecordCache(tmp_path / ".retrieval" / "records.sqlite3")
    user_key = UserPaths(tmp_path, "max").user_key
    kept = cache.get(user_key, "__default__")
    (first, one), (second, two) = kept.items()
    cache.put(
        user_key,
        "__default__",
        {first: one._replace(record=two.record), second: two._replace(record=one.record)},
    )
    cache.close()
    parsed.clear()
    facts = storage_at(tmp_path).load("max", None).facts
    assert {f["id"]: f["content"] for f in facts.values()} == {
        r["id"]: r["content"] for r in records
    }
    assert len(parsed) == 2


def test_a_few_changed_files_are_parsed_without_rewriting_what_is_kept(
    tmp_path: Path, parsed: list[str]
) -> None:
    records = kept_by_a_first_process(tmp_path, "ned", 64)
    paths = [fact_path(tmp_path, "ned", r["id"]) for r in records]

    def touch(path: Path) -> None:
        path.write_text(path.read_text().replace("fact number", "Fact number"))

    def first_read() -> list[str]:
        parsed.clear()
        storage_at(tmp_path).load("ned", None)
        return sorted(parsed)

    touch(paths[0])  # as another process's commit would: 1 file of 64
    settle()
    assert first_read() == [paths[0].name]
    assert first_read() == [paths[0].name], "the row was not rewritten for one file"
    for path in paths[1:4]:  # 4 of 64: a sixteenth
        touch(path)
    settle()
    assert first_read() == sorted(path.name for path in paths[:4])
    assert first_read() == [], "rewritten once a sixteenth of the files were parsed"
