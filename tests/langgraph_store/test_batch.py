"""batch and abatch: order, the backends the store refuses, races, and a free event loop."""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.inmemory import InMemoryMemoryManager
from deerflow.agents.memory.backends.noop.manager import NoopMemoryManager
from deerflow.agents.memory.errors import DuplicateFactError, MemoryUnsupportedError
from deerflow.agents.memory.langgraph_store import DeerFlowStore
from tests.langgraph_store.conftest import CODER, USER, Driven, new_key


def test_batch_answers_each_operation_in_order_and_runs_them_in_order(store: Driven) -> None:
    key, other = new_key(), new_key()
    ops = [
        PutOp(USER, key, {"content": "Drinks tea"}),
        GetOp(USER, key),
        PutOp(CODER, other, {"content": "Uses vim"}),
        SearchOp(USER, None, 10, 0, "tea"),
        ListNamespacesOp((MatchCondition("prefix", USER),), None, 100, 0),
        PutOp(USER, key, None),
        GetOp(USER, key),
    ]

    put, got, _, found, namespaces, deleted, gone = store.batch(ops)

    assert (put, deleted, gone) == (None, None, None)
    assert got.value["content"] == "Drinks tea"
    assert [item.key for item in found] == [key]
    assert namespaces == [USER, CODER]


def test_the_first_failing_operation_stops_the_batch_and_what_ran_before_it_stays(
    store: Driven,
) -> None:
    kept, never = new_key(), new_key()
    ops = [
        PutOp(USER, kept, {"content": "Drinks tea"}),
        PutOp(USER, new_key(), {"content": "Drinks coffee", "category": "hobby"}),
        PutOp(USER, never, {"content": "Uses vim"}),
    ]
    with pytest.raises(ValueError, match="category"):
        store.batch(ops)
    assert store.get(USER, kept) is not None
    assert store.get(USER, never) is None


class WithoutExtensions(InMemoryMemoryManager):
    """The reference backend as a backend that never heard of the store would be."""

    # None is how a runtime-checkable Protocol is told a method is absent.
    create_fact_with_id: ClassVar[None] = None  # type: ignore[assignment]
    agent_names: ClassVar[None] = None  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("backend", "missing"),
    [
        (WithoutExtensions, "create_fact_with_id, agent_names"),
        (
            NoopMemoryManager,
            "get_memory, update_fact, delete_fact, create_fact_with_id, agent_names",
        ),
    ],
)
def test_a_backend_without_the_needed_operations_is_refused_naming_them(
    tmp_path: Path, backend: Any, missing: str
) -> None:
    manager = backend.from_config({"storage_path": str(tmp_path)})
    with pytest.raises(MemoryUnsupportedError) as raised:
        DeerFlowStore(manager)
    assert raised.value.operation == missing
    assert backend.__name__ in str(raised.value)


