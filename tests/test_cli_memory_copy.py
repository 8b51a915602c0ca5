"""`deerflow memory copy`: whole users move from one DeerMem store to another, losing nothing."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from deerflow.agents.memory.backends.deermem.deermem.core.storage import FileMemoryStorage
from deerflow.cli import memory_copy
from deerflow.cli.app import app
from tests.deermem.dump_helpers import fill_user, manager_at, stored
from tests.postgres_server import postgres_backend_config

USERS = ("alice@example.com", "bob")
WIDE = {"COLUMNS": "200"}


def config_at(path: Path, store: Path | None, manager_class: str = "deermem") -> Path:
    text = f"memory:\n  manager_class: {manager_class}\n"
    if store is not None:
        text += f"  backend_config:\n    storage_path: {store}\n    retrieval_embeddings: false\n"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with two users worth copying; the tests only read it."""
    store = tmp_path_factory.mktemp("source") / "store"
    for user in USERS:
        fill_user(store, user)
    return store


@pytest.fixture
def copy(source: Path, tmp_path: Path) -> Any:
    """Run `memory copy` from `source` to the store `tmp_path/store`."""
    source_config = config_at(tmp_path / "source.yaml", source)
    destination_config = config_at(tmp_path / "destination.yaml", tmp_path / "store")

    def invoke(*args: str) -> Result:
        command = ["memory", "copy", "-c", str(source_config), "--to", str(destination_config)]
        return CliRunner().invoke(app, [*command, *args], env=WIDE)

    return invoke


def test_every_user_arrives_with_every_record_summary_and_history_entry(
    copy: Any, source: Path, tmp_path: Path
) -> None:
    result = copy()

    assert result.exit_code == 0, result.output
    for user in USERS:
        assert stored(tmp_path / "store", user) == stored(source, user)
    facts = sum(len(stored(source, user)["facts"]) for user in USERS)
    history = sum(len(stored(source, user)["history"]) for user in USERS)
    assert f"copied 2 users ({facts} facts, {history} history entries)" in result.stdout


def test_one_user_is_counted_in_the_singular(copy: Any) -> None:
    result = copy("--user", "bob")

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("copied 1 user (")


def test_the_json_report_counts_what_was_copied(copy: Any, source: Path) -> None:
    result = copy("--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    per_user = {
        user: {
            "facts": len(stored(source, user)["facts"]),
            "history": len(stored(source, user)["history"]),
        }
        for user in USERS
    }
    assert {
        u["user_id"]: {"facts": u["facts"], "history": u["history"]} for u in report["copied"]
    } == per_user
    assert report["users"] == 2
    assert report["facts"] == sum(u["facts"] for u in per_user.values())
    assert report["history"] == sum(u["history"] for u in per_user.values())
    assert report["skipped"] == []


def test_user_copies_only_the_named_users(copy: Any, tmp_path: Path) -> None:
    result = copy("--user", "bob", "--json")

    assert result.exit_code == 0, result.output
    assert stored(tmp_path / "store", "bob")["user_ids"] == ["bob"]


def test_a_user_the_source_does_not_hold_is_refused(copy: Any, tmp_path: Path) -> None:
    result = copy("--user", "bob", "--user", "carol")

    assert result.exit_code == 2
    assert "'carol'" in result.stderr
    assert stored(tmp_path / "store", "bob")["user_ids"] == []


def test_a_user_the_destination_holds_stops_the_copy_before_anything_is_written(
    copy: Any, tmp_path: Path
) -> None:
    manager = manager_at(tmp_path / "store")
    manager.create_fact("Bob's own fact here", user_id="bob")
    manager.close()
    before = stored(tmp_path / "store", "bob")

    refused = copy()
    as_json = copy("--json")

    assert refused.exit_code == 2
    assert "'bob'" in refused.stderr
    assert "nothing was written" in refused.stderr
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["error"] == "users_exist"
    assert stored(tmp_path / "store", "bob") == before
    assert stored(tmp_path / "store", "bob")["user_ids"] == ["bob"], "alice was not copied"


