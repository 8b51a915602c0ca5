"""The `openviking` backend against langchain-openviking's in-memory client.

`SpyClient` wraps that client, records every call and can make chosen calls fail, so the tests see
exactly what reached OpenViking. The live test at the end runs against a real `openviking-server`
on loopback when `OPENVIKING_LIVE=1`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_openviking import InMemoryOpenVikingClient

from deerflow.agents.memory.backends.openviking import OpenVikingMemoryManager, adapter
from deerflow.agents.memory.backends.openviking.cursor import Cursor
from deerflow.agents.memory.hooks import keep_hidden_message
from deerflow.agents.memory.manager import (
    MemoryAccessError,
    MemoryCorruptionError,
    MemoryManagerError,
    MemoryReadError,
    build_memory_manager,
    resolve_manager_class,
)
from deerflow.config import load_config

API_KEY = "ov-user-key-0123456789abcdef"
OWNER = "alice"


class SpyClient:
    """An OpenViking client that records each call's name and fails the ones it is told to."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[str] = []
        self.failures: dict[str, int] = {}  # method -> how many of its next calls fail
        self.error: Callable[[str], Exception] = lambda name: ConnectionError(f"{name} refused")

    def fail(self, method: str, times: int = 1) -> None:
        self.failures[method] = times

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if self.failures.get(name):
                self.failures[name] -= 1
                raise self.error(name)
            return target(*args, **kwargs)

        return call

    def remote_calls(self) -> list[str]:
        return [name for name in self.calls if name != "initialize"]


@pytest.fixture
def memory() -> InMemoryOpenVikingClient:
    return InMemoryOpenVikingClient(
        records={
            "viking://user/memories/preferences/uv.md": "Builds Python projects with uv.",
            "viking://user/memories/profile/city.md": "Lives in Lisbon <since 2024>.",
            "viking://user/memories/events/talk.md": "Gave a talk about  uv\n packaging.",
        }
    )


@pytest.fixture
def client(memory: InMemoryOpenVikingClient) -> SpyClient:
    return SpyClient(memory)


def build(tmp_path: Path, client: Any, **config: Any) -> OpenVikingMemoryManager:
    hooks = config.pop("hooks", {})
    backend = {"storage_path": str(tmp_path), "owner_user_id": OWNER, **config}
    return OpenVikingMemoryManager.from_config(backend, client=client, **hooks)


@pytest.fixture
def manager(tmp_path: Path, client: SpyClient) -> Iterator[OpenVikingMemoryManager]:
    manager = build(tmp_path, client)
    yield manager
    manager.close()


def turns(count: int, prefix: str = "turn") -> list[BaseMessage]:
    """A thread as LangGraph keeps it: alternating human and AI messages with ids."""
    return [
        (HumanMessage if i % 2 == 0 else AIMessage)(content=f"{prefix} {i}", id=f"{prefix}-{i}")
        for i in range(count)
    ]


def sent_texts(memory: InMemoryOpenVikingClient) -> list[str]:
    """Every message text that reached any session, committed (archived) or not."""
    messages = [m for archives in memory.archives.values() for a in archives for m in a["messages"]]
    messages += [m for session in memory.sessions.values() for m in session]
    return [
        part.get("text") or part.get("tool_output") or "" for m in messages for part in m["parts"]
    ]


def cursor_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "openviking" / "sessions").glob("*.json"))


# -- each message is sent once -------------------------------------------------------------------


def test_first_add_sends_the_thread_and_commits_it(
    manager: OpenVikingMemoryManager, client: SpyClient, memory: InMemoryOpenVikingClient
) -> None:
    manager.add("t1", turns(4), user_id=OWNER)
    assert sent_texts(memory) == ["turn 0", "turn 1", "turn 2", "turn 3"]
    assert client.remote_calls() == ["batch_add_messages", "get_session", "commit_session"]
    [session_archives] = memory.archives.values()
    assert len(session_archives) == 1


