"""Conditional writes under concurrency: `expected_revision` is checked in the commit itself.

Clients loop GET → PATCH?expected_revision, each incrementing a counter in a fact's content and
retrying on 409. Were the revision checked before the write rather than in it, two clients could
both be answered 200 for the same increment, and the counter would end below the number of 200s.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from tests.gateway.conftest import Serve, app_config

ROUNDS = 6  # attempts per client: enough for the clients to overlap, bounded for `make test`


def _counter(document: dict[str, object], fact_id: str) -> int:
    facts = document["facts"]
    assert isinstance(facts, list)
    [fact] = [f for f in facts if f["id"] == fact_id]
    return int(fact["content"].removeprefix("Counter at "))


@pytest.mark.parametrize("clients", [4, 8])
def test_concurrent_conditional_increments_lose_nothing(
    serve: Serve, tmp_path: Path, clients: int
) -> None:
    server = serve(app_config(tmp_path))
    with httpx.Client(base_url=server.base_url) as http:
        created = http.post("/api/memory/facts", json={"content": "Counter at 0"})
        assert created.status_code == 201, created.text
    fact_id = created.json()["id"]
    answered: list[int] = []  # one status per PATCH
    start = threading.Barrier(clients)

    def client() -> None:
        with httpx.Client(base_url=server.base_url, timeout=60) as http:
            start.wait()
            for _ in range(ROUNDS):
                document = http.get("/api/memory").json()
                seen = _counter(document, fact_id)
                response = http.patch(
                    f"/api/memory/facts/{fact_id}",
                    params={"expected_revision": document["revision"]},
                    json={"content": f"Counter at {seen + 1}"},
                )
                assert response.status_code in (200, 409), response.text
                answered.append(response.status_code)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(answered) == clients * ROUNDS
    with httpx.Client(base_url=server.base_url) as http:
        final = _counter(http.get("/api/memory").json(), fact_id)
    assert final == answered.count(200)
    assert answered.count(200) >= ROUNDS  # some increments went through


def test_every_write_answer_carries_the_new_revision(serve: Serve, tmp_path: Path) -> None:
    server = serve(app_config(tmp_path))
    with httpx.Client(base_url=server.base_url) as http:
        created = http.post("/api/memory/facts", json={"content": "Drinks tea"}).json()
        assert created["revision"] == 1
        fact = f"/api/memory/facts/{created['id']}"
        patched = http.patch(fact, params={"expected_revision": 1}, json={"confidence": 0.7})
        assert patched.json()["revision"] == 2
        deleted = http.delete(fact, params={"expected_revision": 2}).json()
        assert deleted == {"deleted": created["id"], "revision": 3}
        [change] = http.get("/api/memory/history", params={"limit": 1}).json()["changes"]
        reverted = http.post(
            f"/api/memory/history/{change['change_id']}/revert", params={"expected_revision": 3}
        )
        assert reverted.json()["revision"] == 4
        stale = http.delete("/api/memory", params={"expected_revision": 3})
        assert stale.status_code == 409
        assert http.get("/api/memory").json()["facts"] != []  # the stale clear changed nothing
        cleared = http.delete("/api/memory", params={"expected_revision": 4})
        assert cleared.json()["revision"] == 5
        imported = http.post(
            "/api/memory/import", params={"expected_revision": 5}, json=cleared.json()
        )
        assert imported.status_code == 200, imported.text
        assert imported.json()["revision"] == 5  # the same document: nothing to change
        summary = "/api/memory/summaries/user/workContext"
        stale = http.put(summary, params={"expected_revision": 4}, json={"text": "Writes Go"})
        assert stale.status_code == 409
        assert http.get("/api/memory").json()["user"]["workContext"]["summary"] == ""
        edited = http.put(summary, params={"expected_revision": 5}, json={"text": "Writes Go"})
        assert edited.status_code == 200, edited.text
        assert edited.json()["revision"] == 6
