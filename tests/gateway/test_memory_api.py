"""The memory API over real HTTP on a live uvicorn, DeerMem storing in tmp_path."""

from __future__ import annotations

import concurrent.futures
import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest
from starlette import formparsers

from deerflow.agents.memory.manager import SUMMARY_SECTIONS
from deerflow.gateway.schemas import SummaryPart, SummarySection
from tests.gateway.conftest import Serve, app_config
from tests.gateway.live import LiveServer

TEA = {"content": "Prefers green tea over coffee", "category": "preference", "confidence": 0.9}


def expect_error(response: httpx.Response, status: int, code: str) -> str:
    """Assert the status and the error body; return its detail."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "detail"}
    assert body["error"] == code
    return str(body["detail"])


def add(client: httpx.Client, agent: str | None = None, **fact: Any) -> dict[str, Any]:
    params = {"agent_name": agent} if agent else {}
    response = client.post("/api/memory/facts", json=fact or TEA, params=params)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def contents(client: httpx.Client, agent: str | None = None) -> list[str]:
    params = {"agent_name": agent} if agent else {}
    response = client.get("/api/memory", params=params)
    assert response.status_code == 200, response.text
    return sorted(fact["content"] for fact in response.json()["facts"])


# -- create, read, update, delete ------------------------------------------------------------------


def test_a_fact_is_created_read_updated_and_deleted(client: httpx.Client) -> None:
    created = add(client)
    assert created["content"] == TEA["content"]
    assert created["category"] == "preference"
    assert created["id"].startswith("fact_")
    assert created["revision"] == 1  # the memory's revision after the write
    document = client.get("/api/memory").json()
    assert [fact["id"] for fact in document["facts"]] == [created["id"]]
    assert set(document["user"]) == {"workContext", "personalContext", "topOfMind"}

    patched = client.patch(f"/api/memory/facts/{created['id']}", json={"content": "Drinks sencha"})
    assert patched.status_code == 200, patched.text
    assert patched.json()["content"] == "Drinks sencha"
    assert patched.json()["category"] == "preference"
    assert patched.json()["revision"] == 2
    assert contents(client) == ["Drinks sencha"]

    deleted = client.delete(f"/api/memory/facts/{created['id']}")
    assert deleted.status_code == 200
    assert deleted.json() == {"deleted": created["id"], "revision": 3}
    assert contents(client) == []


def test_defaults_apply_to_a_fact_with_content_only(client: httpx.Client) -> None:
    created = add(client, content="Lives in Lisbon")
    assert (created["category"], created["confidence"]) == ("context", 0.5)


def test_reload_reads_what_another_process_wrote(
    client: httpx.Client, deermem: LiveServer, tmp_path: Path
) -> None:
    from deerflow.agents.memory.manager import build_memory_manager

    assert contents(client) == []
    other = build_memory_manager(app_config(tmp_path).memory)
    other.create_fact("Written by the CLI", user_id="default")
    other.close()
    response = client.post("/api/memory/reload")
    assert response.status_code == 200
    assert [f["content"] for f in response.json()["facts"]] == ["Written by the CLI"]


def test_unknown_fact_id_is_404(client: httpx.Client) -> None:
    missing = "fact_0123456789abcdef"
    expect_error(
        client.patch(f"/api/memory/facts/{missing}", json={"confidence": 1}), 404, "fact_not_found"
    )
    detail = expect_error(client.delete(f"/api/memory/facts/{missing}"), 404, "fact_not_found")
    assert missing in detail


def test_the_same_content_twice_is_409(client: httpx.Client) -> None:
    first = add(client)
    detail = expect_error(client.post("/api/memory/facts", json=TEA), 409, "duplicate_fact")
    assert first["id"] in detail
    assert contents(client) == [TEA["content"]]


def test_a_held_lock_is_409_and_names_no_file(serve: Serve, tmp_path: Path) -> None:
    """Another process holding the user's memory longer than the lock timeout: reload, retry."""
    import fcntl
    import os

    config = app_config(tmp_path)
    config.memory.backend_config["file_lock_timeout_seconds"] = 0.2
    server = serve(config)
    lock_path = tmp_path / "store" / "users" / "default" / ".memory.lock"
    lock_path.parent.mkdir(parents=True)
    descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    try:
        response = httpx.post(server.url("/api/memory/facts"), json=TEA)
    finally:
        os.close(descriptor)
    detail = expect_error(response, 409, "conflict")
    assert "reload and retry" in detail
    assert str(tmp_path) not in response.text
    assert httpx.post(server.url("/api/memory/facts"), json=TEA).status_code == 201


