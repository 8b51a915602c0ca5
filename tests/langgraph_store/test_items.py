"""Items are facts: put creates or updates, get, delete, values that round-trip or are refused."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest
from langgraph.store.base import InvalidNamespaceError

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.errors import DuplicateFactError
from tests.langgraph_store.conftest import CODER, USER, Driven, new_key

SECRET = "my api key is sk-proj-4fG7hK2mN9pQ3rS8tV1wX6yZ0aB5cD"


def test_put_then_get_gives_the_fact_under_the_callers_key(
    store: Driven, manager: DeerMemMemoryManager
) -> None:
    key = new_key()
    store.put(USER, key, {"content": "Prefers pnpm over npm", "category": "preference"})

    item = store.get(USER, key)
    assert item is not None
    assert (item.key, item.namespace) == (key, USER)
    assert item.value["content"] == "Prefers pnpm over npm"
    assert (item.value["category"], item.value["confidence"]) == ("preference", 0.5)
    assert {"createdAt", "updatedAt", "source"} <= set(item.value)
    assert isinstance(item.created_at, datetime)
    assert item.created_at.tzinfo is not None
    # The item is the fact every other DeerFlow tool sees, its id spelling the key's UUID.
    (fact,) = manager.get_memory(user_id="alice")["facts"]
    assert fact["id"] == "fact_" + uuid.UUID(key).hex
    assert fact["content"] == "Prefers pnpm over npm"


def test_put_of_an_existing_key_updates_that_fact_and_keeps_fields_it_does_not_name(
    store: Driven, manager: DeerMemMemoryManager
) -> None:
    key = new_key()
    store.put(USER, key, {"content": "Prefers pnpm", "category": "preference", "confidence": 0.9})
    store.put(USER, key, {"content": "Prefers pnpm, never npm"})

    item = store.get(USER, key)
    assert item is not None
    assert item.value["content"] == "Prefers pnpm, never npm"
    assert (item.value["category"], item.value["confidence"]) == ("preference", 0.9)
    assert len(manager.get_memory(user_id="alice")["facts"]) == 1
    reasons = [change["reason"] for change in manager.get_history(user_id="alice")]
    assert reasons[:2] == ["update_fact", "create_fact"]


def test_a_value_read_back_can_be_written_back_with_a_change(store: Driven) -> None:
    key = new_key()
    store.put(USER, key, {"content": "Works in Lisbon", "category": "context"})
    item = store.get(USER, key)
    assert item is not None

    store.put(USER, key, {**item.value, "content": "Works in Porto", "confidence": 0.8})

    again = store.get(USER, key)
    assert again is not None
    assert (again.value["content"], again.value["confidence"]) == ("Works in Porto", 0.8)


def test_get_of_a_missing_key_or_another_users_namespace_is_none(store: Driven) -> None:
    key = new_key()
    store.put(USER, key, {"content": "Drinks tea"})

    assert store.get(USER, new_key()) is None
    assert store.get(("memories", "bob"), key) is None
    assert store.get(CODER, key) is None


def test_delete_removes_the_fact_and_deleting_a_missing_key_is_harmless(
    store: Driven, manager: DeerMemMemoryManager
) -> None:
    key = new_key()
    store.put(USER, key, {"content": "Drinks tea"})

    store.delete(USER, key)
    store.delete(USER, key)
    store.delete(USER, new_key())

    assert store.get(USER, key) is None
    assert manager.get_memory(user_id="alice")["facts"] == []


def test_the_same_key_in_two_namespaces_is_two_facts(
    store: Driven, manager: DeerMemMemoryManager
) -> None:
    key = new_key()
    store.put(USER, key, {"content": "Drinks tea"})
    store.put(CODER, key, {"content": "Uses vim"})
    store.delete(USER, key)

    item = store.get(CODER, key)
    assert item is not None
    assert item.value["content"] == "Uses vim"
    assert [f["content"] for f in manager.get_memory(user_id="alice", agent_name="coder")["facts"]]
    assert store.get(USER, key) is None


def test_a_fact_written_elsewhere_is_an_item_under_its_uuid_and_its_fact_id(
    store: Driven, manager: DeerMemMemoryManager
) -> None:
    _, fact_id = manager.create_fact("Lives in Lisbon", user_id="alice")
    assert fact_id is not None
    key = str(uuid.UUID(hex=fact_id.removeprefix("fact_")))

    by_uuid, by_id = store.get(USER, key), store.get(USER, fact_id)
    assert by_uuid is not None
    assert by_id == by_uuid
    assert by_uuid.key == key
    store.put(USER, fact_id, {"content": "Lives in Porto"})
    assert manager.get_memory(user_id="alice")["facts"][0]["content"] == "Lives in Porto"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"category": "preference"}, r"needs 'content'"),
        ({"content": {"name": "Ada", "age": 36}}, r"content.*is text, got dict.*schema=str"),
        ({"content": "Drinks tea", "mood": "happy"}, r"'mood'.*a new fact takes only"),
        ({"content": "Drinks tea", "createdAt": "2020-01-01T00:00:00Z"}, r"'createdAt'.*sets"),
        ({"content": "Drinks tea", "id": "fact_00000000"}, r"'id'.*not part of an item's value"),
        ({"content": "Drinks tea", "category": "hobby"}, r"category: 'hobby' is not one of"),
        ({"content": "Drinks tea", "confidence": 2}, r"confidence: must be between 0 and 1"),
        ({"content": "   "}, r"content: must be non-empty text"),
        ({"content": SECRET}, r"secrets are never stored"),
    ],
)
def test_a_value_deerflow_cannot_store_is_refused_and_nothing_is_written(
    store: Driven, manager: DeerMemMemoryManager, value: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        store.put(USER, new_key(), value)
    assert manager.get_memory(user_id="alice")["facts"] == []
    assert manager.get_history(user_id="alice") == []


def test_a_changed_read_only_field_or_an_unknown_one_is_refused_on_update(store: Driven) -> None:
    key = new_key()
    store.put(USER, key, {"content": "Drinks tea"})
    item = store.get(USER, key)
    assert item is not None

    with pytest.raises(ValueError, match=r"'mood'.*not a field DeerFlow Memory stores"):
        store.put(USER, key, {**item.value, "content": "Drinks coffee", "mood": "happy"})
    with pytest.raises(ValueError, match=r"'source'.*kept by the memory backend"):
        store.put(USER, key, {**item.value, "content": "Drinks coffee", "source": "thread-9"})
    unchanged = store.get(USER, key)
    assert unchanged is not None
    assert unchanged.value["content"] == "Drinks tea"


def test_content_another_key_already_holds_is_a_duplicate(store: Driven) -> None:
    first = new_key()
    store.put(USER, first, {"content": "Drinks tea"})

    with pytest.raises(DuplicateFactError) as raised:
        store.put(USER, new_key(), {"content": "drinks tea"})
    assert raised.value.existing_fact_id == "fact_" + uuid.UUID(first).hex


@pytest.mark.parametrize(
    "namespace",
    [
        ("memories",),
        ("docs", "alice"),
        ("memories", "alice", "coder", "extra"),
        ("memories", "alice.smith"),
        ("memories", ""),
        ("langgraph", "alice"),
        (),
    ],
)
def test_a_namespace_outside_the_mapping_is_refused(
    store: Driven, namespace: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, new_key(), {"content": "Drinks tea"})
    with pytest.raises(InvalidNamespaceError):
        store.get(namespace, new_key())


def test_an_agent_name_deermem_refuses_is_a_value_error(store: Driven) -> None:
    with pytest.raises(ValueError, match=r"agent_name: 'c@der' must match"):
        store.put(("memories", "alice", "c@der"), new_key(), {"content": "Drinks tea"})


@pytest.mark.parametrize("key", ["key1", "7D9F5E3A-1B2C-4D5E-8F90-1A2B3C4D5E6F", ""])
def test_a_key_that_is_neither_a_uuid_nor_a_fact_id_is_refused(store: Driven, key: str) -> None:
    with pytest.raises(ValueError, match=r"UUID strings"):
        store.put(USER, key, {"content": "Drinks tea"})
    with pytest.raises(ValueError, match=r"UUID strings"):
        store.get(USER, key)


def test_ttl_is_refused_with_the_reason(store: Driven) -> None:
    assert store.store.supports_ttl is False
    with pytest.raises(NotImplementedError, match="TTL"):
        store.put(USER, new_key(), {"content": "Drinks tea"}, ttl=5)


def test_index_false_is_refused_and_the_content_field_accepted(store: Driven) -> None:
    with pytest.raises(ValueError, match=r"indexes every fact's content"):
        store.put(USER, new_key(), {"content": "Drinks tea"}, index=False)
    key = new_key()
    store.put(USER, key, {"content": "Drinks tea"}, index=["content"])
    assert store.get(USER, key) is not None


def test_undoing_an_update_made_through_the_store_gives_the_item_back(
    store: Driven, manager: DeerMemMemoryManager
) -> None:
    key = new_key()
    store.put(USER, key, {"content": "Works in Lisbon", "category": "context"})
    store.put(USER, key, {"content": "Works in Porto"})

    (update, *_) = manager.get_history(user_id="alice")
    manager.revert_change(update["change_id"], user_id="alice")

    item = store.get(USER, key)
    assert item is not None
    assert item.value["content"] == "Works in Lisbon"
