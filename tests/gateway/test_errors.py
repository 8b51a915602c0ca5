"""The error table over HTTP: every memory error has a status; internals never leak."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from deerflow.agents.memory import manager as contract
from deerflow.agents.memory.backends.inmemory import InMemoryMemoryManager
from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactEvictedError,
    FactNotFoundError,
    MemoryAccessError,
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManagerError,
    MemoryReadError,
    MemoryUnsupportedError,
)
from deerflow.gateway.errors import CORRUPTION_TEXT, INTERNAL_TEXT, error_status
from tests.gateway.conftest import Serve, app_config
from tests.gateway.live import LiveServer
from tests.gateway.test_memory_api import TEA, add, expect_error

SPEC_STATUSES = {
    MemoryConflictError: 409,
    MemoryCorruptionError: 500,
    MemoryReadError: 503,
    MemoryAccessError: 403,
    MemoryUnsupportedError: 501,
    FactNotFoundError: 404,
    DuplicateFactError: 409,
    FactEvictedError: 409,
    ValueError: 400,
}


def all_subclasses(cls: type[Exception]) -> set[type[Exception]]:
    found = set(cls.__subclasses__())
    return found.union(*(all_subclasses(sub) for sub in found)) if found else found


def test_every_public_memory_error_has_its_spec_status() -> None:
    public = {
        obj
        for obj in vars(contract).values()
        if isinstance(obj, type)
        and issubclass(obj, MemoryManagerError)
        and obj is not MemoryManagerError
    }
    assert public == set(SPEC_STATUSES) - {ValueError}, "a new error needs a row in SPEC_STATUSES"
    for kind, status in SPEC_STATUSES.items():
        error = kind.__new__(kind)
        mapped = error_status(error)
        assert mapped is not None
        assert mapped.status == status, kind.__name__


def test_backend_specific_memory_errors_are_a_fixed_text_500() -> None:
    # DeerMem's own subclasses (queue full, …) are imported by now through the backend package.
    import deerflow.agents.memory.backends.deermem  # noqa: F401

    for kind in all_subclasses(MemoryManagerError) - set(SPEC_STATUSES):
        mapped = error_status(kind.__new__(kind))
        assert mapped is not None, kind.__name__
        if not any(issubclass(kind, known) for known in SPEC_STATUSES):
            assert (mapped.status, mapped.fixed_detail) == (500, INTERNAL_TEXT), kind.__name__


# -- real conditions -----------------------------------------------------------------------------


def test_corrupted_storage_is_500_with_the_fixed_text_and_is_left_alone(
    client: httpx.Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    add(client)
    manifest = tmp_path / "store" / "users" / "default" / "memory.json"
    manifest.write_text("{ this is not json")
    with caplog.at_level(logging.ERROR):
        for response in (client.post("/api/memory/reload"), client.get("/api/memory")):
            assert expect_error(response, 500, "corruption") == CORRUPTION_TEXT
            assert str(tmp_path) not in response.text
            assert "memory.json" not in response.text
            assert "Traceback" not in response.text
    assert manifest.read_text() == "{ this is not json", "never silently reset"
    assert any("memory.json" in record.getMessage() for record in caplog.records)


def test_a_backend_without_the_operation_is_501(serve: Serve, tmp_path: Path) -> None:
    server = serve(app_config(tmp_path, "noop"))
    response = httpx.get(server.url("/api/memory"))
    detail = expect_error(response, 501, "unsupported")
    assert "NoopMemoryManager" in detail
    assert "get_memory" in detail
    for method, path in [
        ("post", "/api/memory/facts"),
        ("delete", "/api/memory/facts/fact_0123456789abcdef"),
        ("get", "/api/memory/history"),
        ("get", "/api/memory/export"),
        ("delete", "/api/memory"),
    ]:
        kwargs: dict[str, Any] = {"json": TEA} if method == "post" else {}
        expect_error(httpx.request(method, server.url(path), **kwargs), 501, "unsupported")
    # reload falls back to get_memory, which noop lacks as well
    expect_error(httpx.post(server.url("/api/memory/reload")), 501, "unsupported")
    assert httpx.get(server.url("/api/memory/search"), params={"q": "x"}).json()["results"] == []
    supports = httpx.get(server.url("/api/memory/status")).json()["supports"]
    assert supports["search"] is True
    assert not any(v for k, v in supports.items() if k != "search")


def test_markdown_needs_a_backend_that_has_it(serve: Serve, tmp_path: Path) -> None:
    server = serve(app_config(tmp_path, "inmemory"))
    exported = httpx.get(server.url("/api/memory/export"), params={"format": "markdown"})
    assert "export_markdown" in expect_error(exported, 501, "unsupported")
    zipped = {"file": ("m.zip", b"PK\x03\x04 whatever")}
    assert "import_markdown" in expect_error(
        httpx.post(server.url("/api/memory/import"), files=zipped), 501, "unsupported"
    )
    assert httpx.get(server.url("/api/memory/export")).status_code == 200
    supports = httpx.get(server.url("/api/memory/status")).json()["supports"]
    assert supports["export_memory"] is True
    assert supports["export_markdown"] is False


class FailingMemoryManager(InMemoryMemoryManager):
    """Reads fail with the error the test asks for; the message carries internals."""

    failure: ClassVar[Exception] = RuntimeError()

    def get_memory(self, *, user_id: str | None = None, agent_name: str | None = None) -> Any:
        raise type(self).failure


@pytest.mark.parametrize(
    ("failure", "status", "code", "fixed"),
    [
        (
            MemoryReadError("GET http://10.0.0.7:8000/v1/memories timed out"),
            503,
            "read_failed",
            True,
        ),
        (
            MemoryAccessError("user default is not the owner of this memory"),
            403,
            "forbidden",
            False,
        ),
        (KeyError("/srv/memory/users/x"), 500, "internal_error", True),
        (
            RuntimeError("connection to postgres://admin:hunter2@db/x lost"),
            500,
            "internal_error",
            True,
        ),
    ],
    ids=["read", "access", "keyerror", "bug"],
)
def test_backend_failures_map_by_type(
    serve: Serve, failure: Exception, status: int, code: str, fixed: bool
) -> None:
    backend = FailingMemoryManager.from_config({})
    FailingMemoryManager.failure = failure
    server: LiveServer = serve(app_config(Path("unused"), "inmemory"), manager=backend)
    response = httpx.get(server.url("/api/memory"))
    detail = expect_error(response, status, code)
    if fixed:
        assert str(failure).strip("'") not in response.text
        assert "10.0.0.7" not in response.text
        assert "hunter2" not in response.text
    else:
        assert detail == str(failure)