def test_an_edit_based_on_a_stale_read_is_409_and_changes_nothing(client: httpx.Client) -> None:
    fact = add(client)
    seen = client.get("/api/memory").json()["revision"]
    add(client, content="Written by another tab meanwhile")
    path = f"/api/memory/facts/{fact['id']}"
    stale = {"expected_revision": seen}
    changed = client.patch(path, params=stale, json={"content": "Edited on a stale page"})
    assert "reload and retry" in expect_error(changed, 409, "conflict")
    expect_error(client.delete(path, params=stale), 409, "conflict")
    assert contents(client) == [TEA["content"], "Written by another tab meanwhile"]
    current = {"expected_revision": client.get("/api/memory").json()["revision"]}
    assert client.patch(path, params=current, json={"confidence": 0.4}).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "names"),
    [
        ("post", "/api/memory/facts", {"json": {"content": "   "}}, "content"),
        (
            "post",
            "/api/memory/facts",
            {"json": {"content": "my key is sk-proj-4fG7hK2mN9pQ3rS8tV1wX6yZ0a"}},
            "secret",
        ),
        ("get", "/api/memory", {"params": {"agent_name": "../bob"}}, "agent_name"),
        ("get", "/api/memory/search", {"params": {"q": "tea", "agent_name": "a/b"}}, "agent_name"),
        ("patch", "/api/memory/facts/not-a-fact-id", {"json": {"confidence": 0.1}}, "fact_id"),
        ("post", "/api/memory/history/chg_nope/revert", {}, "change_id"),
        ("post", "/api/memory/import", {"json": {"facts": "many"}}, "facts"),
    ],
    ids=[
        "blank",
        "secret",
        "agent-dots",
        "agent-slash",
        "fact-id",
        "change-id",
        "import",
    ],
)
def test_values_the_backend_refuses_are_400(
    client: httpx.Client, method: str, path: str, kwargs: dict[str, Any], names: str
) -> None:
    detail = expect_error(client.request(method, path, **kwargs), 400, "invalid_input")
    assert names in detail.lower()
    assert contents(client) == []


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "names"),
    [
        ("post", "/api/memory/facts", {"json": {**TEA, "confidence": 2}}, "body.confidence"),
        ("post", "/api/memory/facts", {"json": {**TEA, "confidence": True}}, "body.confidence"),
        ("post", "/api/memory/facts", {"json": {**TEA, "confidence": "0.5"}}, "body.confidence"),
        ("post", "/api/memory/facts", {"json": {**TEA, "category": "gossip"}}, "body.category"),
        ("post", "/api/memory/facts", {"json": {"category": "goal"}}, "body.content"),
        ("post", "/api/memory/facts", {"json": {**TEA, "user_id": "bob"}}, "body.user_id"),
        (
            "post",
            "/api/memory/facts",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            "body",
        ),
        ("get", "/api/memory/search", {"params": {"q": ""}}, "query.q"),
        ("get", "/api/memory/search", {"params": {"q": "x", "limit": 0}}, "query.limit"),
        (
            "get",
            "/api/memory/search",
            {"params": {"q": "x", "category": "gossip"}},
            "query.category",
        ),
        ("get", "/api/memory/export", {"params": {"format": "pdf"}}, "query.format"),
        ("patch", "/api/memory/facts/fact_0123456789abcdef", {"json": {}}, "nothing to change"),
    ],
    ids=[
        "confidence",
        "confidence-bool",
        "confidence-text",
        "category",
        "no-content",
        "user-in-body",
        "broken-json",
        "empty-q",
        "limit",
        "category-filter",
        "format",
        "empty-patch",
    ],
)
def test_requests_off_the_schema_are_422(
    client: httpx.Client, method: str, path: str, kwargs: dict[str, Any], names: str
) -> None:
    detail = expect_error(client.request(method, path, **kwargs), 422, "validation_error")
    assert names in detail
    assert contents(client) == []


