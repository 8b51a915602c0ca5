"""The store depends on the contract only: the same behaviour over the `inmemory` reference."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from langmem import create_manage_memory_tool, create_search_memory_tool

from deerflow.agents.memory.backends.inmemory import InMemoryMemoryManager
from deerflow.agents.memory.errors import DuplicateFactError
from deerflow.agents.memory.langgraph_store import DeerFlowStore
from tests.langgraph_store.conftest import CODER, USER, Driven, new_key


@pytest.fixture
def reference() -> InMemoryMemoryManager:
    return InMemoryMemoryManager.from_config({})


@pytest.fixture(params=["sync", "async"])
def store(request: pytest.FixtureRequest, reference: InMemoryMemoryManager) -> Driven:
    return Driven(DeerFlowStore(reference), request.param)


def test_items_round_trip_search_and_list_over_the_reference_backend(
    store: Driven, reference: InMemoryMemoryManager
) -> None:
    key, coder = new_key(), new_key()
    store.put(USER, key, {"content": "Prefers pnpm over npm", "category": "preference"})
    store.put(USER, key, {"content": "Prefers pnpm, never npm"})
    store.put(CODER, coder, {"content": "Formats Rust with rustfmt"})

    item = store.get(USER, key)
    assert item is not None
    assert (item.value["content"], item.value["category"]) == (
        "Prefers pnpm, never npm",
        "preference",
    )
    assert [i.key for i in store.search(USER, query="pnpm")] == [key]
    assert {i.key for i in store.search(USER)} == {key, coder}
    assert store.list_namespaces(prefix=USER) == [USER, CODER]
    store.delete(USER, key)
    assert store.get(USER, key) is None
    assert [
        f["id"] for f in reference.get_memory(user_id="alice", agent_name="coder")["facts"]
    ] == ["fact_" + uuid.UUID(coder).hex]


def test_the_reference_backend_refuses_a_taken_id(reference: InMemoryMemoryManager) -> None:
    reference.create_fact_with_id("fact_1234abcd", "Drinks tea", user_id="alice")
    with pytest.raises(DuplicateFactError) as raised:
        reference.create_fact_with_id("fact_1234abcd", "Drinks coffee", user_id="alice")
    assert raised.value.existing_fact_id == "fact_1234abcd"


def test_langmem_over_the_reference_backend(
    reference: InMemoryMemoryManager, tmp_path: Path
) -> None:
    store = DeerFlowStore(reference)
    manage = create_manage_memory_tool(USER, store=store)
    key = manage.invoke({"content": "Uses vim"}).removeprefix("created memory ")
    manage.invoke({"action": "update", "id": key, "content": "Uses neovim"})

    (found,) = json.loads(create_search_memory_tool(USER, store=store).invoke({"query": "neovim"}))
    assert (found["key"], found["value"]["content"]) == (key, "Uses neovim")
