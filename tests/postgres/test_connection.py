"""Opening the PostgreSQL engine's pool and migrating its schema, on a real server."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem.deermem.config import parse_config
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import (
    DatabaseUnavailableError,
    open_pool,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.schema import migrate
from deerflow.agents.memory.manager import MemoryCorruptionError
from tests.postgres_server import postgres_backend_config

PART = [["CREATE TABLE things (id integer PRIMARY KEY)"], ["ALTER TABLE things ADD note text"]]


def test_pool_connects_in_its_schema(postgres_url: str, tmp_path: Path) -> None:
    config = parse_config(postgres_backend_config(postgres_url, tmp_path))
    with open_pool(config) as pool, pool.connection() as conn:
        assert migrate(conn, config.database_schema, "things", PART) == 2
        conn.execute("INSERT INTO things (id, note) VALUES (1, 'x')")
        row = conn.execute(f"SELECT note FROM {config.database_schema}.things").fetchone()
        assert row == ("x",)


def test_replicas_migrating_at_once_apply_each_step_once(postgres_url: str, tmp_path: Path) -> None:
    config = parse_config(postgres_backend_config(postgres_url, tmp_path))
    errors: list[BaseException] = []

    def start() -> None:
        try:
            with open_pool(config) as pool, pool.connection() as conn:
                migrate(conn, config.database_schema, "things", PART)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []  # a second CREATE TABLE would have failed


def test_a_newer_schema_is_refused(postgres_url: str, tmp_path: Path) -> None:
    config = parse_config(postgres_backend_config(postgres_url, tmp_path))
    with open_pool(config) as pool, pool.connection() as conn:
        migrate(conn, config.database_schema, "things", PART)
        with pytest.raises(MemoryCorruptionError, match="version 2, newer"):
            migrate(conn, config.database_schema, "things", PART[:1])


def test_a_wrong_database_stops_the_start_with_the_password_masked(
    postgres_url: str, tmp_path: Path
) -> None:
    url = "postgresql://memory:hunter2hunter2@127.0.0.1:1/nowhere"
    config = parse_config(postgres_backend_config(url, tmp_path))
    with pytest.raises(DatabaseUnavailableError, match="cannot connect") as caught:
        open_pool(config)
    assert "hunter2" not in str(caught.value)
    # The user saw "database_url memory@…", not the dotted key every other config error names.
    assert str(caught.value).startswith(
        "memory.backend_config.database_url: memory@127.0.0.1:1/nowhere: cannot connect: "
    )
    # One line, as the CLI and the log print it (psycopg's own message spans several).
    assert "\n" not in str(caught.value)


def test_a_url_that_is_not_one_names_the_key(tmp_path: Path) -> None:
    config = parse_config(postgres_backend_config("not a url at all", tmp_path))
    with pytest.raises(ValueError, match="not a PostgreSQL connection string") as caught:
        open_pool(config)
    assert str(caught.value).startswith(
        "memory.backend_config.database_url: not a PostgreSQL connection string: "
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"database_url": None}, "needs database_url"),
        ({"storage_class": "x.Y"}, "cannot be used with postgres"),
        ({"database_schema": "Bad-Name"}, "database_schema"),
        ({"database_pool_size": 0}, "database_pool_size"),
    ],
)
def test_bad_postgres_settings_are_refused(
    tmp_path: Path, extra: dict[str, object], message: str
) -> None:
    config = postgres_backend_config("postgresql://localhost/x", tmp_path) | extra
    with pytest.raises(ValueError, match=message):
        parse_config(config)


def test_database_url_needs_storage_postgres(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="only with storage: postgres"):
        parse_config({"storage_path": str(tmp_path), "database_url": "postgresql://localhost/x"})