def test_unknown_route_and_method_answer_in_the_error_shape(client: httpx.Client) -> None:
    expect_error(client.get("/api/memory/nothing-here"), 404, "not_found")
    wrong = client.put("/api/memory")
    expect_error(wrong, 405, "method_not_allowed")
    assert wrong.headers["allow"] == "DELETE, GET"
    post_only = client.get("/api/memory/import")
    expect_error(post_only, 405, "method_not_allowed")
    assert post_only.headers["allow"] == "POST"


# -- search, buckets -------------------------------------------------------------------------------


def test_search_finds_facts_of_the_requested_bucket_only(client: httpx.Client) -> None:
    add(client, content="Prefers green tea", category="preference")
    add(client, content="Keeps bees on the roof", category="knowledge")
    add(client, "researcher", content="Cites tea trade papers", category="knowledge")

    found = client.get("/api/memory/search", params={"q": "tea"}).json()
    assert found["query"] == "tea"
    assert [r["content"] for r in found["results"]] == ["Prefers green tea"]
    assert all("score" in r for r in found["results"])

    scoped = client.get("/api/memory/search", params={"q": "tea", "agent_name": "researcher"})
    assert [r["content"] for r in scoped.json()["results"]] == ["Cites tea trade papers"]

    filtered = client.get("/api/memory/search", params={"q": "tea", "category": "knowledge"})
    assert filtered.json()["results"] == []
    limited = client.get("/api/memory/search", params={"q": "bees OR tea", "limit": 1})
    assert len(limited.json()["results"]) == 1


def test_status_lists_agent_buckets_and_supported_operations(
    client: httpx.Client, isolated_environment: Path
) -> None:
    add(client, "researcher", content="Reads arXiv daily")
    agent_folder = isolated_environment / "agents" / "writer"
    agent_folder.mkdir(parents=True)
    (agent_folder / "config.yaml").write_text("name: writer\n")

    status = client.get("/api/memory/status").json()
    assert status["agents"] == ["researcher", "writer"]
    assert status["backend"] == "DeerMemMemoryManager"
    assert (status["enabled"], status["ready"], status["user"]) == (True, True, "default")
    assert status["auth_mode"] == "none"
    assert all(status["supports"].values())
    assert contents(client, "researcher") == ["Reads arXiv daily"]
    assert contents(client) == []


# -- history, revert, clear ----------------------------------------------------------------------


def test_a_deleted_fact_comes_back_by_reverting_its_change(client: httpx.Client) -> None:
    fact = add(client)
    client.delete(f"/api/memory/facts/{fact['id']}")
    changes = client.get("/api/memory/history").json()["changes"]
    assert [c["reason"] for c in changes] == ["delete_fact", "create_fact"]

    undo = client.post(f"/api/memory/history/{changes[0]['change_id']}/revert")
    assert undo.status_code == 200, undo.text
    assert undo.json()["reverts"] == changes[0]["change_id"]
    assert contents(client) == [TEA["content"]]
    again = client.post(f"/api/memory/history/{changes[0]['change_id']}/revert")
    assert "already reverted" in expect_error(again, 400, "invalid_input")
    assert len(client.get("/api/memory/history", params={"limit": 2}).json()["changes"]) == 2