def test_replaying_the_same_conversation_sends_nothing_new(
    manager: OpenVikingMemoryManager, client: SpyClient, memory: InMemoryOpenVikingClient
) -> None:
    manager.add("t1", turns(4), user_id=OWNER)
    client.calls.clear()
    for _ in range(3):
        manager.add("t1", turns(4), user_id=OWNER)
        asyncio.run(manager.aadd("t1", turns(4), user_id=OWNER))
    assert client.remote_calls() == []
    assert sent_texts(memory) == ["turn 0", "turn 1", "turn 2", "turn 3"]


def test_a_grown_thread_sends_only_its_new_messages(
    manager: OpenVikingMemoryManager, memory: InMemoryOpenVikingClient
) -> None:
    manager.add("t1", turns(2), user_id=OWNER)
    manager.add("t1", turns(4), user_id=OWNER)
    manager.add("t1", turns(6), user_id=OWNER)
    assert sent_texts(memory) == [f"turn {i}" for i in range(6)]
    [session_archives] = memory.archives.values()
    assert [len(a["messages"]) for a in session_archives] == [2, 2, 2]


def test_a_compacted_conversation_sends_only_unseen_messages(
    manager: OpenVikingMemoryManager, memory: InMemoryOpenVikingClient
) -> None:
    thread = turns(8)
    manager.add("t1", thread, user_id=OWNER)
    # The summarisation flush hands over the messages about to be dropped: all already sent.
    manager.add_nowait("t1", thread[:5], user_id=OWNER)
    summary = HumanMessage(
        "Summary: turns 0 to 4.", id="summary", additional_kwargs={"lc_source": "summarization"}
    )
    compacted = [summary, *thread[5:], *turns(10)[8:]]
    manager.add("t1", compacted, user_id=OWNER)
    manager.add("t1", [*compacted, *turns(12)[10:]], user_id=OWNER)
    assert sent_texts(memory) == [f"turn {i}" for i in range(12)]


def test_a_compaction_that_rewrites_the_summary_sends_only_the_new_summary(
    manager: OpenVikingMemoryManager, memory: InMemoryOpenVikingClient
) -> None:
    """A summary the host writes as an ordinary message is new content, sent once."""
    manager.add("t1", turns(6), user_id=OWNER)
    compacted = [SystemMessage("rules"), AIMessage("So far: turns 0-3.", id="s1"), *turns(6)[4:]]
    manager.add("t1", compacted, user_id=OWNER)
    manager.add("t1", compacted, user_id=OWNER)
    assert sent_texts(memory) == [*(f"turn {i}" for i in range(6)), "So far: turns 0-3."]


def test_a_repeated_identical_message_is_a_new_message(
    manager: OpenVikingMemoryManager, memory: InMemoryOpenVikingClient
) -> None:
    first = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "Fine."}]
    manager.add("t1", first, user_id=OWNER)
    manager.add("t1", [*first, *first], user_id=OWNER)
    manager.add("t1", [*first, *first], user_id=OWNER)
    assert sent_texts(memory) == ["ok", "Fine.", "ok", "Fine."]


def test_a_restarted_manager_continues_the_same_session(
    tmp_path: Path, memory: InMemoryOpenVikingClient
) -> None:
    first = build(tmp_path, memory)
    first.add("t1", turns(4), user_id=OWNER)
    first.close()
    second = build(tmp_path, memory)
    second.add("t1", turns(6), user_id=OWNER)
    assert len(memory.archives) == 1
    assert sent_texts(memory) == [f"turn {i}" for i in range(6)]


def test_threads_map_to_distinct_sessions_and_owners_to_distinct_ids(
    tmp_path: Path, memory: InMemoryOpenVikingClient
) -> None:
    build(tmp_path / "a", memory).add("t1", turns(2), user_id=OWNER)
    build(tmp_path / "a", memory).add("t2", turns(2), user_id=OWNER)
    build(tmp_path / "b", memory, owner_user_id="bob").add("t1", turns(2), user_id="bob")
    assert len(memory.archives) == 3
    assert all(session.startswith("df_") for session in memory.archives)


