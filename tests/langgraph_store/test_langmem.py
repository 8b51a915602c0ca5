"""LangMem's memory tools over the store: create, search, update and delete by the id it shows."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langmem import create_manage_memory_tool, create_search_memory_tool

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.langgraph_store import DeerFlowStore
from tests.harness.scripted_model import ScriptedConversationModel
from tests.langgraph_store.conftest import USER

NAMESPACE = ("memories", "{langgraph_user_id}")
ALICE = {"configurable": {"langgraph_user_id": "alice"}}


def test_the_tools_create_find_update_and_delete_one_fact(
    raw_store: DeerFlowStore, manager: DeerMemMemoryManager
) -> None:
    manage = create_manage_memory_tool(USER, store=raw_store)
    search = create_search_memory_tool(USER, store=raw_store)

    created = manage.invoke({"content": "Prefers pnpm over npm"})
    key = created.removeprefix("created memory ")
    (found,) = json.loads(search.invoke({"query": "pnpm"}))
    assert (found["key"], found["value"]["content"]) == (key, "Prefers pnpm over npm")

    assert manage.invoke({"action": "update", "id": key, "content": "Prefers pnpm, never npm"})
    (fact,) = manager.get_memory(user_id="alice")["facts"]
    assert (fact["id"], fact["content"]) == (
        "fact_" + uuid.UUID(key).hex,
        "Prefers pnpm, never npm",
    )

    assert manage.invoke({"action": "delete", "id": key}) == f"Deleted memory {key}"
    assert manager.get_memory(user_id="alice")["facts"] == []


def test_the_async_tools_do_the_same(
    raw_store: DeerFlowStore, manager: DeerMemMemoryManager
) -> None:
    manage = create_manage_memory_tool(USER, store=raw_store)
    search = create_search_memory_tool(USER, store=raw_store)

    async def session() -> list[dict[str, Any]]:
        created = await manage.ainvoke({"content": "Drinks green tea"})
        key = created.removeprefix("created memory ")
        await manage.ainvoke({"action": "update", "id": key, "content": "Drinks black tea"})
        return json.loads(await search.ainvoke({"query": "tea"}))  # type: ignore[no-any-return]

    (found,) = asyncio.run(session())
    assert found["value"]["content"] == "Drinks black tea"
    assert [f["content"] for f in manager.get_memory(user_id="alice")["facts"]] == [
        "Drinks black tea"
    ]


def test_a_fact_the_middleware_wrote_can_be_updated_by_the_id_search_shows(
    raw_store: DeerFlowStore, manager: DeerMemMemoryManager
) -> None:
    manager.create_fact("Lives in Lisbon", "identity", 0.9, user_id="alice")
    manage = create_manage_memory_tool(USER, store=raw_store)
    search = create_search_memory_tool(USER, store=raw_store)

    (found,) = json.loads(search.invoke({"query": "Lisbon"}))
    manage.invoke({"action": "update", "id": found["key"], "content": "Lives in Porto"})

    (fact,) = manager.get_memory(user_id="alice")["facts"]
    assert (fact["content"], fact["category"]) == ("Lives in Porto", "identity")


def test_an_agent_with_the_tools_remembers_across_threads(
    raw_store: DeerFlowStore, manager: DeerMemMemoryManager
) -> None:
    ScriptedConversationModel.reset()
    tools = [create_manage_memory_tool(NAMESPACE), create_search_memory_tool(NAMESPACE)]

    def agent(call: dict[str, Any], reply: str) -> Any:
        model = ScriptedConversationModel(tool_calls=[call], replies=[reply])
        return create_agent(model, tools, store=raw_store, checkpointer=InMemorySaver())

    writer = agent({"name": "manage_memory", "args": {"content": "Uses pnpm"}}, "Noted.")
    writer.invoke(
        {"messages": [("user", "I use pnpm.")]},
        {"configurable": {"thread_id": "t1", **ALICE["configurable"]}},
    )
    reader = agent({"name": "search_memory", "args": {"query": "pnpm"}}, "You use pnpm.")
    answer = reader.invoke(
        {"messages": [("user", "What do I use?")]},
        {"configurable": {"thread_id": "t2", **ALICE["configurable"]}},
    )

    (result,) = [m for m in answer["messages"] if isinstance(m, ToolMessage)]
    assert json.loads(result.text)[0]["value"]["content"] == "Uses pnpm"
    assert [f["content"] for f in manager.get_memory(user_id="alice")["facts"]] == ["Uses pnpm"]
