"""FileMemoryStorage: layout, caching, corruption, conflicts, crash recovery, concurrency."""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.core import atomic
from deerflow.agents.memory.backends.deermem.deermem.core.atomic import SyncBatch
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet
from deerflow.agents.memory.backends.deermem.deermem.core.journal import Journal, JournalEntry
from deerflow.agents.memory.backends.deermem.deermem.core.paths import UserPaths, safe_user_id
from deerflow.agents.memory.manager import (
    MemoryConflictError,
    MemoryCorruptionError,
)
from tests.deermem.storage_helpers import LONG, LONG_TIMEOUT, create, fact, spawn, storage_at

REPO = Path(__file__).resolve().parents[2]


def test_layout_keeps_summaries_and_facts_apart(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    record = fact("Prefers uv over pip", category="preference", confidence=0.9)
    assert create(storage, "alice@example.com", record) == 1
    paths = UserPaths(tmp_path, safe_user_id("alice@example.com"))
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["revision"] == 1
    assert set(manifest) == {"version", "revision", "lastUpdated", "user", "history", "userId"}
    assert "facts" not in manifest
    files = list((paths.agents / "__default__" / "facts").glob("*/*.md"))
    assert [f.stem for f in files] == [record["id"]]
    assert len(files[0].parent.name) == 2
    text = files[0].read_text()
    assert f"id: {record['id']}\n" in text
    assert "\n# Prefers uv over pip\n\nPrefers uv over pip\n" in text
    history = paths.history.read_text().splitlines()
    assert len(history) == 1
    assert Journal.pending(paths.journal) is None


def test_out_of_band_edit_shows_after_reload(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    record = fact("Uses vim")
    create(storage, "bob", record)
    path = UserPaths(tmp_path, "bob").fact_file("__default__", record["id"])
    path.write_text(path.read_text().replace("Uses vim\n", "Uses neovim\n"))
    assert storage.load("bob", None).facts[record["id"]]["content"] == "Uses vim", "cached"
    assert storage.reload("bob", None).facts[record["id"]]["content"] == "Uses neovim"


def test_memory_json_edited_out_of_band_is_parsed_again(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    create(storage, "bob", fact("Uses vim"))
    assert storage.load("bob", None).summaries["user"]["workContext"]["summary"] == ""
    manifest = UserPaths(tmp_path, "bob").manifest
    document = json.loads(manifest.read_text())
    document["user"]["workContext"]["summary"] = "Edits by hand"
    manifest.write_text(json.dumps(document, indent=2))
    assert storage.load("bob", None).summaries["user"]["workContext"]["summary"] == "Edits by hand"
    create(storage, "bob", fact("Uses tmux"))  # a commit builds on the edited document
    assert json.loads(manifest.read_text())["user"]["workContext"]["summary"] == "Edits by hand"
    assert storage.load("bob", None).revision == 2


def test_a_summary_commit_leaves_earlier_snapshots_as_they_were(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    create(storage, "bob", fact("Uses vim"))
    before = storage.load("bob", None)
    storage.save("bob", ChangeSet(actor="t", reason="r", summaries={"user": {"topOfMind": "x"}}))
    assert before.summaries["user"]["topOfMind"]["summary"] == ""
    after = storage.load("bob", None)
    assert after.summaries["user"]["topOfMind"]["summary"] == "x"
    assert after.summaries["history"] == before.summaries["history"]
    assert storage.reload("bob", None).summaries == after.summaries


def test_a_second_process_sees_commits_without_reload(tmp_path: Path) -> None:
    first, second = storage_at(tmp_path), storage_at(tmp_path)
    create(first, "u", fact("one"))
    assert len(second.load("u", None).facts) == 1
    create(first, "u", fact("two"))
    assert len(second.load("u", None).facts) == 2, "memory.json changed, so the cache is stale"


@pytest.mark.parametrize(
    ("mangle", "problem"),
    [
        (lambda text: text.replace("---\n", "---\n: : [\n", 1), "unreadable front matter"),
        (lambda text: text.replace("id: fact_", "id: fact_0", 1), "differs from the file name"),
        (lambda text: text.replace("user_id: carol", "user_id: mallory"), "scope"),
        (lambda text: text.replace("confidence: 0.5", "confidence: 7"), "outside 0..1"),
        (lambda text: text.replace("category: context", "category: gossip"), "unknown category"),
        (lambda text: "Likes tea\n", "no front matter"),
        (lambda text: "".join(text.splitlines(keepends=True)[:3]), "no front matter"),  # torn
    ],
)
def test_corrupt_fact_file_is_reported_and_left_alone(tmp_path: Path, mangle, problem: str) -> None:  # type: ignore[no-untyped-def]
    storage = storage_at(tmp_path)
    record = fact("Likes tea")
    create(storage, "carol", record)
    path = UserPaths(tmp_path, "carol").fact_file("__default__", record["id"])
    broken = mangle(path.read_text())
    path.write_text(broken)
    with pytest.raises(MemoryCorruptionError, match=problem):
        storage.reload("carol", None)
    assert path.read_text() == broken
    with pytest.raises(MemoryCorruptionError):
        create(storage_at(tmp_path), "carol", fact("another"))  # a write path does not skip it


def test_corrupt_manifest_is_never_reset(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    create(storage, "dave", fact("x"))
    manifest = UserPaths(tmp_path, "dave").manifest
    manifest.write_text("{not json")
    with pytest.raises(MemoryCorruptionError, match=r"memory\.json"):
        storage.load("dave", None)
    with pytest.raises(MemoryCorruptionError):
        create(storage, "dave", fact("y"))
    assert manifest.read_text() == "{not json"


@pytest.mark.parametrize(
    "user_id", ["../x", "a/b", "..", "/etc/passwd", "x" * 1000, "émoji 🦌", "a\\b", " spaced "]
)
def test_odd_user_ids_stay_inside_the_root(tmp_path: Path, user_id: str) -> None:
    root = tmp_path / "root"
    storage = storage_at(root)
    create(storage, user_id, fact("private"))
    users = list((root / "users").iterdir())
    assert len(users) == 1
    assert users[0].parent == root / "users"
    assert len(users[0].name) < 100
    assert storage.load(user_id, None).user_id == user_id
    assert {str(p.resolve()).startswith(str(root.resolve())) for p in root.rglob("*")} == {True}
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("user_id", ["", "nul\x00byte", "x" * 10_000])
def test_unusable_user_ids_are_refused(tmp_path: Path, user_id: str) -> None:
    with pytest.raises(ValueError, match="user_id"):
        storage_at(tmp_path).load(user_id, None)


def test_hashed_ids_never_collide_with_plain_ids(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    hashed = safe_user_id("alice@example.com")
    create(storage, "alice@example.com", fact("alice's"))
    with pytest.raises(ValueError, match="user_id"):
        safe_user_id("")
    assert "." in hashed
    assert storage.load(hashed.replace(".", "-"), None).facts == {}


@pytest.mark.parametrize("agent", ["../up", "a/b", "has space", "", "__default__", "_x", "a.b"])
def test_bad_agent_names_are_refused(tmp_path: Path, agent: str) -> None:
    with pytest.raises(ValueError, match="agent_name"):
        storage_at(tmp_path).load("u", agent)


def test_every_custom_agent_name_is_a_bucket(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    for agent in ("my_agent", "My_Agent-2", "a_", "x" * 64):
        assert storage.load("u", agent).facts == {}


def test_agent_names_are_case_insensitive_buckets(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    create(storage, "u", fact("coder fact", bucket="coder"))
    assert len(storage.load("u", "Coder").facts) == 1
    assert storage.load("u", None).facts == {}
    assert storage.load("u", None).buckets == ("coder",)


def test_lock_timeout_is_a_conflict(tmp_path: Path) -> None:
    storage = storage_at(tmp_path, file_lock_timeout_seconds=0.2)
    create(storage, "hal", fact("x"))
    lock_file = str(UserPaths(tmp_path, "hal").lock)
    holder = (
        "import fcntl, os, time\n"
        f"fcntl.flock(os.open({lock_file!r}, os.O_RDWR), fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(30)\n"
    )
    other = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None
        assert other.stdout.readline().strip() == "locked"
        with pytest.raises(MemoryConflictError, match="could not lock"):
            create(storage, "hal", fact("y"))
    finally:
        other.kill()
        other.wait()
    assert create(storage, "hal", fact("y")) == 2, "the lock is free again once its holder died"


# -- crash recovery ---------------------------------------------------------------------------


def _memory_files(paths: UserPaths) -> dict[Path, bytes]:
    """Every file's bytes but the lock's and the journal's (which holds its last record)."""
    skipped = (paths.lock, paths.journal)
    return {p: p.read_bytes() for p in paths.dir.rglob("*") if p.is_file() and p not in skipped}


def _fail_on(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, when: str) -> None:
    """Make `owner.name` (a function or method taking a path) crash for paths containing `when`."""
    real = getattr(owner, name)

    def failing(*args: object, **kwargs: object) -> None:
        if any(when in str(arg) for arg in args if isinstance(arg, Path)):
            raise OSError("simulated crash")
        real(*args, **kwargs)

    monkeypatch.setattr(owner, name, failing)


def test_crash_before_the_commit_point_rolls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = storage_at(tmp_path)
    kept = fact("kept")
    create(storage, "ivy", kept)
    paths = UserPaths(tmp_path, "ivy")
    before = _memory_files(paths)
    _fail_on(monkeypatch, SyncBatch, "overwrite", "memory.json")
    change = ChangeSet(
        actor="t", reason="r", upserts=[fact("new")], deletes=[("__default__", kept["id"])]
    )
    with pytest.raises(OSError, match="simulated"):
        storage.save("ivy", change)
    assert Journal.pending(paths.journal) is not None
    assert len(paths.history.read_bytes().splitlines()) == 2, "its audit line was written"
    monkeypatch.undo()
    snapshot = storage_at(tmp_path).load("ivy", None)
    assert [f["content"] for f in snapshot.facts.values()] == ["kept"]
    assert _memory_files(paths) == before
    assert Journal.pending(paths.journal) is None


def _tear(
    monkeypatch: pytest.MonkeyPatch, method: str, share: float = 0.5, name: str | None = None
) -> None:
    """Make `SyncBatch.<method>` (`create` or `overwrite`) write only `share` of its bytes
    and crash, for the file `name` (for any file when None)."""
    real = getattr(SyncBatch, method)

    def torn(batch: SyncBatch, path: Path, data: bytes) -> None:
        if name is not None and path.name != name:
            real(batch, path, data)
            return
        with open(path, "r+b" if path.exists() else "wb") as handle:
            handle.write(data[: int(len(data) * share)])
        raise OSError("simulated crash")

    monkeypatch.setattr(SyncBatch, method, torn)


@pytest.mark.parametrize("share", [0.1, 0.5, 0.99])
def test_a_torn_memory_json_is_rolled_back_to_its_bytes_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share: float
) -> None:
    """memory.json is written in place: a crash may leave it torn, and nothing else may then
    read it as it is (not even to learn its revision) before the journal has restored it."""
    storage = storage_at(tmp_path)
    kept = fact("kept")
    create(storage, "ivo", kept)
    paths = UserPaths(tmp_path, "ivo")
    before = _memory_files(paths)
    _tear(monkeypatch, "overwrite", share)
    change = ChangeSet(
        actor="t",
        reason="r",
        upserts=[fact("new")],
        deletes=[("__default__", kept["id"])],
        summaries={"user": {"workContext": "a longer summary than memory.json had before"}},
    )
    with pytest.raises(OSError, match="simulated"):
        storage.save("ivo", change)
    monkeypatch.undo()
    assert paths.manifest.read_bytes() != before[paths.manifest], "torn on disk"
    snapshot = storage_at(tmp_path).load("ivo", None)
    assert [f["content"] for f in snapshot.facts.values()] == ["kept"]
    assert snapshot.summaries["user"]["workContext"]["summary"] == ""
    assert _memory_files(paths) == before
    assert Journal.pending(paths.journal) is None


def test_a_torn_first_memory_json_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's first commit creates memory.json in place: a torn one goes, as if never made."""
    storage = storage_at(tmp_path)
    _tear(monkeypatch, "create", name="memory.json")
    with pytest.raises(OSError, match="simulated"):
        create(storage, "ike", fact("first"))
    monkeypatch.undo()
    paths = UserPaths(tmp_path, "ike")
    fresh = storage_at(tmp_path)
    assert fresh.reload("ike", None).facts == {}
    assert not paths.manifest.exists()
    assert list(paths.agents.rglob("*.md")) == []
    assert paths.history.read_bytes() == b""
    assert create(fresh, "ike", fact("again")) == 1


def test_a_reader_waits_out_a_memory_json_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock-free read that meets memory.json half written reads again under the lock (so
    after the commit) instead of reporting corruption."""
    writer = storage_at(tmp_path)
    create(writer, "ada", fact("one"))
    reader = storage_at(tmp_path)
    assert len(reader.load("ada", None).facts) == 1  # cached: the next load reads lock-free
    overwrite = SyncBatch.overwrite
    halfway = threading.Event()
    results: list[object] = []

    def slow(batch: SyncBatch, path: Path, data: bytes) -> None:
        with open(path, "r+b") as handle:
            handle.write(data[: len(data) // 2])
        with pytest.raises(json.JSONDecodeError):
            json.loads(path.read_bytes())  # what the reader meets does not parse
        halfway.set()
        time.sleep(0.3)  # the reader meets the torn bytes meanwhile
        overwrite(batch, path, data)

    def read() -> None:
        halfway.wait()
        try:
            results.append(reader.load("ada", None))
        except Exception as exc:  # the test reports what the reader met
            results.append(exc)

    monkeypatch.setattr(SyncBatch, "overwrite", slow)
    thread = threading.Thread(target=read)
    thread.start()
    summary = "a new summary, which moves the bytes after it"
    writer.save(
        "ada",
        ChangeSet(
            actor="t",
            reason="r",
            upserts=[fact("two")],
            summaries={"user": {"workContext": summary}},
        ),
    )
    thread.join()
    (snapshot,) = results
    assert not isinstance(snapshot, Exception), snapshot
    assert sorted(f["content"] for f in snapshot.facts.values()) == ["one", "two"]
    assert snapshot.summaries["user"]["workContext"]["summary"] == summary


def test_crash_after_the_commit_point_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = storage_at(tmp_path)
    create(storage, "jay", fact("one"))
    overwrite = SyncBatch.overwrite

    def crash_after_writing(batch: SyncBatch, path: Path, data: bytes) -> None:
        overwrite(batch, path, data)
        batch.sync()
        raise OSError("simulated crash")

    monkeypatch.setattr(SyncBatch, "overwrite", crash_after_writing)
    with pytest.raises(OSError, match="simulated"):
        create(storage, "jay", fact("two"))
    monkeypatch.undo()
    assert Journal.pending(UserPaths(tmp_path, "jay").journal) is not None
    fresh = storage_at(tmp_path)
    assert sorted(f["content"] for f in fresh.load("jay", None).facts.values()) == ["one", "two"]
    history = fresh.read_history("jay")
    assert [entry["revision"] for entry in history] == [1, 2]


def _temps(paths: UserPaths) -> list[str]:
    return sorted(p.name for p in paths.dir.rglob(".*.tmp"))


@pytest.mark.parametrize("killed_in", ["publish", "overwrite"])
def test_a_commit_killed_while_it_replaces_files_is_undone_without_leftovers(
    tmp_path: Path, killed_in: str
) -> None:
    """SIGKILL while a commit renames a changed fact's temp file over it, or while it writes
    memory.json in place: the next opener undoes the commit and leaves no temp file behind
    (they are hidden, but would pile up crash after crash)."""
    storage = storage_at(tmp_path)
    one = fact("one")
    create(storage, "pat", one)
    paths = UserPaths(tmp_path, "pat")
    before = _memory_files(paths)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends by SIGKILL, or reports failure
        if killed_in == "publish":

            def publish_or_die(batch: SyncBatch, path: Path) -> None:
                os.kill(os.getpid(), signal.SIGKILL)

            SyncBatch.publish = publish_or_die  # type: ignore[method-assign]
        else:

            def write_half_and_die(batch: SyncBatch, path: Path, data: bytes) -> None:
                fd = os.open(path, os.O_WRONLY)
                os.write(fd, data[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)

            SyncBatch.overwrite = write_half_and_die  # type: ignore[method-assign]
        changes = ChangeSet(
            actor="t",
            reason="r",
            upserts=[{**one, "content": "one, changed"}],
            # a new summary moves the bytes after it: half of them written is a torn file
            summaries={"user": {"workContext": "works on tea"}},
        )
        storage_at(tmp_path).save("pat", changes)
        os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
    assert any(name.startswith(f".{one['id']}.md.") for name in _temps(paths)) == (
        killed_in == "publish"
    )
    torn = paths.manifest.read_bytes() != before[paths.manifest]
    assert torn == (killed_in == "overwrite")
    fresh = storage_at(tmp_path)
    assert [f["content"] for f in fresh.load("pat", None).facts.values()] == ["one"]
    assert _temps(paths) == []
    assert _memory_files(paths) == before
    assert Journal.pending(paths.journal) is None


def test_recovery_leaves_temp_files_of_other_names_alone(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    create(storage, "quin", fact("one"))
    paths = UserPaths(tmp_path, "quin")
    mine = [paths.dir / ".memory.json.notes", paths.dir / ".memory.json.12.abcdefgh.tmp"]
    for path in mine:
        path.write_text("not DeerMem's")
    _journal(1).write(paths.journal)  # a commit to undo: from revision 1, which it still is
    storage_at(tmp_path).reload("quin", None)
    assert Journal.pending(paths.journal) is None
    assert all(path.read_text() == "not DeerMem's" for path in mine)


def test_torn_history_line_is_cut_before_finishing(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    create(storage, "kim", fact("one"))
    paths = UserPaths(tmp_path, "kim")
    with open(paths.history, "ab") as handle:
        handle.write(b'{"change_id": "torn')
    atomic.truncate_torn_tail(paths.history)
    assert paths.history.read_bytes().endswith(b"}\n")


def _check_crash_invariants(root: Path, user: str) -> int:
    """Every write is wholly there or wholly absent; return the committed revision."""
    snapshot = storage_at(root).load(user, None)
    n = snapshot.revision
    contents = sorted(f["content"] for f in snapshot.facts.values())
    if n == 0:
        assert contents == []
    else:
        assert contents == [f"w{n}-a", f"w{n}-b", f"w{n}-c"], f"revision {n}: {contents}"
        assert snapshot.summaries["user"]["workContext"]["summary"] == f"write {n}"
    history = storage_at(root).read_history(user)
    assert [entry["revision"] for entry in history] == list(range(1, n + 1))
    assert _temps(UserPaths(root, user)) == [], "recovery removes what the kill left"
    return n


@pytest.mark.timeout(LONG_TIMEOUT)
def test_sigkill_during_multi_file_writes_loses_nothing_committed(tmp_path: Path) -> None:
    rng = random.Random(1234)
    committed = 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # At least 12 kills, and enough of them that more than 20 commits landed in between: on a
    # slow or busy disk a writer commits less before its kill, so more rounds are needed.
    least = 500 if LONG else 12
    kills = 0
    while kills < least or (committed <= 20 and kills < 200):
        kills += 1
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.deermem.crash_writer",
                str(tmp_path),
                "kill-me",
                "100000",
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )
        assert child.stdout is not None
        first = child.stdout.readline()  # it is writing
        time.sleep(rng.uniform(0.0, 0.15))
        child.send_signal(signal.SIGKILL)
        child.wait()
        # Printed after `save` returned: each of these was acknowledged before the kill.
        acknowledged = max(map(int, [first, *child.stdout.read().split()]))
        now = _check_crash_invariants(tmp_path, "kill-me")
        assert now >= max(committed, acknowledged), "an acknowledged commit was lost"
        committed = now
    assert committed > 20
    # The writer never touched the index; the next search notices and catches up from the files.
    # Lexical: the static model finds "w76-c" close to "w75" by meaning.
    manager = DeerMemMemoryManager.from_config(
        {"storage_path": str(tmp_path), "retrieval_embeddings": False}
    )
    found = manager.search(f"w{committed}", top_k=10, user_id="kill-me")
    assert sorted(f["content"] for f in found) == [f"w{committed}-{part}" for part in "abc"]
    assert manager.search(f"w{committed - 1}", top_k=10, user_id="kill-me") == []


def test_concurrent_processes_lose_no_acknowledged_write(tmp_path: Path) -> None:
    writers = [spawn("concurrent_writer", str(tmp_path), "shared", f"p{i}", "25") for i in range(8)]
    committed: list[str] = []
    conflicts: list[str] = []
    for writer in writers:
        out, _ = writer.communicate(timeout=120)
        assert writer.returncode == 0
        outcome = json.loads(out)
        committed += outcome["committed"]
        conflicts += outcome["conflicts"]
    snapshot = storage_at(tmp_path).load("shared", None)
    stored = sorted(f["content"] for f in snapshot.facts.values())
    assert stored == sorted(committed)
    assert snapshot.revision == len(committed)
    assert len(committed) + len(conflicts) == 200
    assert len(storage_at(tmp_path).read_history("shared")) == len(committed)


def test_readers_in_another_process_only_ever_see_whole_commits(tmp_path: Path) -> None:
    """memory.json is written in place while readers check their caches without the lock:
    every state a reader gets is one a commit left (summary, revision and facts agreeing)."""
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.deermem.crash_writer", str(tmp_path), "rw", "300"],
        stdout=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    reader = storage_at(tmp_path)
    seen: set[int] = set()
    while writer.poll() is None:
        snapshot = reader.load("rw", None)
        n = snapshot.revision
        if n:
            assert snapshot.summaries["user"]["workContext"]["summary"] == f"write {n}"
            contents = sorted(f["content"] for f in snapshot.facts.values())
            assert contents == [f"w{n}-a", f"w{n}-b", f"w{n}-c"]
            revision, facts = reader.load_facts("rw", None, list(snapshot.facts))
            assert revision >= n
            # the next write deletes these three facts
            assert sorted(f["content"] for f in facts.values()) == (
                contents if revision == n else []
            )
        seen.add(n)
    assert writer.returncode == 0
    assert reader.load("rw", None).revision == 300
    assert any(0 < n < 300 for n in seen), "the reader read while the writer wrote"


def _journal(previous: int, entries: tuple[JournalEntry, ...] = ()) -> Journal:
    return Journal("chg_test", previous, previous + 1, entries, b'{"change_id": "chg_test"}\n')


@pytest.mark.parametrize("cut", [5, 20, 40, -1], ids=["magic", "header", "payload", "last-byte"])
def test_a_torn_journal_is_discarded(tmp_path: Path, cut: int) -> None:
    storage = storage_at(tmp_path)
    create(storage, "lee", fact("one"))
    paths = UserPaths(tmp_path, "lee")
    paths.journal.unlink()  # so that the file holds exactly the record below
    _journal(1, (JournalEntry("agents/__default__/facts/00/fact_00.md", None),)).write(
        paths.journal
    )
    record = paths.journal.read_bytes()
    paths.journal.write_bytes(record[:cut])  # the crash came while the journal was written
    assert Journal.pending(paths.journal) is None
    paths.journal.write_bytes(record[:-1] + b"X")  # a payload byte other than the one written
    assert Journal.pending(paths.journal) is None
    fresh = storage_at(tmp_path)
    assert [f["content"] for f in fresh.reload("lee", None).facts.values()] == ["one"]
    assert create(fresh, "lee", fact("two")) == 2


def test_a_journal_written_over_a_longer_one_reads_as_itself(tmp_path: Path) -> None:
    path = tmp_path / ".journal.json"
    long = _journal(7, tuple(JournalEntry(f"f{i}.md", b"x" * 100) for i in range(20)))
    long.write(path)
    Journal.finish(path)
    assert Journal.pending(path) is None
    short = _journal(8, (JournalEntry("g.md", None),))
    short.write(path)
    assert path.stat().st_size > len(json.dumps(short.entries[0].path)) + 200, "left over bytes"
    assert Journal.pending(path) == short
    Journal.finish(path)
    assert Journal.pending(path) is None


def test_a_journal_of_the_earlier_format_is_still_recovered(tmp_path: Path) -> None:
    """Before the header format, a journal was one JSON line, emptied when done."""
    storage = storage_at(tmp_path)
    kept = fact("kept")
    create(storage, "moe", kept)
    paths = UserPaths(tmp_path, "moe")
    half_done = fact("half done")  # its file was written, memory.json was not: roll back
    relative = paths.fact_file("__default__", half_done["id"]).relative_to(paths.dir)
    (paths.dir / relative).parent.mkdir(parents=True, exist_ok=True)
    (paths.dir / relative).write_bytes(b"---\nid: partial")
    record = {
        "operationId": "chg_old",
        "previousRevision": 1,
        "nextRevision": 2,
        "entries": [{"path": str(relative), "before": None}],
        "historyLine": base64.b64encode(b'{"change_id": "chg_old"}\n').decode(),
    }
    paths.journal.write_text(json.dumps(record) + "\n")
    fresh = storage_at(tmp_path)
    assert [f["content"] for f in fresh.reload("moe", None).facts.values()] == ["kept"]
    assert not (paths.dir / relative).exists()
    assert paths.journal.read_bytes() == b"", "done, in the earlier format's way"
    assert create(fresh, "moe", fact("next")) == 2


def test_a_finished_commit_of_the_earlier_format_gets_its_audit_line(tmp_path: Path) -> None:
    """The earlier commit appended the audit line after the commit point: recovery adds it."""
    storage = storage_at(tmp_path)
    create(storage, "pat", fact("one"))
    create(storage, "pat", fact("two"))
    paths = UserPaths(tmp_path, "pat")
    lines = paths.history.read_bytes().splitlines(keepends=True)
    paths.history.write_bytes(lines[0])  # the crash came before the second line was written
    record = {
        "operationId": "chg_old",
        "previousRevision": 1,
        "nextRevision": 2,
        "entries": [],
        "historyLine": base64.b64encode(lines[1]).decode(),
    }
    paths.journal.write_text(json.dumps(record) + "\n")
    fresh = storage_at(tmp_path)
    assert [entry["revision"] for entry in fresh.read_history("pat")] == [1, 2]
    assert paths.history.read_bytes() == b"".join(lines)


def test_a_journal_holding_something_else_is_corruption_and_left_alone(tmp_path: Path) -> None:
    storage = storage_at(tmp_path)
    create(storage, "ned", fact("one"))
    paths = UserPaths(tmp_path, "ned")
    paths.journal.write_bytes(b"this is not a journal at all, but long enough to be one")
    with pytest.raises(MemoryCorruptionError, match="not a commit journal"):
        storage_at(tmp_path).reload("ned", None)
    assert paths.journal.read_bytes().startswith(b"this is not a journal")


def test_a_new_fact_file_left_half_written_is_removed_by_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New fact files are written in place, without a rename: the journal must undo a torn one."""
    storage = storage_at(tmp_path)
    create(storage, "oz", fact("one"))
    paths = UserPaths(tmp_path, "oz")
    _tear(monkeypatch, "create")
    with pytest.raises(OSError, match="simulated"):
        create(storage, "oz", fact("two"))
    monkeypatch.undo()
    assert len(list(paths.agents.rglob("*.md"))) == 2, "the torn file is on disk"
    fresh = storage_at(tmp_path)
    assert [f["content"] for f in fresh.reload("oz", None).facts.values()] == ["one"]
    assert len(list(paths.agents.rglob("*.md"))) == 1
    assert Journal.pending(paths.journal) is None