def test_concurrent_adds_of_one_thread_send_each_message_once(
    manager: OpenVikingMemoryManager, memory: InMemoryOpenVikingClient
) -> None:
    barrier = threading.Barrier(8)

    def replay(count: int) -> None:
        barrier.wait()
        manager.add("t1", turns(count), user_id=OWNER)

    workers = [threading.Thread(target=replay, args=(2 + 2 * (i % 4),)) for i in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(sent_texts(memory)) == sorted(f"turn {i}" for i in range(8))


# -- cursors: progress, corruption, no content ---------------------------------------------------


class _Crash(BaseException):
    """The process stopping mid-send: nothing in the backend may catch it."""


def fail_batch(memory: InMemoryOpenVikingClient, number: int, error: BaseException) -> None:
    """Make the `number`-th batch write from now on raise `error` (before writing anything)."""
    inner = memory.batch_add_messages
    count = 0

    def batch(session_id: str, messages: list[dict[str, Any]], **options: Any) -> Any:
        nonlocal count
        count += 1
        if count == number:
            raise error
        return inner(session_id, messages, **options)

    memory.batch_add_messages = batch  # type: ignore[method-assign]


def test_a_failed_batch_resends_only_what_was_not_acknowledged(
    tmp_path: Path, memory: InMemoryOpenVikingClient
) -> None:
    manager = build(tmp_path, memory, failure_policy={"write": "raise"})
    thread = turns(250)
    manager.add("t1", thread[:100], user_id=OWNER)
    # 150 new messages go in two batches; the second fails after the first was acknowledged.
    fail_batch(memory, 2, ConnectionError("connection reset by peer"))
    with pytest.raises(MemoryManagerError, match="100 of 150 new messages acknowledged"):
        manager.add("t1", thread, user_id=OWNER)
    [cursor_file] = cursor_files(tmp_path)
    assert json.loads(cursor_file.read_text())["commit_pending"] is True
    manager.add("t1", thread, user_id=OWNER)
    assert sent_texts(memory) == [message.text for message in thread]
    assert json.loads(cursor_file.read_text())["commit_pending"] is False


def test_a_crash_mid_send_resends_only_what_was_not_acknowledged(
    tmp_path: Path, memory: InMemoryOpenVikingClient
) -> None:
    thread = turns(300)
    fail_batch(memory, 3, _Crash())
    with pytest.raises(_Crash):
        build(tmp_path, memory).add("t1", thread, user_id=OWNER)
    restarted = build(tmp_path, memory)
    restarted.add("t1", thread, user_id=OWNER)
    assert sent_texts(memory) == [message.text for message in thread]
    [session_archives] = memory.archives.values()
    # The restart first committed what the crashed process had written, then sent the rest.
    assert [len(archive["messages"]) for archive in session_archives] == [200, 100]


def test_a_failed_commit_is_retried_by_the_next_add(
    manager: OpenVikingMemoryManager, client: SpyClient, memory: InMemoryOpenVikingClient
) -> None:
    client.fail("commit_session")
    manager.add("t1", turns(2), user_id=OWNER)  # log_and_drop: logged, not raised
    assert not any(memory.archives.values())
    client.calls.clear()
    manager.add("t1", turns(2), user_id=OWNER)
    assert client.remote_calls() == ["get_session", "commit_session"]
    assert sent_texts(memory) == ["turn 0", "turn 1"]
    [session_archives] = memory.archives.values()
    assert len(session_archives) == 1


def test_shutdown_flush_retries_failed_commits(
    manager: OpenVikingMemoryManager, client: SpyClient, memory: InMemoryOpenVikingClient
) -> None:
    assert manager.shutdown_flush(5) is True
    client.fail("commit_session", times=2)
    manager.add("t1", turns(2), user_id=OWNER)
    assert manager.shutdown_flush(5) is False  # the second failure
    assert manager.shutdown_flush(5) is True
    assert len(next(iter(memory.archives.values()))) == 1


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'{"schema_version": 1, "prefix_count": 2',  # torn write
        b'{"schema_version": 2, "prefix_count": 0, "seen": [], "commit_pending": false}',
        b'{"schema_version": 1, "prefix_count": -1, "seen": [], "commit_pending": false}',
        b'{"schema_version": 1, "seen": ["I always build with uv"], "commit_pending": false}',
        b"\xff\xfe",
    ],
    ids=["garbage", "truncated", "future-version", "negative", "text-not-hash", "not-utf8"],
)
def test_a_corrupted_cursor_refuses_to_replay(
    manager: OpenVikingMemoryManager, client: SpyClient, tmp_path: Path, content: bytes
) -> None:
    manager.add("t1", turns(2), user_id=OWNER)
    [cursor_file] = cursor_files(tmp_path)
    cursor_file.write_bytes(content)
    client.calls.clear()
    with pytest.raises(MemoryCorruptionError, match="delete it to send the whole thread again"):
        manager.add("t1", turns(4), user_id=OWNER)
    assert client.remote_calls() == []
    assert cursor_file.read_bytes() == content  # never silently reset


