"""`expected_revision` on PATCH and DELETE of a fact: what the page sends so that its edit of a
stale view is refused (409) instead of overwriting another writer's change."""

from __future__ import annotations

import pytest

from tests.gateway_web.harness import Gateway


def revision(gateway: Gateway) -> int:
    value: int = gateway.http.get("/api/memory").json()["revision"]
    return value


@pytest.mark.parametrize("method", ["PATCH", "DELETE"])
def test_a_write_based_on_a_stale_revision_is_refused(gateway: Gateway, method: str) -> None:
    fact = gateway.add_fact("Prefers tea")
    seen = revision(gateway)
    gateway.add_fact("Owns a cat", agent="coder")  # another bucket: still the user's revision

    answer = gateway.http.request(
        method,
        f"/api/memory/facts/{fact['id']}",
        params={"expected_revision": seen},
        json={"content": "Prefers coffee"} if method == "PATCH" else None,
    )
    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "conflict"
    assert gateway.contents() == {"Prefers tea"}
    assert revision(gateway) == seen + 1


def test_a_write_based_on_the_current_revision_goes_through(gateway: Gateway) -> None:
    fact = gateway.add_fact("Prefers tea")
    patched = gateway.http.patch(
        f"/api/memory/facts/{fact['id']}",
        params={"expected_revision": revision(gateway)},
        json={"content": "Prefers coffee"},
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["content"] == "Prefers coffee"

    deleted = gateway.http.delete(
        f"/api/memory/facts/{fact['id']}", params={"expected_revision": revision(gateway)}
    )
    assert deleted.status_code == 200, deleted.text
    assert gateway.contents() == set()


@pytest.mark.parametrize("bad", ["-1", "three", "1.5"])
def test_a_malformed_revision_is_a_validation_error(gateway: Gateway, bad: str) -> None:
    fact = gateway.add_fact("Prefers tea")
    answer = gateway.http.delete(
        f"/api/memory/facts/{fact['id']}", params={"expected_revision": bad}
    )
    assert answer.status_code == 422, answer.text
    assert "expected_revision" in answer.json()["detail"]
    assert gateway.contents() == {"Prefers tea"}
