"""Who may use the gateway: token store and CLI, 401s, user isolation, host and origin checks."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from deerflow.cli.app import app as cli
from deerflow.config import AppConfig
from deerflow.gateway.server import check_bind
from deerflow.gateway.tokens import TokenStore, tokens_path
from tests.gateway.conftest import Serve, app_config
from tests.gateway.live import LiveServer
from tests.gateway.test_memory_api import expect_error


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# -- the token store and its CLI -------------------------------------------------------------


def test_tokens_are_stored_hashed_and_map_to_their_user(isolated_environment: Path) -> None:
    store = TokenStore(tokens_path(isolated_environment))
    alice, alice_token = store.add("alice", "laptop")
    _, bob_token = store.add("bob")
    text = tokens_path(isolated_environment).read_text()
    assert alice_token not in text
    assert bob_token not in text
    assert stat.S_IMODE(tokens_path(isolated_environment).stat().st_mode) == 0o600
    assert store.user_for(alice_token) == "alice"
    assert store.user_for(bob_token) == "bob"
    assert store.user_for(alice_token + "x") is None
    assert [(r.user_id, r.label) for r in store.records()] == [("alice", "laptop"), ("bob", "")]

    # Another process (the CLI) revokes; this store sees it at the next lookup.
    TokenStore(tokens_path(isolated_environment)).revoke(alice.id)
    assert store.user_for(alice_token) is None
    assert store.user_for(bob_token) == "bob"


@pytest.mark.parametrize(
    "user", ["", "has space", "../etc", "-leading", "x" * 129, "alice\n", "alice\r\n"]
)
def test_a_token_needs_a_plain_user_id(isolated_environment: Path, user: str) -> None:
    with pytest.raises(ValueError, match="user id"):
        TokenStore(tokens_path(isolated_environment)).add(user)


def test_a_damaged_token_file_is_an_error_naming_it(isolated_environment: Path) -> None:
    path = tokens_path(isolated_environment)
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 1, "tokens": [{"id": 1}]}')
    with pytest.raises(ValueError, match=r"tokens\.json: not a token file"):
        TokenStore(path).user_for("dft_anything")


def test_cli_prints_a_token_once_lists_and_revokes(isolated_environment: Path) -> None:
    runner = CliRunner()
    added = runner.invoke(cli, ["auth", "add-token", "--user", "alice", "--json"])
    assert added.exit_code == 0, added.output
    issued = json.loads(added.output)
    assert issued["token"].startswith("dft_")
    assert TokenStore(tokens_path(isolated_environment)).user_for(issued["token"]) == "alice"

    plain = runner.invoke(cli, ["auth", "add-token", "--user", "bob", "--label", "ci"])
    assert plain.exit_code == 0
    assert "not shown again" in plain.output

    listed = runner.invoke(cli, ["auth", "list", "--json"])
    assert issued["token"] not in listed.output
    rows = json.loads(listed.output)
    assert [(r["user_id"], r["label"]) for r in rows] == [("alice", ""), ("bob", "ci")]
    assert "sha256" not in rows[0]
    table = runner.invoke(cli, ["auth", "list"], env={"COLUMNS": "200"})
    assert "alice" in table.output
    assert issued["id"] in table.output

    revoked = runner.invoke(cli, ["auth", "revoke", issued["id"]])
    assert revoked.exit_code == 0
    assert TokenStore(tokens_path(isolated_environment)).user_for(issued["token"]) is None
    again = runner.invoke(cli, ["auth", "revoke", issued["id"], "--json"])
    assert again.exit_code == 2
    assert json.loads(again.output)["error"] == "invalid_input"
    bad = runner.invoke(cli, ["auth", "add-token", "--user", "no spaces please"])
    assert bad.exit_code == 2


# -- token mode over HTTP ------------------------------------------------------------------------


@pytest.fixture
def tokens(isolated_environment: Path) -> dict[str, str]:
    store = TokenStore(tokens_path(isolated_environment))
    return {user: store.add(user)[1] for user in ("alice", "bob")}


@pytest.fixture
def token_server(serve: Serve, tmp_path: Path, tokens: dict[str, str]) -> LiveServer:
    return serve(app_config(tmp_path, auth={"mode": "token"}))


def test_no_or_unknown_token_is_401(token_server: LiveServer, tokens: dict[str, str]) -> None:
    for headers in ({}, bearer("dft_guessed"), {"Authorization": f"Basic {tokens['alice']}"}):
        response = httpx.get(token_server.url("/api/memory"), headers=headers)
        expect_error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
    assert httpx.get(token_server.url("/healthz")).status_code == 200
    assert httpx.get(token_server.url("/readyz")).status_code == 200
    assert httpx.get(token_server.url("/openapi.json")).status_code == 200


def test_a_revoked_token_is_refused_without_a_restart(
    token_server: LiveServer, tokens: dict[str, str], isolated_environment: Path
) -> None:
    url = token_server.url("/api/memory/status")
    status = httpx.get(url, headers=bearer(tokens["alice"]))
    assert status.json()["user"] == "alice"
    assert status.json()["auth_mode"] == "token"
    store = TokenStore(tokens_path(isolated_environment))
    record = next(r for r in store.records() if r.user_id == "alice")
    store.revoke(record.id)
    expect_error(httpx.get(url, headers=bearer(tokens["alice"])), 401, "unauthorized")
    assert httpx.get(url, headers=bearer(tokens["bob"])).status_code == 200


def test_one_user_can_never_reach_another_users_memory(
    token_server: LiveServer, tokens: dict[str, str]
) -> None:
    bob = httpx.Client(base_url=token_server.base_url, headers=bearer(tokens["bob"]))
    alice = httpx.Client(base_url=token_server.base_url, headers=bearer(tokens["alice"]))
    secret = {"content": "Bob's surprise party is on Friday", "category": "goal"}
    bob_ids = [
        bob.post("/api/memory/facts", json=secret, params=params).json()["id"]
        for params in ({}, {"agent_name": "researcher"})
    ]
    bob_changes = [c["change_id"] for c in bob.get("/api/memory/history").json()["changes"]]
    bob_before = {
        agent: bob.get("/api/memory", params={"agent_name": agent} if agent else {}).json()
        for agent in (None, "researcher")
    }

    impersonation = [
        {"user_id": "bob"},
        {"user": "bob"},
        {"agent_name": "researcher", "user_id": "bob"},
        {"agent_name": "bob"},
    ]
    headers = {"X-User-Id": "bob", "X-Forwarded-User": "bob"}
    for params in impersonation:
        document = alice.get("/api/memory", params=params, headers=headers).json()
        assert document["facts"] == []
        found = alice.get("/api/memory/search", params={"q": "surprise party", **params})
        assert found.json()["results"] == []
        assert alice.get("/api/memory/history", params=params).json()["changes"] == []
        exported = alice.get("/api/memory/export", params=params).json()
        assert exported["facts"] == []
        for fact_id in bob_ids:
            path = f"/api/memory/facts/{fact_id}"
            changed = alice.patch(path, params=params, json={"content": "hacked"}, headers=headers)
            expect_error(changed, 404, "fact_not_found")
            expect_error(alice.delete(path, params=params), 404, "fact_not_found")
        for change_id in bob_changes:
            undo = alice.post(f"/api/memory/history/{change_id}/revert", params=params)
            expect_error(undo, 400, "invalid_input")
    expect_error(
        alice.post("/api/memory/facts", json={**secret, "user_id": "bob"}), 422, "validation_error"
    )
    expect_error(alice.get("/api/memory", params={"agent_name": "../bob"}), 400, "invalid_input")
    traversal = alice.delete("/api/memory/facts/..%2F..%2Fbob%2Fagents%2F__default__")
    assert traversal.status_code in {400, 404, 405}  # never reaches a file of bob
    assert alice.delete("/api/memory").status_code == 200
    assert alice.delete("/api/memory", params={"agent_name": "researcher"}).status_code == 200
    assert alice.post("/api/memory/import", json={"facts": [secret]}).status_code == 200

    for agent, before in bob_before.items():
        after = bob.get("/api/memory", params={"agent_name": agent} if agent else {}).json()
        assert after == before
    assert [
        r["id"] for r in bob.get("/api/memory/search", params={"q": "party"}).json()["results"]
    ] == bob_ids[:1]
    assert [c["change_id"] for c in bob.get("/api/memory/history").json()["changes"]] == bob_changes


# -- host and origin -----------------------------------------------------------------------------


def test_without_auth_a_foreign_host_header_is_403(deermem: LiveServer) -> None:
    """A page whose domain an attacker re-points at 127.0.0.1 (DNS rebinding) reads nothing."""
    for host in ("evil.example", "evil.example:8000", "10.0.0.5"):
        response = httpx.get(deermem.url("/api/memory"), headers={"Host": host})
        expect_error(response, 403, "forbidden_host")
    for host in ("localhost", f"127.0.0.1:{deermem.port}", "[::1]:80"):
        assert httpx.get(deermem.url("/api/memory"), headers={"Host": host}).status_code == 200


def test_a_write_from_another_origin_is_403(deermem: LiveServer) -> None:
    fact = {"content": "Planted by another site"}
    for origin in ("http://evil.example", "null", f"http://localhost:{deermem.port}"):
        response = httpx.post(
            deermem.url("/api/memory/facts"), json=fact, headers={"Origin": origin}
        )
        expect_error(response, 403, "cross_origin")
    own = httpx.post(
        deermem.url("/api/memory/facts"), json=fact, headers={"Origin": deermem.base_url}
    )
    assert own.status_code == 201
    reading = httpx.get(deermem.url("/api/memory"), headers={"Origin": "http://evil.example"})
    assert reading.status_code == 200


def test_token_mode_checks_origin_but_not_host(
    token_server: LiveServer, tokens: dict[str, str]
) -> None:
    headers = {**bearer(tokens["alice"]), "Host": "memory.example.com"}
    assert httpx.get(token_server.url("/api/memory"), headers=headers).status_code == 200
    evil = {**headers, "Origin": "http://evil.example"}
    response = httpx.post(
        token_server.url("/api/memory/facts"), json={"content": "x"}, headers=evil
    )
    expect_error(response, 403, "cross_origin")


# -- where the server may listen -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "mode", "allow_remote", "allowed"),
    [
        ("127.0.0.1", "none", False, True),
        ("::1", "none", False, True),
        ("localhost", "none", False, True),
        ("0.0.0.0", "none", False, False),
        ("192.168.1.20", "none", False, False),
        ("myhost.lan", "none", False, False),
        ("0.0.0.0", "none", True, True),
        ("0.0.0.0", "token", False, True),
    ],
)
def test_without_auth_only_loopback_unless_told(
    host: str, mode: str, allow_remote: bool, allowed: bool
) -> None:
    config = AppConfig.model_validate(
        {"server": {"host": host, "allow_remote": allow_remote}, "auth": {"mode": mode}}
    )
    if allowed:
        check_bind(config)
    else:
        with pytest.raises(ValueError, match="--allow-remote"):
            check_bind(config)


def test_serve_refuses_a_public_address_without_auth() -> None:
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 2
    assert "refusing to listen on '0.0.0.0'" in result.output
