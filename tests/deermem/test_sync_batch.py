"""SyncBatch: a commit's file changes, synced together; nothing left open or half-named.
And `read_file`, the readers' side."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem.deermem.core import atomic
from deerflow.agents.memory.backends.deermem.deermem.core.atomic import MAX_PENDING, SyncBatch


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True)
def no_collection_while_counting() -> Iterator[None]:
    """These tests count the process's open files: a garbage collection in the middle would
    close files of earlier tests' objects (a manager's SQLite connections) and skew the count."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_changes_land_where_and_when_the_caller_says(tmp_path: Path) -> None:
    (tmp_path / "old.md").write_bytes(b"old")
    (tmp_path / "gone.md").write_bytes(b"gone")
    with SyncBatch() as batch:
        batch.create(tmp_path / "new.md", b"new")
        batch.stage(tmp_path / "old.md", b"replaced")
        batch.unlink(tmp_path / "gone.md")
        assert (tmp_path / "gone.md").exists(), "an unlink runs with the batch's syncs"
        batch.sync()
        assert not (tmp_path / "gone.md").exists()
        assert (tmp_path / "old.md").read_bytes() == b"old", "staged bytes wait for publish"
        batch.publish(tmp_path / "old.md")
        batch.append(tmp_path / "log.jsonl", b'{"n": 1}')
        batch.sync()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl", "new.md", "old.md"]
    assert (tmp_path / "new.md").read_bytes() == b"new"
    assert (tmp_path / "old.md").read_bytes() == b"replaced"
    assert (tmp_path / "log.jsonl").read_bytes() == b'{"n": 1}\n'


def test_removing_a_missing_file_fails_at_sync(tmp_path: Path) -> None:
    def commit() -> None:
        with SyncBatch() as batch:
            batch.stage(tmp_path / "memory.json", b"{}")
            batch.unlink(tmp_path / "never-there.md")
            batch.sync()

    with pytest.raises(FileNotFoundError):
        commit()
    assert list(tmp_path.iterdir()) == [], "the staged temp file is removed"


@pytest.mark.parametrize("size", [0, 1, atomic._READ_CHUNK, 3 * atomic._READ_CHUNK + 5])
def test_read_file_returns_every_byte(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    before = open_files()
    assert atomic.read_file(tmp_path / "f") == data
    assert atomic.read_file(str(tmp_path / "f")) == data
    assert open_files() == before
    with pytest.raises(FileNotFoundError):
        atomic.read_file(tmp_path / "missing")
    assert open_files() == before


def test_creating_a_file_that_exists_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_bytes(b"mine")
    with pytest.raises(FileExistsError), SyncBatch() as batch:
        batch.create(tmp_path / "a.md", b"theirs")
    assert (tmp_path / "a.md").read_bytes() == b"mine"


def test_an_error_closes_every_file_and_removes_unpublished_temps(tmp_path: Path) -> None:
    before = open_files()

    def commit() -> None:
        with SyncBatch() as batch:
            batch.create(tmp_path / "new.md", b"new")
            batch.stage(tmp_path / "memory.json", b"{}")
            assert open_files() == before + 2
            raise RuntimeError("the commit failed")

    with pytest.raises(RuntimeError, match="the commit failed"):
        commit()
    assert open_files() == before
    assert [p.name for p in tmp_path.iterdir()] == ["new.md"], "the journal removes this one"


def test_a_failing_sync_is_raised_once_the_others_are_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = atomic.fsync_dir
    done: list[str] = []

    def slow_then_failing(path: Path) -> None:
        if path.name == "broken":
            raise OSError("simulated I/O error")
        time.sleep(0.05)
        real(path)
        done.append(path.name)

    monkeypatch.setattr(atomic, "fsync_dir", slow_then_failing)
    for name in ("a", "b", "broken"):
        (tmp_path / name).mkdir()
    before = open_files()

    def commit() -> None:
        with SyncBatch() as batch:
            batch.directory(tmp_path / "broken")
            batch.create(tmp_path / "a" / "fact.md", b"x")
            batch.directory(tmp_path / "b")
            batch.sync()

    with pytest.raises(OSError, match="simulated I/O error"):
        commit()
    assert sorted(done) == ["a", "b"]
    assert open_files() == before


def test_a_large_batch_never_holds_more_than_its_limit_of_open_files(tmp_path: Path) -> None:
    before = open_files()
    most = 0
    with SyncBatch() as batch:
        for n in range(3 * MAX_PENDING):
            batch.create(tmp_path / f"fact_{n}.md", b"x")
            most = max(most, open_files() - before)
        batch.sync()
    assert most <= MAX_PENDING
    assert open_files() == before
    assert len(list(tmp_path.iterdir())) == 3 * MAX_PENDING


def test_a_forked_child_syncs_with_threads_of_its_own(tmp_path: Path) -> None:
    def commit(name: str) -> None:
        with SyncBatch() as batch:
            batch.create(tmp_path / f"{name}-1.md", b"x")
            batch.create(tmp_path / f"{name}-2.md", b"y")
            batch.sync()

    commit("parent")  # the parent's sync threads exist now; a forked child has none of them
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        try:
            commit("child")
        finally:
            os._exit(0 if (tmp_path / "child-2.md").exists() else 1)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    pytest.fail("the forked child hung waiting for its parent's sync threads")


def test_remove_stale_temps_removes_only_the_temp_files_of_that_name(tmp_path: Path) -> None:
    target = tmp_path / "memory.json"
    target.write_bytes(b"{}")
    stale = [atomic._temp_beside(target) for _ in range(2)]  # what a killed writer left
    kept = [
        tmp_path / ".memory.jsonx.12.abcdef12.tmp",  # another file's (memory.jsonx) temp
        tmp_path / ".memory.json.bak.12.abcdef12.tmp",
        tmp_path / ".memory.json.12.abcdef12.tmp.old",
        tmp_path / ".other.json.12.abcdef12.tmp",
    ]
    for path in (*stale, *kept):
        path.write_bytes(b"x")
    atomic.remove_stale_temps(target)
    assert sorted(tmp_path.iterdir()) == sorted([target, *kept])
    atomic.remove_stale_temps(tmp_path / "missing" / "memory.json")  # no directory: nothing to do