def test_cursor_files_contain_no_message_text(
    manager: OpenVikingMemoryManager, tmp_path: Path
) -> None:
    secret_words = ["Zanzibar", "hunter2", "Quetzalcoatl", "lookup_weather", "sunny-42"]
    thread: list[BaseMessage] = [
        HumanMessage("My password hint is Zanzibar and hunter2", id="h1"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"id": "c1", "name": "lookup_weather", "args": {"city": "Quetzalcoatl"}}],
        ),
        ToolMessage("sunny-42", tool_call_id="c1", id="t1"),
        AIMessage("It is sunny in Quetzalcoatl.", id="a2"),
    ]
    manager.add("thread-Zanzibar", thread, user_id=OWNER)
    files = [path for path in (tmp_path / "openviking").rglob("*") if path.is_file()]
    stored = b"".join(path.read_bytes() for path in files) + b"".join(
        path.name.encode() for path in files
    )
    for word in [*secret_words, "thread-Zanzibar"]:
        assert word.encode() not in stored
    [cursor_file] = cursor_files(tmp_path)
    cursor = Cursor.model_validate_json(cursor_file.read_text())
    assert cursor.prefix_count == 4
    assert len(cursor.seen) == 4


def test_cursors_stay_bounded(tmp_path: Path, memory: InMemoryOpenVikingClient) -> None:
    manager = build(tmp_path, memory, max_seen_messages=16)
    for count in range(20, 401, 20):
        manager.add("t1", turns(count), user_id=OWNER)
    [cursor_file] = cursor_files(tmp_path)
    assert len(Cursor.model_validate_json(cursor_file.read_text()).seen) == 16
    assert cursor_file.stat().st_size < 1024
    assert len(sent_texts(memory)) == 400


# -- what is sent --------------------------------------------------------------------------------


def test_hidden_messages_are_dropped_unless_the_host_keeps_them(
    tmp_path: Path, memory: InMemoryOpenVikingClient
) -> None:
    thread: list[Any] = [
        HumanMessage("<memory>old facts</memory>", additional_kwargs={"hide_from_ui": True}),
        HumanMessage(
            "clarified: Lisbon",
            additional_kwargs={"hide_from_ui": True, "keep_in_memory": True},
        ),
        {"role": "user", "content": "What's the weather?"},
        AIMessage("", tool_calls=[{"id": "c1", "name": "weather", "args": {}}]),
        ToolMessage("sunny", tool_call_id="c1"),
        AIMessage("Sunny."),
    ]
    build(tmp_path / "plain", memory).add("t1", thread, user_id=OWNER)
    assert sent_texts(memory) == ["What's the weather?", "", "sunny", "Sunny."]
    hooked = build(
        tmp_path / "hooked", memory, hooks={"should_keep_hidden_message": keep_hidden_message}
    )
    hooked.add("t2", thread, user_id=OWNER)
    texts = sent_texts(memory)[4:]
    assert texts == ["clarified: Lisbon", "What's the weather?", "", "sunny", "Sunny."]


