"""Three `deerflow serve` replicas over one memory, one of them killed with SIGKILL.

Mixed traffic for three users goes through all replicas (fact creates, reads, edits, deletes;
chat turns that queue extractions; reads and searches). Then one replica is killed while the
conversations it queued are not yet due, and the survivors must show that nothing acknowledged
was lost, that every queued conversation was extracted once, that a stale `expected_revision` is
refused by every replica, and that no user ever reads another's memory.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from httpx import Response

from tests.gateway.replicas import (
    USERS,
    Fleet,
    Outcome,
    Written,
    chat,
    failures,
    issue_tokens,
    mixed_load,
    replica_config,
    run,
    running_replicas,
    shared_memory,
)
from tests.gateway.test_memory_api import expect_error
from tests.harness.scripted_model import marker_fact

ENGINES = ["files", "postgres"]
# Long enough that the conversations queued just before the kill are still waiting at the kill.
DEBOUNCE_SECONDS = 6.0
# The extractions left after the load and the kill are done this long after they are due.
EXTRACTION_WAIT_SECONDS = 40.0


@pytest.fixture(params=ENGINES)
def backend_config(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """One memory for all replicas: a storage_path on this host, or a PostgreSQL schema."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    return shared_memory(request.param, tmp_path / "store", url)


def answer(fleet: Fleet, user: str, replica: int, method: str, path: str, **kw: Any) -> Response:
    """The answer of a replica that must answer."""
    response = fleet.request(user, replica, method, path, **kw)
    assert response is not None, f"replica {replica} did not answer {method} {path}"
    return response


def get(fleet: Fleet, user: str, replica: int, path: str, **params: str) -> Any:
    """The JSON of a GET that must succeed."""
    response = answer(fleet, user, replica, "GET", path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def memory(fleet: Fleet, user: str, replica: int) -> dict[str, Any]:
    document: dict[str, Any] = get(fleet, user, replica, "/api/memory")
    return document


def refuse_stale_revision(fleet: Fleet, outcome: Outcome, user: str, tag: str) -> None:
    """A write at revision r succeeds on one replica; every replica then refuses r with 409 and
    writes nothing."""
    for attempt in range(20):
        revision = memory(fleet, user, attempt)["revision"]
        content = f"{user} fresh note {tag}"
        fresh = answer(
            fleet,
            user,
            attempt,
            "POST",
            "/api/memory/facts",
            params={"expected_revision": revision},
            json={"content": content},
        )
        if fresh.status_code == 201:
            outcome.add_fact(Written(user, fresh.json()["id"], content))
            break
        expect_error(fresh, 409, "conflict")  # an extraction moved the revision meanwhile
    else:
        pytest.fail("no write at the current revision succeeded in 20 attempts")
    target = f"/api/memory/facts/{outcome.facts[-1].id}"
    for replica in range(len(fleet.urls)):
        stale = {"expected_revision": revision}
        body = {"content": f"{user} stale note {tag} via {replica}"}
        for method, path in (("POST", "/api/memory/facts"), ("PATCH", target)):
            refused = answer(fleet, user, replica, method, path, params=stale, json=body)
            expect_error(refused, 409, "conflict")


def extracted(fleet: Fleet, outcome: Outcome, deadline: float) -> dict[str, list[str]]:
    """Each user's fact texts once every acknowledged marker is among them (or the deadline)."""
    while True:
        texts = {u: [f["content"] for f in memory(fleet, u, 0)["facts"]] for u in USERS}
        missing = [
            m for u in USERS for m in outcome.markers.get(u, []) if marker_fact(m) not in texts[u]
        ]
        if not missing or time.monotonic() > deadline:
            assert not missing, f"never extracted: {missing}"
            return texts
        time.sleep(0.25)


@pytest.mark.timeout(180)
def test_three_replicas_over_one_memory_lose_nothing_when_one_is_killed(
    tmp_path: Path, isolated_environment: Path, backend_config: dict[str, Any]
) -> None:
    config = replica_config(tmp_path, backend_config, DEBOUNCE_SECONDS)
    tokens = issue_tokens(isolated_environment)
    outcome = Outcome()
    with running_replicas(3, config, isolated_environment) as replicas:
        fleet = Fleet([replica.base_url for replica in replicas], tokens)
        run(mixed_load(fleet, outcome, facts=24, chats=8, reads=16), workers=8)
        assert failures(fleet.calls) == {}, "every request of the load succeeds"
        assert len(fleet.calls) > 200
        for user in USERS:
            refuse_stale_revision(fleet, outcome, user, "before")

        # Conversations queued through the victim, not due for DEBOUNCE_SECONDS: then SIGKILL.
        last = range(100, 104)
        victim_chats = [partial(chat, fleet, outcome, u, n, 0) for u in USERS for n in last]
        run(victim_chats, workers=6)
        replicas[0].kill()
        survivors = Fleet([replica.base_url for replica in replicas[1:]], tokens)
        for user in USERS:
            queued = {f"{user}-{n}" for n in last}
            assert queued <= set(outcome.markers[user]), "every chat turn was acknowledged"
            stored = {f["content"] for f in memory(survivors, user, 0)["facts"]}
            assert not stored & {marker_fact(m) for m in queued}, "still queued at the kill"

        for user in USERS:
            refuse_stale_revision(survivors, outcome, user, "after")
        deadline = time.monotonic() + DEBOUNCE_SECONDS + EXTRACTION_WAIT_SECONDS
        texts = extracted(survivors, outcome, deadline)

        for user in USERS:
            check_memory_of(user, survivors, outcome, texts[user])
        survivors.close()
        fleet.close()


def check_memory_of(user: str, survivors: Fleet, outcome: Outcome, texts: list[str]) -> None:
    # Extracted once: delivery is at least once, and a repeated extraction of the same text
    # confirms the stored fact instead of adding a second one.
    markers = outcome.markers[user]
    assert [texts.count(marker_fact(m)) for m in markers] == [1] * len(markers)
    # Every acknowledged write is there as acknowledged, on both survivors alike.
    facts = {f["id"]: f["content"] for f in memory(survivors, user, 0)["facts"]}
    assert {f["id"]: f["content"] for f in memory(survivors, user, 1)["facts"]} == facts
    written = [fact for fact in outcome.facts if fact.user == user]
    kept = {fact.id: fact.content for fact in written if not fact.deleted}
    assert {i: facts.get(i) for i in kept} == kept, "acknowledged writes are all there"
    assert not [f.id for f in written if f.deleted and f.id in facts], "deletes stay"
    assert not [text for text in facts.values() if "stale note" in text]
    # Only this user's memory: every text names the user, and searches find no other's.
    assert all(text.startswith((user, f"Marker {user}-")) for text in facts.values())
    found = get(survivors, user, 1, "/api/memory/search", q="marker", limit="100")
    results = [result["content"] for result in found["results"]]
    assert sorted(results) == sorted(marker_fact(m) for m in markers)
    other = next(f for f in outcome.facts if f.user != user and not f.deleted)
    unseen = answer(survivors, user, 0, "GET", f"/api/memory/facts/{other.id}")
    expect_error(unseen, 404, "fact_not_found")
