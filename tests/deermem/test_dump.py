"""Moving a user of the files engine out (`dump_file_user`) and back in (`restore_file_user`):
nothing lost, nothing merged, nothing half-written."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
import threading
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem.deermem.core.dump import (
    RESTORE_DIR,
    dump_file_user,
    restore_file_user,
)
from deerflow.agents.memory.manager import MemoryConflictError
from tests.deermem.dump_helpers import fill_user, manager_at, stored
from tests.deermem.storage_helpers import create, fact, spawn, storage_at

USER = "alice@example.com"  # a hashed user directory


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("source")
    fill_user(root, USER)
    return root


def test_a_restored_user_reads_back_as_it_was_dumped(source: Path, tmp_path: Path) -> None:
    before = stored(source, USER)
    assert {bucket for bucket, _ in before["facts"]} == {"__default__", "coder", "writer"}
    assert any(e["actor"] == "revert" for e in before["history"])
    assert before["summaries"]["user"]["workContext"]["summary"] == "Backend engineer at Acme"
    unusual = next(r for r in before["facts"].values() if "x_origin" in r)
    assert unusual["reviewed_by"] == {"name": "ops", "on": "2026-11-30"}

    restore_file_user(storage_at(tmp_path), dump_file_user(storage_at(source), USER))

    assert stored(tmp_path, USER) == before
    assert not any((tmp_path / RESTORE_DIR).iterdir())


def test_a_restored_user_is_served_and_its_history_reverts(source: Path, tmp_path: Path) -> None:
    restore_file_user(storage_at(tmp_path), dump_file_user(storage_at(source), USER))
    manager = manager_at(tmp_path)
    try:
        coder = manager.get_memory(user_id=USER, agent_name="Coder")
        assert [f["content"] for f in coder["facts"]] == ["Uses Python 3.12"]
        assert manager.search("pnpm", user_id=USER)[0]["content"] == "Prefers pnpm over npm"
        summary = next(
            e for e in manager.get_history(user_id=USER) if e["reason"].startswith("update_summary")
        )
        manager.revert_change(summary["change_id"], user_id=USER)
        assert manager.get_memory(user_id=USER)["user"]["workContext"]["summary"] == ""
    finally:
        manager.close()


def test_restoring_over_a_stored_user_is_refused_and_changes_nothing(
    source: Path, tmp_path: Path
) -> None:
    dump = dump_file_user(storage_at(source), USER)
    target = storage_at(tmp_path)
    create(target, USER, fact("Already here"))
    before = stored(tmp_path, USER)
    with pytest.raises(MemoryConflictError, match="already has a memory"):
        restore_file_user(target, dump)
    assert stored(tmp_path, USER) == before
    assert not (tmp_path / RESTORE_DIR).exists()  # refused before anything was written


def test_a_user_directory_holding_only_its_lock_file_is_restored_into(
    source: Path, tmp_path: Path
) -> None:
    dump = dump_file_user(storage_at(source), USER)
    target = storage_at(tmp_path)
    with target.user_lock(USER).hold():  # what a write that changed nothing leaves
        pass
    restore_file_user(target, dump)
    assert stored(tmp_path, USER) == stored(source, USER)
    create(target, USER, fact("Written after the restore"))  # the lock file is where it was
    assert stored(tmp_path, USER)["revision"] == dump.revision + 1


def test_two_restores_of_one_user_at_once_write_it_once(source: Path, tmp_path: Path) -> None:
    dump = dump_file_user(storage_at(source), USER)
    outcomes: list[str] = []

    def restore() -> None:
        try:
            restore_file_user(storage_at(tmp_path), dump)
            outcomes.append("restored")
        except MemoryConflictError:
            outcomes.append("refused")

    threads = [threading.Thread(target=restore) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["refused", "restored"]
    assert stored(tmp_path, USER) == stored(source, USER)


def test_a_dump_the_files_cannot_hold_as_it_is_is_refused(source: Path, tmp_path: Path) -> None:
    dump = dump_file_user(storage_at(source), USER)
    escaping = dict(dump.facts[0], agent_name="../../elsewhere")
    misfiled = dict(dump.facts[0], user_id="mallory")
    for facts in ([escaping], [misfiled]):
        with pytest.raises(ValueError, match="dump of user"):
            restore_file_user(storage_at(tmp_path), dataclasses.replace(dump, facts=facts))
    assert stored(tmp_path, USER)["user_ids"] == []
    assert not (tmp_path / "users").exists() or not any((tmp_path / "users").iterdir())


def test_a_restore_killed_at_any_step_leaves_nothing_or_the_whole_user(
    source: Path, tmp_path: Path
) -> None:
    child = spawn("restore_child", str(source), str(tmp_path / "probe"), USER, "0")
    out, _ = child.communicate()
    steps = int(out)
    wanted = stored(source, USER)
    # Every rename (the last steps) and a spread of the file writes before them.
    points = sorted({*range(1, steps, max(1, steps // 8)), steps - 2, steps - 1, steps})
    outcomes = set()
    for point in points:
        destination = tmp_path / f"killed-at-{point}"
        killed = spawn("restore_child", str(source), str(destination), USER, str(point))
        killed.communicate()
        assert killed.returncode == -signal.SIGKILL, f"not killed at step {point} of {steps}"
        now = stored(destination, USER)
        if now["user_ids"]:
            assert now == wanted, f"killed at step {point} of {steps}"
            outcomes.add("whole")
            continue
        assert (now["revision"], now["facts"], now["history"]) == (0, {}, [])
        outcomes.add("nothing")
        restore_file_user(storage_at(destination), dump_file_user(storage_at(source), USER))
        assert stored(destination, USER) == wanted, f"restore after a kill at step {point}"
        assert not any((destination / RESTORE_DIR).iterdir()), "the killed restore's folder"
    assert outcomes == {"nothing", "whole"}


def test_a_restore_removes_what_killed_restores_left_and_nothing_under_way(
    source: Path, tmp_path: Path
) -> None:
    restores = tmp_path / RESTORE_DIR
    for name in ("killed", "running"):
        (restores / name / "users").mkdir(parents=True)
        (restores / f"{name}.lock").touch()
    running = os.open(restores / "running.lock", os.O_RDWR)
    try:
        fcntl.flock(running, fcntl.LOCK_EX)  # as the restore that runs holds it
        restore_file_user(storage_at(tmp_path), dump_file_user(storage_at(source), USER))
        assert sorted(p.name for p in restores.iterdir()) == ["running", "running.lock"]
    finally:
        os.close(running)