# -- owner binding -------------------------------------------------------------------------------


OPERATIONS: dict[str, Callable[[OpenVikingMemoryManager, str | None], Any]] = {
    "add": lambda m, user: m.add("t1", turns(2), user_id=user),
    "add_nowait": lambda m, user: m.add_nowait("t1", turns(2), user_id=user),
    "aadd": lambda m, user: asyncio.run(m.aadd("t1", turns(2), user_id=user)),
    "get_context": lambda m, user: m.get_context(user, query="uv"),
    "aget_context": lambda m, user: asyncio.run(m.aget_context(user, query="uv")),
    "search": lambda m, user: m.search("uv", user_id=user),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize("stranger", ["bob", "Alice", "alice ", None])
def test_another_user_is_refused_before_any_client_call(
    manager: OpenVikingMemoryManager,
    client: SpyClient,
    tmp_path: Path,
    operation: str,
    stranger: str | None,
) -> None:
    with pytest.raises(MemoryAccessError) as info:
        OPERATIONS[operation](manager, stranger)
    assert client.calls == []
    assert not (tmp_path / "openviking").exists()
    asked = "default" if stranger is None else stranger
    assert OWNER not in str(info.value).replace(repr(asked), "")  # the owner stays unnamed


def test_no_user_means_the_default_user(tmp_path: Path, client: SpyClient) -> None:
    manager = build(tmp_path, client, owner_user_id="default")
    manager.add("t1", turns(2))
    assert "Lisbon" in manager.get_context(None, query="Lisbon")
    assert manager.search("Lisbon", user_id="default")


# -- mode ----------------------------------------------------------------------------------------


def test_tool_mode_is_refused_at_construction(tmp_path: Path, client: SpyClient) -> None:
    config = {"storage_path": str(tmp_path), "owner_user_id": OWNER}
    with pytest.raises(ValueError, match="mode 'tool' is not supported by the openviking backend"):
        OpenVikingMemoryManager.from_config(config, mode="tool", client=client)
    with pytest.raises(ValueError, match="mode 'tool'"):
        OpenVikingMemoryManager(backend_config=config, mode="tool", client=client)
    assert client.calls == []
    assert OpenVikingMemoryManager.supports_search
    assert not OpenVikingMemoryManager.requires_passive_writes_in_tool_mode


# -- reads ---------------------------------------------------------------------------------------


def test_get_context_lists_relevant_memories_escaped(manager: OpenVikingMemoryManager) -> None:
    context = manager.get_context(OWNER, query="Where does the user live? Lisbon")
    assert context.splitlines()[0] == "- [profile] Lives in Lisbon &lt;since 2024&gt;."
    assert "<" not in context


def test_get_context_without_a_query_uses_the_injection_query(
    manager: OpenVikingMemoryManager, memory: InMemoryOpenVikingClient
) -> None:
    manager.get_context(OWNER)
    manager.get_context(OWNER, query="   ")
    assert [call["query"] for call in memory.find_calls] == [memory.find_calls[0]["query"]] * 2
    assert "preferences" in memory.find_calls[0]["query"]
    assert memory.find_calls[0]["target_uri"] == "viking://user/memories"
    assert memory.find_calls[0]["limit"] == 8


def test_get_context_keeps_within_its_char_budget(
    tmp_path: Path, memory: InMemoryOpenVikingClient
) -> None:
    for i in range(40):
        memory.records[f"viking://user/memories/events/e{i}.md"] = f"uv event {i} " + "x" * 60
    memory.records["viking://user/memories/events/dup.md"] = "UV EVENT 1 " + "X" * 60
    manager = build(tmp_path, memory, retrieval={"top_k": 50, "max_injection_chars": 300})
    context = manager.get_context(OWNER, query="uv event")
    assert 250 < len(context) <= 300
    assert context.endswith("…")
    lines = context.splitlines()
    assert len({line.casefold() for line in lines}) == len(lines)


def test_search_returns_fact_dicts_best_first_filtered_by_category(
    manager: OpenVikingMemoryManager,
) -> None:
    results = manager.search("uv packaging talk", top_k=5, user_id=OWNER)
    assert [fact["id"] for fact in results][:1] == ["viking://user/memories/events/talk.md"]
    assert results[0]["content"] == "Gave a talk about uv packaging."
    assert results[0]["category"] == "context"
    scores = [fact["score"] for fact in results]
    assert scores == sorted(scores, reverse=True)
    only = manager.search("uv packaging talk", top_k=1, user_id=OWNER, category="preference")
    assert [fact["id"] for fact in only] == ["viking://user/memories/preferences/uv.md"]
    assert manager.search("uv", top_k=0, user_id=OWNER) == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.search("  ", user_id=OWNER), "query must be non-empty"),
        (lambda m: m.search("uv", -1, user_id=OWNER), "top_k must be >= 0"),
        (lambda m: m.search("uv", user_id=OWNER, category="gossip"), "gossip"),
        (lambda m: m.add("", turns(2), user_id=OWNER), "thread_id must be non-empty"),
        (lambda m: m.add("t1", [42], user_id=OWNER), r"messages\[0\].*got int"),
        (
            lambda m: m.add("t1", [{"role": "wizard", "content": "abracadabra"}], user_id=OWNER),
            r"messages\[0\]",
        ),
    ],
)
def test_bad_input_is_a_value_error_naming_it(
    manager: OpenVikingMemoryManager, client: SpyClient, call: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as info:
        call(manager)
    assert "abracadabra" not in str(info.value)
    assert client.remote_calls() == []


# -- failure policies ----------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["fail_closed", "raise"])
def test_fail_closed_reads_raise(tmp_path: Path, client: SpyClient, policy: str) -> None:
    manager = build(tmp_path, client, failure_policy={"read": policy})
    client.fail("find", times=2)
    with pytest.raises(MemoryReadError, match="find refused"):
        manager.get_context(OWNER, query="uv")
    with pytest.raises(MemoryReadError):
        manager.search("uv", user_id=OWNER)
    assert OpenVikingMemoryManager.read_failures_are_fatal_for_config(
        {"failure_policy": {"read": policy}}
    )


def test_fail_open_reads_return_nothing_and_log(
    manager: OpenVikingMemoryManager, client: SpyClient, caplog: pytest.LogCaptureFixture
) -> None:
    client.fail("find", times=2)
    with caplog.at_level(logging.WARNING):
        assert manager.get_context(OWNER, query="uv") == ""
        assert manager.search("uv", user_id=OWNER) == []
    assert caplog.text.count("find refused") == 2
    assert manager.get_context(OWNER, query="uv")  # the server is back
    assert not OpenVikingMemoryManager.read_failures_are_fatal_for_config({})
    assert not OpenVikingMemoryManager.read_failures_are_fatal_for_config(
        {"failure_policy": {"read": "fail_open"}}
    )


def test_write_policy_raise_and_log_and_drop(
    tmp_path: Path, client: SpyClient, caplog: pytest.LogCaptureFixture
) -> None:
    strict = build(tmp_path / "strict", client, failure_policy={"write": "raise"})
    client.fail("batch_add_messages")
    with pytest.raises(MemoryManagerError, match="0 of 2 new messages acknowledged"):
        strict.add("t1", turns(2), user_id=OWNER)
    lenient = build(tmp_path / "lenient", client)
    client.fail("batch_add_messages")
    with caplog.at_level(logging.WARNING):
        lenient.add("t1", turns(2), user_id=OWNER)
    assert "batch_add_messages refused" in caplog.text
    assert "the next add of the thread retries" in caplog.text


@pytest.mark.parametrize(("policy", "expected"), [("fail_open", False), ("fail_closed", None)])
def test_warm_checks_health(
    tmp_path: Path, client: SpyClient, policy: str, expected: bool | None
) -> None:
    manager = build(tmp_path, client, failure_policy={"read": policy})
    assert manager.warm() is True
    client.fail("is_healthy")
    if expected is None:
        with pytest.raises(MemoryReadError, match="not ready"):
            manager.warm()
    else:
        assert manager.warm() is expected


# -- configuration and secrets -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"owner": "alice", "strict": True},
            r"memory\.backend_config\.owner: unknown key \(did you mean 'owner_user_id'\?\)",
        ),
        (
            {"retrieval": {"topk": 3}, "strict": True},
            r"memory\.backend_config\.retrieval\.topk: unknown key \(did you mean 'top_k'\?\)",
        ),
        ({"failure_policy": {"read": "ignore"}}, r"failure_policy\.read"),
        ({"failure_policy": {"write": "fail_closed"}}, r"failure_policy\.write"),
        ({"retrieval": {"top_k": 0}}, r"retrieval\.top_k"),
        ({"retrieval": {"max_injection_chars": 10}}, r"retrieval\.max_injection_chars"),
        ({"retrieval": {"score_threshold": 1.5}}, r"retrieval\.score_threshold"),
        ({"base_url": "ftp://host"}, "absolute http"),
        ({"base_url": "https://u:pw@ov.example.com"}, "must not carry credentials"),
        ({"owner_user_id": "  "}, "must name a user"),
        ({"api_key_env": "sk-live-0123"}, "name of an environment variable"),
        ({"max_seen_messages": 4}, "max_seen_messages"),
    ],
)
def test_bad_config_names_the_key(
    tmp_path: Path, client: SpyClient, config: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build(tmp_path, client, **config)


def test_accepted_config_variants(tmp_path: Path, client: SpyClient) -> None:
    build(tmp_path, client, base_url="http://localhost:1933")
    build(tmp_path, client, base_url="http://[::1]:1933")
    build(tmp_path, client, base_url="https://ov.example.com")
    build(tmp_path, client, base_url="http://ov.internal:1933", allow_insecure_http=True)


def test_plain_http_to_another_host_starts_with_a_warning_naming_the_risk(
    tmp_path: Path, client: SpyClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        build(tmp_path, client, base_url="http://openviking:1933")
    assert "plain http to openviking sends the OpenViking API key" in caplog.text
    assert "unencrypted" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        build(tmp_path, client, base_url="http://openviking:1933", allow_insecure_http=True)
    assert "unencrypted" not in caplog.text


def test_secrets_never_appear_in_errors_or_logs(
    tmp_path: Path,
    memory: InMemoryOpenVikingClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(ValueError, match=r"memory\.backend_config\.api_key: unknown") as info:
        build(tmp_path, memory, api_key=API_KEY, strict=True)
    assert API_KEY not in str(info.value)
    with caplog.at_level(logging.WARNING):
        build(tmp_path, memory, api_key=API_KEY)  # ignored, with a warning that hides the value
    assert "memory.backend_config.api_key: unknown key" in caplog.text
    assert API_KEY not in caplog.text

    monkeypatch.delenv("OPENVIKING_API_KEY", raising=False)
    config = {"storage_path": str(tmp_path), "owner_user_id": OWNER}
    with pytest.raises(ValueError, match="OPENVIKING_API_KEY is not set"):
        OpenVikingMemoryManager.from_config(config)

    # A server error that echoes the key: the message and the log mask it.
    monkeypatch.setenv("OPENVIKING_API_KEY", API_KEY)
    spy = SpyClient(memory)
    spy.error = lambda name: PermissionError(f"key {API_KEY} is not allowed")
    spy.fail("find", times=2)
    monkeypatch.setattr(adapter, "connect", lambda url, key, timeout: spy)
    manager = OpenVikingMemoryManager.from_config(config)
    with caplog.at_level(logging.DEBUG):
        assert manager.get_context(OWNER, query="uv") == ""
    strict = OpenVikingMemoryManager.from_config({**config, "failure_policy": {"read": "raise"}})
    with pytest.raises(MemoryReadError) as read_info:
        strict.get_context(OWNER, query="uv")
    for text in (caplog.text, str(read_info.value), repr(read_info.value.__cause__)):
        assert API_KEY not in text
    assert "key *** is not allowed" in caplog.text


def test_the_client_gets_the_configured_url_key_and_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OV_KEY", API_KEY)
    config = {"storage_path": str(tmp_path), "owner_user_id": OWNER, "api_key_env": "OV_KEY"}
    manager = OpenVikingMemoryManager.from_config(
        {**config, "base_url": "https://ov.example.com/", "timeout_seconds": 7}
    )
    client = manager._adapter._client  # the SDK's own client, not connected yet
    inner = client._async_client
    assert (inner._url, inner._api_key, inner._timeout, inner._extra_headers) == (
        "https://ov.example.com",
        API_KEY,
        7,
        {},
    )
    manager.close()


# -- wiring: the factory, the extra --------------------------------------------------------------


def test_manager_class_in_config_yaml_is_the_only_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory: InMemoryOpenVikingClient
) -> None:
    config_file = tmp_path / "config.yaml"
    config_file.write_text("memory:\n  manager_class: openviking\n", encoding="utf-8")
    monkeypatch.setenv("OPENVIKING_API_KEY", API_KEY)
    connected: list[tuple[str, str, float]] = []

    def connect(url: str, key: str, timeout: float) -> InMemoryOpenVikingClient:
        connected.append((url, key, timeout))
        return memory

    monkeypatch.setattr(adapter, "connect", connect)
    home = tmp_path / "home"
    manager = build_memory_manager(load_config(config_file).memory, home=home)
    assert isinstance(manager, OpenVikingMemoryManager)
    assert connected == [("http://127.0.0.1:1933", API_KEY, 30.0)]
    manager.add("t1", turns(2))
    assert "Lisbon" in manager.get_context(None, query="Lisbon")
    assert len(list((home / "openviking" / "sessions").glob("df_*.json"))) == 1
    manager.close()


def test_a_missing_extra_is_named_and_only_stops_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [
        n for n in sys.modules if n.startswith(("langchain_openviking", "openviking_sdk"))
    ]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, adapter.__name__)
    monkeypatch.setenv("OPENVIKING_API_KEY", API_KEY)
    assert resolve_manager_class("openviking") is OpenVikingMemoryManager
    with pytest.raises(ImportError, match=r"extra 'openviking'.*AGPL-3\.0"):
        OpenVikingMemoryManager.from_config({"storage_path": str(tmp_path)})


# -- a real server -------------------------------------------------------------------------------


@pytest.mark.skipif(os.environ.get("OPENVIKING_LIVE") != "1", reason="set OPENVIKING_LIVE=1")
def test_live_server_on_loopback(tmp_path: Path) -> None:
    """Against `openviking-server` on loopback: `OPENVIKING_URL` (default port 1933) and the
    owner's key in `OPENVIKING_API_KEY`."""
    url = os.environ.get("OPENVIKING_URL", "http://127.0.0.1:1933")
    spy = SpyClient(adapter.connect(url, os.environ["OPENVIKING_API_KEY"], 30))
    manager = build(tmp_path, spy, base_url=url, failure_policy={"read": "raise", "write": "raise"})
    try:
        assert manager.warm() is True
        thread = [
            HumanMessage("I am allergic to cats and live in Lisbon.", id="live-1"),
            AIMessage("Noted: no cats, and Lisbon.", id="live-2"),
        ]
        manager.add("live-thread", thread, user_id=OWNER)
        assert spy.remote_calls().count("batch_add_messages") == 1
        spy.calls.clear()
        manager.add("live-thread", thread, user_id=OWNER)
        assert spy.remote_calls() == []
        assert isinstance(manager.get_context(OWNER, query="cats"), str)
        assert isinstance(manager.search("cats", user_id=OWNER), list)
    finally:
        manager.close()
        spy.close()
