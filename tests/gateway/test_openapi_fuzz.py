"""Schemathesis fuzzes every route of the OpenAPI document against a live gateway over DeerMem.

No input may cause a 500, and every answer must match what the document promises (status codes,
content types, response schemas). Token auth is on, so the auth checks run too; chat turns run
the lead agent with a scripted model. Hypothesis then sends what the document does not describe:
import documents with any value in any place (a refused one must change nothing), and fact texts
with control and bidirectional characters, BOMs and lengths around the limit (each is stored or
refused with a reason, never a 500).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deerflow.config import AppConfig
from deerflow.gateway.app import create_app
from deerflow.gateway.tokens import TokenStore, tokens_path
from tests.gateway.conftest import app_config
from tests.gateway.live import LiveServer
from tests.harness.scripted_model import USE

schema = schemathesis.openapi.from_dict(create_app(AppConfig()).openapi())


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    root = tmp_path_factory.mktemp("fuzz")
    _, token = TokenStore(tokens_path(root)).add("fuzzer")
    # A scripted model, so that chat turns run (no model at all would be a correct 501).
    models = [{"name": "default", "use": USE}]
    config = app_config(root, auth={"mode": "token"}, models=models)
    with LiveServer(create_app(config, home=root)) as server:
        yield server, token


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_input_breaks_the_api(case: Any, fuzzed: tuple[LiveServer, str]) -> None:
    server, token = fuzzed
    case.call_and_validate(
        base_url=server.base_url,
        headers={"Authorization": f"Bearer {token}"},
        # Schema-valid values the backend refuses (an agent name DeerMem does not allow, an
        # unknown change id) are a correct 400; unknown query parameters are ignored by
        # design; and the token added here would undo the negative cases' missing header.
        excluded_checks=[
            schemathesis.checks.positive_data_acceptance,
            schemathesis.checks.negative_data_rejection,
        ],
    )


def test_the_document_has_examples_for_bodies_and_errors() -> None:
    document = create_app(AppConfig()).openapi()
    create = document["paths"]["/api/memory/facts"]["post"]
    assert "examples" in document["components"]["schemas"]["FactCreate"]
    assert create["responses"]["409"]["content"]["application/json"]["example"]["error"]
    operations = [op for path in document["paths"].values() for op in path.values()]
    assert all(op.get("summary") for op in operations)


# -- beyond the schema: documents and texts the schema does not describe ---------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
_SECTION_NAMES = st.sampled_from(["workContext", "topOfMind", "recentMonths", "summary", ""])
# Import documents close to a real one, with any value in any place: the shapes a typo makes.
_DOCUMENTS = (
    st.fixed_dictionaries(
        {},
        optional={
            "version": _JSON,
            "revision": _JSON,
            "user": _JSON | st.dictionaries(_SECTION_NAMES, _JSON, max_size=3),
            "history": _JSON | st.dictionaries(_SECTION_NAMES, _JSON, max_size=3),
            "facts": _JSON
            | st.lists(
                st.dictionaries(
                    st.sampled_from(["content", "category", "confidence", "id"]), _JSON
                ),
                max_size=3,
            ),
        },
    )
    | _JSON
)
# Text as people and programs paste it: controls, bidi overrides, BOMs, surrogates, long runs.
_TEXT = st.text(
    st.characters(codec=None, blacklist_categories=())
    | st.sampled_from(["\u202e", "\ufeff", "\u2066", "\r", "\x00"]),
    max_size=40,
) | st.builds(lambda n: "x" * n, st.integers(9_990, 10_010))


def _memory(server: LiveServer, headers: dict[str, str]) -> Any:
    """What the memory holds (an empty memory's times are the time of the read)."""
    document = httpx.get(server.url("/api/memory"), headers=headers).json()
    summaries = {
        part: {name: section["summary"] for name, section in document[part].items()}
        for part in ("user", "history")
    }
    return document["revision"], summaries, document["facts"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(document=_DOCUMENTS)
def test_a_refused_import_changes_nothing(document: Any, fuzzed: tuple[LiveServer, str]) -> None:
    server, token = fuzzed
    headers = {"Authorization": f"Bearer {token}"}
    before = _memory(server, headers)
    answered = httpx.post(
        server.url("/api/memory/import"),
        content=json.dumps(document),
        headers={**headers, "Content-Type": "application/json"},
    )
    assert answered.status_code in (200, 400, 409), answered.text
    if answered.status_code != 200:
        assert _memory(server, headers) == before


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(content=_TEXT, category=st.sampled_from(["context", "goal"]), confidence=st.floats(0, 1))
def test_any_text_is_stored_or_refused_with_a_reason(
    content: str, category: str, confidence: float, fuzzed: tuple[LiveServer, str]
) -> None:
    server, token = fuzzed
    headers = {"Authorization": f"Bearer {token}"}
    body = {"content": content, "category": category, "confidence": confidence}
    created = httpx.post(server.url("/api/memory/facts"), json=body, headers=headers)
    assert created.status_code in (200, 201, 400, 409, 422), created.text
    if created.status_code != 201:
        assert created.json()["detail"]
        return
    fact_id = created.json()["id"]
    patched = httpx.patch(
        server.url(f"/api/memory/facts/{fact_id}"), json={"content": content[::-1]}, headers=headers
    )
    assert patched.status_code in (200, 400, 404, 409, 422), patched.text
    deleted = httpx.delete(server.url(f"/api/memory/facts/{fact_id}"), headers=headers)
    assert deleted.status_code in (200, 404), deleted.text
