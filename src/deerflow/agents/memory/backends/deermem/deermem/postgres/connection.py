"""The connection pool of the PostgreSQL engine, checked when it opens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from deerflow.agents.memory.manager import MemoryManagerError

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

    from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig

__all__ = ["EXTRA", "DatabaseUnavailableError", "open_pool"]

EXTRA: Final = "postgres"
_CONNECT_TIMEOUT_S: Final = 10.0
_KEY: Final = "memory.backend_config.database_url"


class DatabaseUnavailableError(MemoryManagerError):
    """The database named by `database_url` cannot be reached, or refused the connection."""


def open_pool(config: DeerMemConfig) -> ConnectionPool:
    """A pool of `database_pool_size` connections whose `search_path` is `database_schema`.

    Opening waits for one working connection, so a wrong URL, a server that is down or a
    refused login stops the start here, naming the database (its password masked).

    Raises:
        ValueError: psycopg is not installed.
        DatabaseUnavailableError: no connection within ten seconds.
    """
    try:
        import psycopg
        from psycopg_pool import ConnectionPool, PoolTimeout
    except ImportError:
        raise ValueError(
            f"storage: postgres needs psycopg: pip install 'deerflow-memory[{EXTRA}]'"
        ) from None
    url = config.database_url
    if url is None:
        raise ValueError("storage: postgres needs database_url")
    shown = _shown(url)
    try:  # once on its own, for the server's own words (a refused password, no such database)
        psycopg.connect(url, connect_timeout=int(_CONNECT_TIMEOUT_S)).close()
    except psycopg.Error as exc:
        said = " ".join(str(exc).split())  # one line: libpq adds hints on lines of their own
        raise DatabaseUnavailableError(f"{_KEY}: {shown}: cannot connect: {said}") from None
    pool = ConnectionPool(
        url,
        min_size=1,
        max_size=config.database_pool_size,
        kwargs={"options": f"-c search_path={config.database_schema},public"},
        open=False,
        name="deermem",
    )
    try:
        pool.open(wait=True, timeout=_CONNECT_TIMEOUT_S)
    except PoolTimeout:
        pool.close()
        raise DatabaseUnavailableError(
            f"{_KEY}: {shown}: no connection within "
            f"{_CONNECT_TIMEOUT_S:g} s (is the server running, and are the address, user and "
            "password right?)"
        ) from None
    return pool


def _shown(url: str) -> str:
    """The database named by `url` without its credentials: user, host, port and name."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(url)
    except ProgrammingError as exc:
        raise ValueError(f"{_KEY}: not a PostgreSQL connection string: {exc}") from None
    where = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    return f"{user}{where}{port}/{parts.get('dbname') or ''}"