def test_clearing_a_bucket_or_everything_is_revertible(client: httpx.Client) -> None:
    add(client)
    add(client, "researcher", content="Reads arXiv daily")

    cleared = client.delete("/api/memory", params={"agent_name": "researcher"})
    assert cleared.status_code == 200
    assert cleared.json()["facts"] == []
    assert contents(client) == [TEA["content"]]

    client.delete("/api/memory")
    assert contents(client) == []
    assert contents(client, "researcher") == []
    newest = client.get("/api/memory/history").json()["changes"][0]
    assert newest["reason"].startswith("clear_memory")
    client.post(f"/api/memory/history/{newest['change_id']}/revert")
    assert contents(client) == [TEA["content"]]


# -- export, import --------------------------------------------------------------------------------


def test_json_export_imports_back_as_body_or_as_uploaded_file(client: httpx.Client) -> None:
    add(client)
    add(client, content="Lives in Lisbon")
    exported = client.get("/api/memory/export")
    assert exported.status_code == 200
    assert "attachment" in exported.headers["content-disposition"]
    document = exported.json()
    assert len(document["facts"]) == 2

    client.delete("/api/memory")
    imported = client.post("/api/memory/import", json=document)
    assert imported.status_code == 200, imported.text
    assert contents(client) == ["Lives in Lisbon", TEA["content"]]

    client.delete("/api/memory")
    upload = {"file": ("memory.json", json.dumps(document).encode(), "application/json")}
    assert client.post("/api/memory/import", files=upload).status_code == 200
    assert contents(client) == ["Lives in Lisbon", TEA["content"]]


def test_markdown_export_is_a_zip_that_imports_back(client: httpx.Client) -> None:
    fact = add(client, "researcher")
    exported = client.get(
        "/api/memory/export", params={"format": "markdown", "agent_name": "researcher"}
    )
    assert exported.status_code == 200
    assert exported.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(exported.content)) as archive:
        names = archive.namelist()
        assert sorted(names) == ["facts/" + fact["id"] + ".md", "memory.json"]
        assert TEA["content"] in archive.read(f"facts/{fact['id']}.md").decode()

    client.delete("/api/memory")
    upload = {"file": ("memory.zip", exported.content, "application/zip")}
    imported = client.post("/api/memory/import", files=upload, params={"agent_name": "researcher"})
    assert imported.status_code == 200, imported.text
    assert contents(client, "researcher") == [TEA["content"]]
    assert contents(client) == []


def zip_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("payload", "names"),
    [
        (zip_of({"memory.json": b"{}", "../../escape.md": b"x"}), "unexpected file"),
        (zip_of({"memory.json\n": b"{}", "facts/x.md\n": b"x"}), "unexpected file"),
        (zip_of({"facts/fact_0123456789abcdef.md": b"x"}), "no memory.json"),
        (
            zip_of(
                {
                    "memory.json": b'{"version": "2.0"}',
                    "facts/fact_0123456789abcdef.md": b"no front matter",
                }
            ),
            "fact",
        ),
        (b"PK\x03\x04 truncated", "not a zip"),
        (b"\x00\x01 neither json nor zip", "not json"),
        (b"[1, 2]", "json object"),
    ],
    ids=["traversal", "newline", "no-manifest", "bad-fact", "broken-zip", "garbage", "array"],
)
def test_bad_uploads_are_400_and_change_nothing(
    client: httpx.Client, payload: bytes, names: str
) -> None:
    add(client)
    response = client.post("/api/memory/import", files={"file": ("upload", payload)})
    assert names in expect_error(response, 400, "invalid_input").lower()
    assert contents(client) == [TEA["content"]]
    assert not (Path.cwd() / "escape.md").exists()