def test_two_writers_creating_the_same_key_at_once_leave_one_fact(
    raw_store: DeerFlowStore, manager: DeerMemMemoryManager
) -> None:
    key = new_key()
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def put(content: str) -> None:
        start.wait()
        try:
            raw_store.put(USER, key, {"content": content})
        except BaseException as exc:  # reported below
            errors.append(exc)

    writers = [threading.Thread(target=put, args=(c,)) for c in ("Drinks tea", "Drinks coffee")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()

    assert errors == []
    (fact,) = manager.get_memory(user_id="alice")["facts"]
    assert fact["id"] == "fact_" + uuid.UUID(key).hex
    assert fact["content"] in ("Drinks tea", "Drinks coffee")


def test_a_create_that_loses_the_race_for_its_key_becomes_an_update(
    tmp_path: Path,
) -> None:
    """Another writer creates the key between the store's update (not found) and its create."""

    class Racing(DeerMemMemoryManager):
        def create_fact_with_id(self, fact_id: str, content: str, *args: Any, **kw: Any) -> Any:
            super().create_fact_with_id(fact_id, "Written by the other writer", **kw)
            return super().create_fact_with_id(fact_id, content, *args, **kw)

    manager = Racing.from_config({"storage_path": str(tmp_path)})
    key = new_key()
    DeerFlowStore(manager).put(USER, key, {"content": "Drinks tea"})

    (fact,) = manager.get_memory(user_id="alice")["facts"]
    assert fact["content"] == "Drinks tea"
    manager.close()


def _off_the_loop(name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise AssertionError(f"{name} ran on the event loop's thread and blocked it")


class LoopWatched(DeerMemMemoryManager):
    """DeerMem whose blocking calls fail when made on an event loop's thread."""

    def get_memory(self, **kw: Any) -> dict[str, Any]:
        _off_the_loop("get_memory")
        return super().get_memory(**kw)

    def search(self, *args: Any, **kw: Any) -> list[dict[str, Any]]:
        _off_the_loop("search")
        return super().search(*args, **kw)

    def update_fact(self, *args: Any, **kw: Any) -> dict[str, Any]:
        _off_the_loop("update_fact")
        return super().update_fact(*args, **kw)

    def delete_fact(self, *args: Any, **kw: Any) -> dict[str, Any]:
        _off_the_loop("delete_fact")
        return super().delete_fact(*args, **kw)

    def create_fact_with_id(self, *args: Any, **kw: Any) -> dict[str, Any]:
        _off_the_loop("create_fact_with_id")
        return super().create_fact_with_id(*args, **kw)

    def agent_names(self, **kw: Any) -> list[str]:
        _off_the_loop("agent_names")
        return super().agent_names(**kw)


def test_the_async_path_never_blocks_the_event_loop(tmp_path: Path) -> None:
    manager = LoopWatched.from_config({"storage_path": str(tmp_path)})
    store = DeerFlowStore(manager)
    key = new_key()

    async def session() -> None:
        await store.aput(USER, key, {"content": "Drinks tea"})
        await store.aput(USER, key, {"content": "Drinks green tea"})
        assert (await store.aget(USER, key)) is not None
        assert await store.asearch(USER, query="tea")
        assert await store.asearch(USER)
        assert await store.alist_namespaces(prefix=USER) == [USER]
        await store.adelete(USER, key)

    asyncio.run(session())
    manager.close()


def test_the_loop_watch_sees_a_blocking_call(tmp_path: Path) -> None:
    manager = LoopWatched.from_config({"storage_path": str(tmp_path)})

    async def blocking() -> None:
        manager.get_memory(user_id="alice")

    with pytest.raises(AssertionError, match="blocked it"):
        asyncio.run(blocking())
    manager.close()


def test_deermem_refuses_a_chosen_id_that_is_taken_or_malformed(
    manager: DeerMemMemoryManager,
) -> None:
    fact_id = "fact_" + uuid.uuid4().hex
    manager.create_fact_with_id(fact_id, "Drinks tea", user_id="alice")

    with pytest.raises(DuplicateFactError) as raised:
        manager.create_fact_with_id(fact_id, "Drinks coffee", user_id="alice")
    assert raised.value.existing_fact_id == fact_id
    with pytest.raises(ValueError, match="not a fact id"):
        manager.create_fact_with_id("../etc", "Drinks coffee", user_id="alice")
    assert [f["content"] for f in manager.get_memory(user_id="alice")["facts"]] == ["Drinks tea"]


def test_concurrent_async_puts_all_land(
    raw_store: DeerFlowStore, manager: DeerMemMemoryManager
) -> None:
    keys = [new_key() for _ in range(8)]

    async def write_all() -> None:
        await asyncio.gather(
            *(
                raw_store.aput(USER, key, {"content": f"Remembers item {chr(65 + n)}"})
                for n, key in enumerate(keys)
            )
        )

    asyncio.run(write_all())

    stored = {fact["id"] for fact in manager.get_memory(user_id="alice")["facts"]}
    assert stored == {"fact_" + uuid.UUID(key).hex for key in keys}