def test_skip_existing_copies_the_others(copy: Any, source: Path, tmp_path: Path) -> None:
    manager = manager_at(tmp_path / "store")
    manager.create_fact("Bob's own fact here", user_id="bob")
    manager.close()
    before = stored(tmp_path / "store", "bob")

    result = copy("--skip-existing", "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [u["user_id"] for u in report["copied"]] == ["alice@example.com"]
    assert report["skipped"] == ["bob"]
    assert stored(tmp_path / "store", "bob") == {**before, "user_ids": sorted(USERS)}
    assert stored(tmp_path / "store", USERS[0]) == stored(source, USERS[0])
    plain = copy("--skip-existing")
    assert "skipped 2 already in the destination" in plain.stdout


def test_a_copy_into_its_own_store_is_refused(source: Path, tmp_path: Path) -> None:
    config = config_at(tmp_path / "source.yaml", source)
    same = config_at(tmp_path / "same.yaml", source / "." / "")

    result = CliRunner().invoke(app, ["memory", "copy", "-c", str(config), "--to", str(same)])

    assert result.exit_code == 2
    assert "the source's own store" in result.stderr


@pytest.mark.parametrize("side", ["source", "destination"])
def test_a_backend_other_than_deermem_is_refused(side: str, source: Path, tmp_path: Path) -> None:
    deermem = config_at(tmp_path / "deermem.yaml", source)
    other = config_at(tmp_path / "inmemory.yaml", None, manager_class="inmemory")
    first, second = (other, deermem) if side == "source" else (deermem, other)

    result = CliRunner().invoke(app, ["memory", "copy", "-c", str(first), "--to", str(second)])

    assert result.exit_code == 5
    assert "does not support 'copy'" in result.stderr


def test_the_progress_bar_counts_users_of_a_known_total(
    copy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int | None, int]] = []

    @contextlib.contextmanager
    def recorder(description: str, *, enabled: bool, total: int | None = None) -> Iterator[Any]:
        yield lambda done: seen.append((total, done))

    monkeypatch.setattr(memory_copy.render, "progress_bar", recorder)
    assert copy().exit_code == 0
    assert seen == [(2, 1), (2, 2)]


def test_help_names_every_option() -> None:
    result = CliRunner().invoke(app, ["memory", "copy", "--help"], env=WIDE)

    assert result.exit_code == 0
    for option in ("--to", "--user", "--skip-existing", "--config", "--json"):
        assert option in result.stdout


def test_files_to_postgres_and_back_loses_nothing(
    source: Path, tmp_path: Path, postgres_url: str
) -> None:
    files = config_at(tmp_path / "files.yaml", source)
    backend = postgres_backend_config(postgres_url, tmp_path / "caches", retrieval_embeddings=False)
    postgres = tmp_path / "postgres.yaml"
    postgres.write_text(
        yaml.safe_dump({"memory": {"manager_class": "deermem", "backend_config": backend}}),
        encoding="utf-8",
    )
    back = config_at(tmp_path / "back.yaml", tmp_path / "back")

    there = CliRunner().invoke(app, ["memory", "copy", "-c", str(files), "--to", str(postgres)])
    home = CliRunner().invoke(app, ["memory", "copy", "-c", str(postgres), "--to", str(back)])

    assert there.exit_code == 0, there.output
    assert home.exit_code == 0, home.output
    assert not (tmp_path / "caches" / "users").exists(), "the copy went to the database"
    for user in USERS:
        assert stored(tmp_path / "back", user) == stored(source, user)


def test_a_user_written_at_the_destination_during_the_copy_is_refused_or_skipped(
    copy: Any, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = manager_at(tmp_path / "store")
    manager.create_fact("Bob's own fact here", user_id="bob")
    manager.close()
    listed = FileMemoryStorage.user_ids

    def late(storage: FileMemoryStorage) -> Iterator[str]:
        """The destination's listing taken before bob's memory arrived."""
        return iter(()) if storage.root == tmp_path / "store" else listed(storage)

    monkeypatch.setattr(FileMemoryStorage, "user_ids", late)

    refused = copy()
    assert refused.exit_code == 2
    assert "'bob'" in refused.stderr
    assert "the users before it were copied (1)" in refused.stderr
    assert stored(tmp_path / "store", USERS[0]) == {
        **stored(source, USERS[0]),
        "user_ids": [],  # the listing is the patched one
    }
    skipped = copy("--skip-existing", "--json")
    assert skipped.exit_code == 0, skipped.output
    assert json.loads(skipped.stdout)["skipped"] == ["alice@example.com", "bob"]