def test_import_needs_a_file_field_a_known_type_and_a_sane_size(client: httpx.Client) -> None:
    wrong_field = client.post("/api/memory/import", files={"document": ("m.json", b"{}")})
    assert "'file'" in expect_error(wrong_field, 400, "invalid_input")
    text = client.post("/api/memory/import", content=b"{}", headers={"content-type": "text/plain"})
    expect_error(text, 415, "unsupported_media_type")
    huge = client.post(
        "/api/memory/import",
        content=b" " * (16 * 1024 * 1024 + 1),
        headers={"content-type": "application/json"},
    )
    expect_error(huge, 413, "too_large")


def test_a_chunked_upload_over_the_limit_is_refused_before_it_is_parsed(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a Content-Length, parsing the form would spool every byte to disk first."""
    parsed: list[int] = []
    original = formparsers.MultiPartParser.parse

    async def counting(self: formparsers.MultiPartParser) -> Any:
        parsed.append(1)
        return await original(self)

    monkeypatch.setattr(formparsers.MultiPartParser, "parse", counting)
    head = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="m.zip"\r\n'
        b"Content-Type: application/zip\r\n\r\n"
    )

    def chunks() -> Iterator[bytes]:  # a generator: httpx sends it chunked, with no length
        yield head
        for _ in range(40):  # 40 MiB, more than twice the limit
            yield b"\0" * (1024 * 1024)
        yield b"\r\n--b--\r\n"

    response = client.post(
        "/api/memory/import",
        content=chunks(),
        headers={"content-type": "multipart/form-data; boundary=b"},
    )
    expect_error(response, 413, "too_large")
    assert parsed == []
    assert client.get("/api/memory").json()["revision"] == 0
    small = client.post("/api/memory/import", files={"file": ("m.json", b'{"facts": []}')})
    assert small.status_code == 200, small.text
    assert parsed == [1]


# -- concurrency -----------------------------------------------------------------------------------


def test_concurrent_writers_lose_nothing(client: httpx.Client, deermem: LiveServer) -> None:
    def create(i: int) -> int:
        fact = {"content": f"Fact number {i} about topic {i * 7}", "category": "knowledge"}
        return httpx.post(deermem.url("/api/memory/facts"), json=fact, timeout=60).status_code

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(create, range(40)))
    assert statuses == [201] * 40
    assert len(contents(client)) == 40


def test_concurrent_edits_of_one_fact_end_in_one_of_them(
    client: httpx.Client, deermem: LiveServer
) -> None:
    fact = add(client)

    def edit(i: int) -> int:
        body = {"content": f"Version {i} of the preference"}
        url = deermem.url(f"/api/memory/facts/{fact['id']}")
        return httpx.patch(url, json=body, timeout=60).status_code

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(edit, range(16)))
    assert set(statuses) <= {200, 409}
    assert 200 in statuses
    final = contents(client)
    assert len(final) == 1
    assert final[0].startswith("Version ")


# -- one fact --------------------------------------------------------------------------------------


def test_one_fact_is_read_by_id(client: httpx.Client) -> None:
    created = add(client)
    add(client, agent="coder", content="Writes Rust", category="knowledge", confidence=0.8)

    response = client.get(f"/api/memory/facts/{created['id']}")

    assert response.status_code == 200, response.text
    document = client.get("/api/memory").json()
    assert response.json() == created | {"revision": document["revision"]}
    assert response.json() == document["facts"][0] | {"revision": document["revision"]}
    coder = client.get("/api/memory", params={"agent_name": "coder"}).json()["facts"][0]
    other_bucket = client.get(f"/api/memory/facts/{coder['id']}")
    expect_error(other_bucket, 404, "fact_not_found")
    assert client.get(
        f"/api/memory/facts/{coder['id']}", params={"agent_name": "coder"}
    ).json() == coder | {"revision": document["revision"]}


def test_reading_a_missing_fact_is_a_typed_404(client: httpx.Client) -> None:
    detail = expect_error(client.get("/api/memory/facts/fact_" + "0" * 32), 404, "fact_not_found")
    assert "fact_" + "0" * 32 in detail
    expect_error(
        client.get("/api/memory/facts/fact_x", params={"agent_name": "../x"}), 400, "invalid_input"
    )


# -- summaries -------------------------------------------------------------------------------------


def summary_url(part: str = "user", section: str = "workContext") -> str:
    return f"/api/memory/summaries/{part}/{section}"


def test_a_summary_section_is_edited_guarded_and_revertible(client: httpx.Client) -> None:
    add(client, "coder", content="Writes Rust")
    revision = client.get("/api/memory").json()["revision"]

    response = client.put(
        summary_url(),
        json={"text": "Data engineer on the logistics platform"},
        params={"agent_name": "coder", "expected_revision": revision},
    )

    assert response.status_code == 200, response.text
    document = response.json()
    assert document["user"]["workContext"]["summary"] == "Data engineer on the logistics platform"
    assert document["revision"] == revision + 1
    assert [f["content"] for f in document["facts"]] == ["Writes Rust"], "the bucket asked for"
    assert client.get("/api/memory").json()["user"]["workContext"]["summary"] == (
        "Data engineer on the logistics platform"
    )
    stale = client.put(
        summary_url(), json={"text": "Overwrites"}, params={"expected_revision": revision}
    )
    expect_error(stale, 409, "conflict")
    assert client.get("/api/memory").json()["user"]["workContext"]["summary"] == (
        "Data engineer on the logistics platform"
    )

    change = client.get("/api/memory/history").json()["changes"][0]
    assert change["reason"] == "update_summary user.workContext"
    reverted = client.post(f"/api/memory/history/{change['change_id']}/revert")
    assert reverted.status_code == 200, reverted.text
    assert client.get("/api/memory").json()["user"]["workContext"]["summary"] == ""
    assert client.put(summary_url("history", "recentMonths"), json={"text": ""}).status_code == 200


@pytest.mark.parametrize(
    ("url", "body", "status", "code"),
    [
        (summary_url("user", "recentMonths"), {"text": "x y"}, 400, "invalid_input"),
        (summary_url("users", "workContext"), {"text": "x y"}, 422, "validation_error"),
        (summary_url("user", "hobbies"), {"text": "x y"}, 422, "validation_error"),
        (summary_url(), {"text": "api_key=sk-proj-4fG7hK2mN9pQ3rS8tV1wX6yZ"}, 400, "invalid_input"),
        (summary_url(), {"text": "bell \u0007 here"}, 400, "invalid_input"),
        (summary_url(), {"text": "x" * 10_001}, 422, "validation_error"),
        (summary_url(), {"summary": "x y"}, 422, "validation_error"),
    ],
)
def test_bad_summary_edits_are_refused_and_change_nothing(
    client: httpx.Client, url: str, body: dict[str, Any], status: int, code: str
) -> None:
    # A stored memory: an empty one is made up anew, with the time of each read.
    assert client.put(summary_url(), json={"text": "Data engineer"}).status_code == 200
    before = client.get("/api/memory").json()
    detail = expect_error(client.put(url, json=body), status, code)
    assert "4fG7hK2mN9pQ3rS8" not in detail
    assert client.get("/api/memory").json() == before


def test_the_summary_route_names_match_the_contract() -> None:
    assert get_args(SummaryPart) == tuple(SUMMARY_SECTIONS)
    assert get_args(SummarySection) == sum(SUMMARY_SECTIONS.values(), ())


def test_summary_editing_is_501_on_a_backend_without_it(serve: Serve, tmp_path: Path) -> None:
    server = serve(app_config(tmp_path, manager_class="noop"))
    with httpx.Client(base_url=server.base_url) as http:
        expect_error(http.put(summary_url(), json={"text": "x y"}), 501, "unsupported")
        assert http.get("/api/memory/status").json()["supports"]["update_summary"] is False
