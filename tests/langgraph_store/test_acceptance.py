"""A LangGraph graph given `store=` remembers across threads; the fact is DeerFlow's like any
other: `deerflow memory show` and the gateway list it, and undo takes it back."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
from langchain_core.messages import SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore
from typer.testing import CliRunner

from deerflow.agents.memory.langgraph_store import DeerFlowStore
from deerflow.agents.memory.manager import MemoryManager, build_memory_manager
from deerflow.cli.app import app
from deerflow.config import load_config
from deerflow.gateway.app import create_app
from tests.gateway.live import LiveServer
from tests.harness.scripted_model import ScriptedConversationModel

TOLD = "Remember: I use pnpm, never npm"
ASKED = "Which package manager do I use?"


def memory_graph(model: ScriptedConversationModel, store: BaseStore) -> CompiledStateGraph:  # type: ignore[type-arg]
    """LangGraph's cross-thread memory pattern: the node reads and writes `store`."""

    def respond(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> Any:
        namespace = ("memories", config["configurable"]["user_id"])
        said = state["messages"][-1].text
        if said.startswith("Remember: "):
            fact = {"content": said.removeprefix("Remember: "), "category": "preference"}
            store.put(namespace, str(uuid.uuid4()), fact)
        remembered = store.search(namespace, query=said)
        prompt = "You help.\nWhat you know about the user:\n" + "\n".join(
            f"- {item.value['content']}" for item in remembered
        )
        return {"messages": [model.invoke([SystemMessage(prompt), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("respond", respond)
    graph.add_edge(START, "respond")
    return graph.compile(checkpointer=InMemorySaver(), store=store)


def test_a_graph_remembers_across_threads_and_the_fact_is_deerflows(tmp_path: Path) -> None:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        "memory:\n  manager_class: deermem\n  backend_config:\n"
        f"    storage_path: {tmp_path / 'store'}\n",
        encoding="utf-8",
    )
    config = load_config(config_file)
    memory: MemoryManager = build_memory_manager(config.memory)
    ScriptedConversationModel.reset()
    model = ScriptedConversationModel(replies=["Noted.", "You use pnpm."])
    graph = memory_graph(model, DeerFlowStore(memory))
    user = {"user_id": "default"}

    graph.invoke({"messages": [("user", TOLD)]}, {"configurable": {"thread_id": "t1", **user}})
    answer = graph.invoke(
        {"messages": [("user", ASKED)]}, {"configurable": {"thread_id": "t2", **user}}
    )

    # Thread two started empty; what it knew came from the store.
    assert [m.text for m in answer["messages"]] == [ASKED, "You use pnpm."]
    assert "- I use pnpm, never npm" in ScriptedConversationModel.system_prompts()[1]

    shown = CliRunner().invoke(app, ["memory", "show", "--json", "-c", str(config_file)])
    assert shown.exit_code == 0, shown.output
    (fact,) = json.loads(shown.output)["facts"]
    assert (fact["content"], fact["category"]) == ("I use pnpm, never npm", "preference")

    with LiveServer(create_app(config, home=tmp_path)) as server:
        listed = httpx.get(server.url("/api/memory")).json()["facts"]
        assert [f["id"] for f in listed] == [fact["id"]]

        (change, *_) = memory.get_history(user_id="default")
        memory.revert_change(change["change_id"], user_id="default")

        assert httpx.get(server.url("/api/memory")).json()["facts"] == []
    graph.invoke({"messages": [("user", ASKED)]}, {"configurable": {"thread_id": "t3", **user}})
    assert "pnpm" not in ScriptedConversationModel.system_prompts()[2]
    memory.close()
