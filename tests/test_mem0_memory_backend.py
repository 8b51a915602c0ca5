"""The mem0 backend: mem0's real engine in-process, and a loopback fake of mem0's REST routes.

No test touches the network: `local` runs mem0's open-source engine on Qdrant under tmp_path
with a hashing embedder and a scripted extraction model; `http` talks to `FakeMem0Server` on
127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from deerflow.agents.memory.backends.mem0 import Mem0MemoryManager
from deerflow.agents.memory.hooks import keep_hidden_message
from deerflow.agents.memory.manager import (
    FactNotFoundError,
    MemoryAccessError,
    MemoryManagerError,
    MemoryReadError,
    build_memory_manager,
)
from deerflow.config.loader import load_config
from tests.mem0_fakes import (
    API_KEY,
    HERE,
    FakeMem0Server,
    ScriptedExtractor,
    http_config,
    local_config,
)

EXTRACTED = "The user keeps bees in the garden."


def conversation(user: str, answer: str = "Noted.") -> list[Any]:
    return [HumanMessage(user), AIMessage(answer)]


def contents(doc: dict[str, Any]) -> list[str]:
    return sorted(fact["content"] for fact in doc["facts"])


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeMem0Server]:
    monkeypatch.setenv("MEM0_TEST_KEY", API_KEY)
    with FakeMem0Server().running() as running:
        yield running


@pytest.fixture
def remote(server: FakeMem0Server, tmp_path: Path) -> Iterator[Mem0MemoryManager]:
    manager = Mem0MemoryManager.from_config({"storage_path": str(tmp_path), **http_config(server)})
    yield manager
    manager.close()


def local(tmp_path: Path, **overrides: Any) -> Mem0MemoryManager:
    return Mem0MemoryManager.from_config(local_config(tmp_path, **overrides))


# -- transport: local, mem0's real engine ---------------------------------------------------


def test_local_add_then_search_finds_it_for_that_user_only(tmp_path: Path) -> None:
    extractor = {"use": f"{HERE}:ScriptedExtractor", "memories": [EXTRACTED]}
    manager = local(tmp_path, model=extractor)
    try:
        manager.add("t1", conversation("I keep bees in my garden."), user_id="alice")
        [hit] = manager.search("bees garden", user_id="alice")
        assert hit["content"] == EXTRACTED
        assert hit["score"] > 0
        assert manager.search("bees garden", user_id="bob") == []
        assert EXTRACTED in manager.get_context("alice", query="what about bees?")
        assert manager.get_context("bob", query="what about bees?") == ""
    finally:
        manager.close()


def test_local_memories_survive_a_restart(tmp_path: Path) -> None:
    first = local(tmp_path)
    first.create_fact("The user speaks Portuguese.", "identity", 0.9, user_id="alice")
    first.close()
    second = local(tmp_path)
    try:
        [fact] = second.get_memory(user_id="alice")["facts"]
        assert (fact["content"], fact["category"], fact["confidence"]) == (
            "The user speaks Portuguese.",
            "identity",
            0.9,
        )
    finally:
        second.close()


def test_local_sends_each_message_once_and_never_hidden_or_tool_traffic(tmp_path: Path) -> None:
    manager = local(tmp_path, infer=False, model=None)
    hidden_injection = HumanMessage(
        "<memory>The user likes tea.</memory>", additional_kwargs={"hide_from_ui": True}
    )
    kept_hidden = HumanMessage(
        "I picked option B.",
        additional_kwargs={"hide_from_ui": True, "keep_in_memory": True},
    )
    thread = [
        SystemMessage("You are helpful."),
        hidden_injection,
        HumanMessage("Find flights to Lisbon."),
        AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": "c1"}]),
        ToolMessage("3 flights found", tool_call_id="c1"),
        AIMessage("There are 3 flights to Lisbon."),
    ]
    try:
        manager.add("t1", thread, user_id="alice")
        manager.add("t1", thread, user_id="alice")  # the middleware replays the whole thread
        assert contents(manager.get_memory(user_id="alice")) == [
            "Find flights to Lisbon.",
            "There are 3 flights to Lisbon.",
        ]
        manager.add("t1", [*thread, kept_hidden, AIMessage("Booked.")], user_id="alice")
        # Without the host's hook every hidden message is dropped.
        assert "I picked option B." not in contents(manager.get_memory(user_id="alice"))
    finally:
        manager.close()


def test_local_never_sends_the_summary_of_a_compacted_thread(tmp_path: Path) -> None:
    manager = local(tmp_path, infer=False, model=None)
    # What LangChain's SummarizationMiddleware puts in place of the turns it compacted.
    summary = HumanMessage(
        "Here is a summary of the conversation to date:\n\nThe user asked about Lisbon.",
        additional_kwargs={"lc_source": "summarization"},
    )
    try:
        manager.add("t1", [summary, HumanMessage("And Porto?")], user_id="alice")
        assert contents(manager.get_memory(user_id="alice")) == ["And Porto?"]
    finally:
        manager.close()


def test_local_keeps_hidden_messages_the_host_flags(tmp_path: Path) -> None:
    config = local_config(tmp_path, infer=False, model=None)
    manager = Mem0MemoryManager.from_config(config, should_keep_hidden_message=keep_hidden_message)
    flagged = {"hide_from_ui": True, "keep_in_memory": True}
    try:
        manager.add(
            "t1",
            [
                HumanMessage("I picked option B.", additional_kwargs=flagged),
                HumanMessage("<memory>old</memory>", additional_kwargs={"hide_from_ui": True}),
            ],
            user_id="alice",
        )
        assert contents(manager.get_memory(user_id="alice")) == ["I picked option B."]
    finally:
        manager.close()


def test_local_get_context_is_char_budgeted_whole_lines_and_escaped(tmp_path: Path) -> None:
    manager = local(tmp_path, max_injection_chars=150)
    try:
        manager.create_fact("The user writes </memory> tags in notes.", user_id="alice")
        manager.create_fact("The user's favourite notes app is Obsidian.", user_id="alice")
        manager.create_fact("The user takes notes every morning before work.", user_id="alice")
        text = manager.get_context("alice", query="notes")
        assert 0 < len(text) <= 150
        lines = text.splitlines()[1:]
        assert len(lines) == 2, "a third whole line does not fit in 150 characters"
        assert all(line.endswith(".") for line in lines), "lines are never cut"
        assert "</memory>" not in manager.get_context("alice", query="memory tags")
        assert "&lt;/memory&gt;" in manager.get_context("alice", query="memory tags")
    finally:
        manager.close()


def test_local_bucket_ids_cannot_reach_another_users_fact(tmp_path: Path) -> None:
    manager = local(tmp_path)
    try:
        _, fact_id = manager.create_fact("The user's locker is 42.", user_id="alice")
        assert fact_id is not None
        with pytest.raises(FactNotFoundError):
            manager.update_fact(fact_id, content="Hijacked.", user_id="mallory")
        with pytest.raises(FactNotFoundError):
            manager.delete_fact(fact_id, user_id="alice", agent_name="other-agent")
        assert contents(manager.get_memory(user_id="alice")) == ["The user's locker is 42."]
    finally:
        manager.close()


def test_local_read_and_write_policies_when_the_embedder_is_down(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = {"embedder": {"use": f"{HERE}:BrokenEmbeddings"}}
    lenient = local(tmp_path / "open", **broken)
    strict = local(
        tmp_path / "closed",
        **broken,
        failure_policy={"read": "fail_closed", "write": "raise"},
    )
    try:
        with caplog.at_level(logging.ERROR):
            assert lenient.get_context("alice", query="tea") == ""
            assert lenient.search("tea", user_id="alice") == []
            assert lenient.add("t1", conversation("I like tea."), user_id="alice") is None
        assert "embedding service unreachable" in caplog.text
        assert "I like tea" not in caplog.text, "memory content stays out of the logs"
        with pytest.raises(MemoryReadError):
            strict.get_context("alice", query="tea")
        with pytest.raises(MemoryReadError):
            strict.search("tea", user_id="alice")
        with pytest.raises(MemoryManagerError):
            strict.add("t1", conversation("I like tea."), user_id="alice")
    finally:
        lenient.close()
        strict.close()


def test_local_startup_policy_when_the_store_is_locked(tmp_path: Path) -> None:
    """Local Qdrant admits one client per folder: a second manager cannot start until it closes."""
    owner = local(tmp_path)
    assert owner.warm() is True
    tolerant = local(tmp_path, startup_policy="tolerate")
    strict = local(tmp_path)
    try:
        assert tolerant.warm() is False
        with pytest.raises(MemoryReadError, match="already accessed"):
            strict.warm()
        owner.close()
        # The failed attempts released what they had opened, so a retry succeeds.
        assert strict.warm() is True
    finally:
        owner.close()
        tolerant.close()
        strict.close()


def test_local_uses_the_host_model_when_none_is_configured(tmp_path: Path) -> None:
    host = ScriptedExtractor(memories=[EXTRACTED])
    config = local_config(tmp_path, model=None)
    manager = Mem0MemoryManager.from_config(config, host_llm_factory=lambda: host)
    try:
        manager.add("t1", conversation("I keep bees."), user_id="alice")
        assert contents(manager.get_memory(user_id="alice")) == [EXTRACTED]
    finally:
        manager.close()


def test_local_without_the_extra_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mem0" else real(name, *a)
    )
    with pytest.raises(ValueError, match=r"deerflow-memory\[mem0\]"):
        local(tmp_path)


# -- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"max_facts": 10, "strict": True}, "memory.backend_config.max_facts: unknown key"),
        ({"base_url": "http://x", "strict": True}, "memory.backend_config.base_url: unknown key"),
        ({"transport": "grpc"}, "memory.backend_config.transport: must be 'local' or 'http'"),
        ({"failure_policy": {"read": "ignore"}}, "memory.backend_config.failure_policy.read"),
        (
            {"failure_policy": {"reed": "fail_open"}, "strict": True},
            "memory.backend_config.failure_policy.reed: unknown key (did you mean 'read'?)",
        ),
        ({"embedding_dims": 0}, "memory.backend_config.embedding_dims"),
        ({"default_agent_id": "two words"}, "memory.backend_config.default_agent_id"),
        ({"embedder": {"use": "no_such_pkg:Embed"}}, "memory.backend_config.embedder.use"),
        ({"embedder": {"use": f"{HERE}:ScriptedExtractor"}}, "not a LangChain Embeddings"),
        ({"model": None}, "memory.backend_config.model: mem0 extracts memories"),
    ],
)
def test_local_config_errors_name_the_key(
    tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        local(tmp_path, **overrides)


def test_http_config_refuses_local_keys_and_a_missing_key(
    server: FakeMem0Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=r"memory\.backend_config\.embedder: unknown key"):
        Mem0MemoryManager.from_config(
            {**http_config(server), "embedder": {"use": "x:Y"}, "strict": True}
        )
    monkeypatch.delenv("MEM0_TEST_KEY")
    with pytest.raises(ValueError, match="MEM0_TEST_KEY is not set"):
        Mem0MemoryManager.from_config(http_config(server))


def test_tool_mode_is_allowed_and_keeps_passive_writes(tmp_path: Path) -> None:
    manager = local(tmp_path)
    tool_mode = Mem0MemoryManager.from_config(local_config(tmp_path), mode="tool")
    assert tool_mode.mode == "tool"
    assert Mem0MemoryManager.requires_passive_writes_in_tool_mode is True
    tool_mode.close()
    manager.close()


# -- transport: http, a loopback fake of mem0's REST routes ---------------------------------------


def test_http_maps_user_agent_and_thread_ids(
    server: FakeMem0Server, remote: Mem0MemoryManager
) -> None:
    remote.add("thread-7", conversation("I like jazz."), user_id="alice", agent_name="dj")
    [(_, _, _, body)] = [r for r in server.requests if r[1] == "/v3/memories/add/"]
    assert (body["user_id"], body["agent_id"], body["run_id"]) == ("alice", "dj", "thread-7")
    assert body["messages"] == [
        {"role": "user", "content": "I like jazz."},
        {"role": "assistant", "content": "Noted."},
    ]
    remote.search("jazz", user_id="alice", agent_name="dj", category="preference")
    [(_, _, _, search)] = [r for r in server.requests if r[1] == "/v3/memories/search/"]
    assert search["filters"] == {
        "AND": [{"user_id": "alice"}, {"agent_id": "dj"}, {"metadata": {"category": "preference"}}]
    }
    # Reads span threads; the default bucket has an agent id of its own.
    assert "I like jazz." in remote.get_context("alice", agent_name="dj", thread_id="other")
    assert remote.get_memory(user_id="alice")["facts"] == []
    remote.clear_memory(user_id="alice", agent_name="dj")
    [(_, _, query, _)] = [r for r in server.requests if r[0] == "DELETE"]
    assert query == {"user_id": ["alice"], "agent_id": ["dj"]}


def test_http_reads_every_page(server: FakeMem0Server, remote: Mem0MemoryManager) -> None:
    for index in range(250):
        server.seed(f"Memory number {index}.", user_id="alice", agent_id="__default__")
    server.seed("Another user's memory.", user_id="bob", agent_id="__default__")
    doc = remote.get_memory(user_id="alice")
    assert len(doc["facts"]) == 250
    assert "Another user's memory." not in contents(doc)
    pages = [query["page"] for _, path, query, _ in server.requests if path == "/v3/memories/"]
    assert pages == [["1"], ["2"], ["3"]]


def test_http_list_limit_stops_paging(server: FakeMem0Server, tmp_path: Path) -> None:
    for index in range(250):
        server.seed(f"Memory number {index}.", user_id="alice", agent_id="__default__")
    manager = Mem0MemoryManager.from_config(http_config(server, list_limit=120))
    try:
        assert len(manager.get_memory(user_id="alice")["facts"]) == 120
        assert server.paths().count("POST /v3/memories/") == 2
    finally:
        manager.close()


def test_http_foreign_memories_read_as_unrated_context(
    server: FakeMem0Server, remote: Mem0MemoryManager
) -> None:
    server.seed("Written by another mem0 client.", user_id="alice", agent_id="__default__")
    [fact] = remote.get_memory(user_id="alice")["facts"]
    assert (fact["category"], fact["confidence"], fact["source"]) == ("context", 0.5, "mem0")


def test_http_401_is_a_clear_auth_error_without_the_key(
    server: FakeMem0Server,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    wrong = "m0-wrong-secret-value-9a8b7c"
    monkeypatch.setenv("MEM0_TEST_KEY", wrong)
    manager = Mem0MemoryManager.from_config(http_config(server))
    strict = Mem0MemoryManager.from_config(
        http_config(server, failure_policy={"read": "fail_closed"})
    )
    try:
        with pytest.raises(MemoryAccessError, match=r"HTTP 401.*\$MEM0_TEST_KEY") as info:
            manager.warm()
        assert wrong not in str(info.value)
        with pytest.raises(MemoryAccessError):
            manager.get_memory(user_id="alice")
        with caplog.at_level(logging.ERROR):
            assert manager.get_context("alice", query="tea") == ""
        assert "refused the credentials" in caplog.text
        assert wrong not in caplog.text
        with pytest.raises(MemoryReadError, match="refused the credentials"):
            strict.get_context("alice", query="tea")
    finally:
        manager.close()
        strict.close()


def test_http_5xx_applies_the_read_and_write_policies(
    server: FakeMem0Server, remote: Mem0MemoryManager
) -> None:
    strict = Mem0MemoryManager.from_config(
        http_config(server, failure_policy={"read": "fail_closed", "write": "raise"})
    )
    try:
        server.fail_status = 503
        assert remote.get_context("alice", query="tea") == ""
        assert remote.get_context("alice") == ""
        assert remote.search("tea", user_id="alice") == []
        remote.add("t1", conversation("I like tea."), user_id="alice")  # logged and dropped
        with pytest.raises(MemoryReadError, match="HTTP 503"):
            strict.get_context("alice", query="tea")
        with pytest.raises(MemoryReadError, match="HTTP 503"):
            strict.search("tea", user_id="alice")
        with pytest.raises(MemoryManagerError, match="HTTP 503"):
            strict.add("t1", conversation("I like coffee."), user_id="alice")
        with pytest.raises(MemoryReadError):
            remote.get_memory(user_id="alice")  # an empty document would lie
        server.fail_status = None
        # A dropped write is sent again with the next turn of its thread.
        remote.add("t1", conversation("I like tea."), user_id="alice")
        assert contents(remote.get_memory(user_id="alice")) == ["I like tea.", "Noted."]
    finally:
        strict.close()


def test_http_server_down_applies_the_read_policy(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("MEM0_TEST_KEY", API_KEY)
    with FakeMem0Server().running() as server:
        config = http_config(server, startup_policy="tolerate")
    manager = Mem0MemoryManager.from_config(config)  # nothing listens there any more
    try:
        assert manager.warm() is False
        assert manager.get_context("alice", query="tea") == ""
        with pytest.raises(MemoryReadError, match="ConnectError"):
            manager.get_memory(user_id="alice")
    finally:
        manager.close()


def test_http_fact_crud_round_trip(server: FakeMem0Server, remote: Mem0MemoryManager) -> None:
    _, fact_id = remote.create_fact("The user runs marathons.", "behavior", 0.7, user_id="alice")
    assert fact_id is not None
    [(_, _, _, body)] = [r for r in server.requests if r[1] == "/v3/memories/add/"]
    assert body["infer"] is False
    assert body["metadata"] == {"category": "behavior", "confidence": 0.7, "source": "manual"}
    doc = remote.update_fact(fact_id, confidence=0.9, user_id="alice")
    [fact] = doc["facts"]
    assert (fact["content"], fact["category"], fact["confidence"]) == (
        "The user runs marathons.",
        "behavior",
        0.9,
    )
    assert remote.delete_fact(fact_id, user_id="alice")["facts"] == []
    with pytest.raises(FactNotFoundError):
        remote.delete_fact(fact_id, user_id="alice")


def test_ids_mem0_cannot_store_are_refused(
    server: FakeMem0Server, remote: Mem0MemoryManager
) -> None:
    with pytest.raises(ValueError, match="user_id: mem0 ids cannot contain whitespace"):
        remote.get_memory(user_id="alice smith")
    with pytest.raises(ValueError, match="agent_name"):
        remote.search("tea", user_id="alice", agent_name="my agent")
    assert server.requests == [], "refused before any request"
    assert remote.get_memory(user_id="")["facts"] == []  # empty: the default user


# -- the factory: `manager_class: mem0` is the only change ---------------------------------------


@pytest.mark.parametrize("transport", ["local", "http"])
def test_config_yaml_selects_mem0_by_name(
    transport: str, server: FakeMem0Server, tmp_path: Path
) -> None:
    backend = local_config("mem0-data") if transport == "local" else http_config(server)
    path = tmp_path / "config.yaml"
    path.write_text(
        yaml.safe_dump({"memory": {"manager_class": "mem0", "backend_config": backend}}),
        encoding="utf-8",
    )
    manager = build_memory_manager(load_config(path).memory, home=tmp_path / "home")
    try:
        assert isinstance(manager, Mem0MemoryManager)
        assert manager.warm() is True
        manager.create_fact("The user likes green tea.", user_id="alice")
        assert "green tea" in manager.get_context("alice", query="green tea")
    finally:
        manager.close()
    if transport == "local":
        assert (tmp_path / "home" / "mem0-data" / "mem0" / "qdrant").is_dir()
