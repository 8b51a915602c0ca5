"""The honcho backend against a loopback fake of Honcho v3's routes (tests/honcho_fake.py).

Every round trip is real HTTP to a server that keeps state: what one manager writes, a new
manager (a restarted process) finds again.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from deerflow.agents.memory.backends.honcho import HonchoMemoryManager
from deerflow.agents.memory.backends.honcho.ids import (
    assistant_peer_id,
    session_id,
    workspace_id,
)
from deerflow.agents.memory.manager import (
    MemoryManagerError,
    MemoryReadError,
    build_memory_manager,
    get_memory_manager,
    keep_hidden_message,
    memory_read_failures_are_fatal,
    resolve_manager_class,
)
from deerflow.config import load_config
from tests.honcho_fake import FakeHoncho, closed_port_url, serve_fake_honcho

SECRET = "hk-live-0123456789abcdef"
HONCHO_ID = re.compile(r"^[a-zA-Z0-9_-]{1,512}$")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeHoncho]:
    with serve_fake_honcho() as running:
        yield running


@pytest.fixture
def honcho(server: FakeHoncho) -> FakeHoncho:
    server.reset()
    return server


def build(url: str, **config: Any) -> HonchoMemoryManager:
    return HonchoMemoryManager.from_config({"base_url": url, "max_retries": 0, **config})


@pytest.fixture
def manager(honcho: FakeHoncho) -> Iterator[HonchoMemoryManager]:
    built = build(honcho.url)
    yield built
    built.close()


def conversation(*turns: str) -> list[Any]:
    """Alternating user and assistant turns, with ids as LangGraph gives them."""
    return [
        (HumanMessage if i % 2 == 0 else AIMessage)(text, id=f"m{i}")
        for i, text in enumerate(turns)
    ]


def stored(honcho: FakeHoncho, user_id: str | None, thread_id: str) -> list[tuple[str, str]]:
    """(peer, content) of every message the fake holds for the thread."""
    workspace = workspace_id("deerflow", user_id)
    return [
        (m["peer_id"], m["content"])
        for m in honcho.state.session_messages(workspace, session_id(thread_id))
    ]


def posts_of_messages(honcho: FakeHoncho) -> int:
    return sum(r.startswith("POST") and r.endswith("/messages") for r in honcho.state.requests)


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"base_ur": "http://h", "strict": True}, "memory.backend_config.base_ur"),
        ({"api_key": SECRET, "strict": True}, "memory.backend_config.api_key"),
        ({"base_url": "ftp://h"}, "memory.backend_config.base_url"),
        ({"timeout_seconds": 0}, "memory.backend_config.timeout_seconds"),
        ({"failure_policy": {"read": "raise"}}, "memory.backend_config.failure_policy.read"),
        (
            {"failure_policy": {"writ": "raise"}, "strict": True},
            "memory.backend_config.failure_policy.writ: unknown key (did you mean 'write'?)",
        ),
        ({"workspace_prefix": "a.b"}, "memory.backend_config.workspace_prefix"),
        ({"max_context_chars": -1}, "memory.backend_config.max_context_chars"),
    ],
)
def test_bad_config_names_the_key(config: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)) as info:
        HonchoMemoryManager.from_config(config)
    assert SECRET not in str(info.value)


def test_api_key_env_must_name_a_set_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HONCHO_TEST_KEY", raising=False)
    with pytest.raises(ValueError, match="HONCHO_TEST_KEY is not set"):
        HonchoMemoryManager.from_config({"api_key_env": "HONCHO_TEST_KEY"})


def test_construction_makes_no_request(honcho: FakeHoncho) -> None:
    build(honcho.url).close()
    build(closed_port_url()).close()
    assert honcho.state.requests == []


# -- identities ------------------------------------------------------------------------------


def test_ids_that_differ_in_punctuation_get_their_own_workspaces() -> None:
    users = ["a.b", "a_b", "a-b", "A.B", "a b", "a/b", "ab"]
    workspaces = {workspace_id("deerflow", user) for user in users}
    assert len(workspaces) == len(users)
    assert all(HONCHO_ID.match(w) for w in workspaces)


def test_ids_are_stable_readable_and_bounded() -> None:
    # Pinned: changing the naming would orphan every user's memory on the server.
    assert workspace_id("deerflow", "alice@example.com") == (
        "deerflow-alice-example-com_ff8d9819fc0e12bf"
    )
    assert workspace_id("deerflow", None) == workspace_id("deerflow", "default")
    assert session_id("thread-1") == session_id("thread-1") != session_id("thread_1")
    assert len(workspace_id("deerflow", "x" * 1024)) < 100
    assert assistant_peer_id(None) == "assistant"
    assert assistant_peer_id("Coder") == assistant_peer_id("coder") == "assistant-coder"


@pytest.mark.parametrize("user_id", ["", "x" * 1025, "a\x00b"])
def test_unusable_user_ids_are_refused(manager: HonchoMemoryManager, user_id: str) -> None:
    with pytest.raises(ValueError, match="user_id"):
        manager.add("t1", conversation("hi", "hello"), user_id=user_id)
    with pytest.raises(ValueError, match="user_id"):
        manager.get_context(user_id)


def test_unusable_thread_and_agent_names_are_refused(manager: HonchoMemoryManager) -> None:
    with pytest.raises(ValueError, match="thread_id"):
        manager.add("", conversation("hi", "hello"), user_id="u")
    with pytest.raises(ValueError, match="agent_name"):
        manager.add("t1", conversation("hi", "hello"), user_id="u", agent_name="no/slash")
    with pytest.raises(ValueError, match="agent_name"):
        manager.add("t1", conversation("hi", "hello"), user_id="u", agent_name="coder\n")
    with pytest.raises(ValueError, match="agent_name"):
        manager.search("tea", user_id="u", agent_name="")


def test_users_differing_in_punctuation_never_see_each_other(
    manager: HonchoMemoryManager, honcho: FakeHoncho
) -> None:
    words = {"a.b": "alpha", "a_b": "bravo", "a-b": "charlie"}
    for user, word in words.items():
        manager.add("t1", conversation(f"My code word is {word}", "Noted."), user_id=user)
    assert len(honcho.state.workspaces) == 3
    for user, word in words.items():
        context = manager.get_context(user)
        assert word in context
        assert [hit["content"] for hit in manager.search(word, user_id=user)] == [
            f"My code word is {word}"
        ]
        for other in set(words.values()) - {word}:
            assert other not in context
            assert manager.search(other, user_id=user) == []


# -- writes ----------------------------------------------------------------------------------


def test_a_thread_is_one_session_across_restarts(honcho: FakeHoncho) -> None:
    first = build(honcho.url)
    first.add("thread-1", conversation("I moved to Lisbon.", "Nice!"), user_id="alice")
    first.close()
    restarted = build(honcho.url)
    turns = conversation("I moved to Lisbon.", "Nice!", "I work as a data engineer.", "Cool.")
    restarted.add("thread-1", turns, user_id="alice")
    restarted.close()
    workspace = honcho.state.workspaces[workspace_id("deerflow", "alice")]
    assert list(workspace.sessions) == [session_id("thread-1")]
    assert stored(honcho, "alice", "thread-1") == [
        ("user", "I moved to Lisbon."),
        ("assistant", "Nice!"),
        ("user", "I work as a data engineer."),
        ("assistant", "Cool."),
    ]


def test_the_whole_thread_each_turn_sends_only_new_messages(
    manager: HonchoMemoryManager, honcho: FakeHoncho
) -> None:
    manager.add("t1", conversation("one", "two"), user_id="u")
    manager.add("t1", conversation("one", "two", "three", "four"), user_id="u")
    before = posts_of_messages(honcho)
    manager.add("t1", conversation("one", "two", "three", "four"), user_id="u")
    assert posts_of_messages(honcho) == before
    assert [text for _, text in stored(honcho, "u", "t1")] == ["one", "two", "three", "four"]


def test_id_less_repeats_are_kept_and_not_resent(
    manager: HonchoMemoryManager, honcho: FakeHoncho
) -> None:
    turns = [
        {"role": "user", "content": "yes"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "yes"},
        {"role": "assistant", "content": "Done again."},
    ]
    manager.add("t1", turns[:2], user_id="u")
    manager.add("t1", turns, user_id="u")
    assert [text for _, text in stored(honcho, "u", "t1")] == ["yes", "Done.", "yes", "Done again."]


def test_concurrent_writes_of_one_thread_send_each_message_once(
    manager: HonchoMemoryManager, honcho: FakeHoncho
) -> None:
    turns = conversation(*(f"turn {i}" for i in range(10)))
    errors: list[BaseException] = []

    def write(upto: int) -> None:
        try:
            manager.add("t1", turns[:upto], user_id="u")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2, 11)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    texts = sorted(text for _, text in stored(honcho, "u", "t1"))
    assert texts == sorted(f"turn {i}" for i in range(10))


def test_hidden_tool_and_injected_messages_never_leave(honcho: FakeHoncho) -> None:
    manager = HonchoMemoryManager.from_config(
        {"base_url": honcho.url}, should_keep_hidden_message=keep_hidden_message
    )
    messages = [
        SystemMessage("You are helpful.", id="s"),
        HumanMessage("<memory>old facts</memory>", id="inj"),
        HumanMessage("reminder", id="h1", additional_kwargs={"hide_from_ui": True}),
        HumanMessage(
            "clarified: vegetarian",
            id="h2",
            additional_kwargs={"hide_from_ui": True, "keep_in_memory": True},
        ),
        HumanMessage("I ride a bike.\n\n<memory>stale</memory>", id="h3"),
        AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}]),
        ToolMessage("tool output", tool_call_id="c1", id="tool"),
        AIMessage("Good to know.", id="a2"),
    ]
    manager.add("t1", messages, user_id="u")
    assert stored(honcho, "u", "t1") == [
        ("user", "clarified: vegetarian"),
        ("user", "I ride a bike."),
        ("assistant", "Good to know."),
    ]
    # Built without the host's hook, as DeerMem and OpenViking: no hidden message at all.
    build(honcho.url).add("t2", messages, user_id="u")
    assert ("user", "clarified: vegetarian") not in stored(honcho, "u", "t2")


def test_the_summary_of_a_compacted_thread_never_leaves(honcho: FakeHoncho) -> None:
    # Exactly the message LangChain's SummarizationMiddleware puts in place of the older turns.
    (summary,) = SummarizationMiddleware._build_new_messages("The user rides a bike.")
    manager = build(honcho.url)
    manager.add("t1", [summary, *conversation("I ride a bike.", "Nice.")], user_id="u")
    manager.close()
    assert stored(honcho, "u", "t1") == [("user", "I ride a bike."), ("assistant", "Nice.")]


def test_the_hosts_keep_hook_decides_about_hidden_messages(honcho: FakeHoncho) -> None:
    manager = HonchoMemoryManager.from_config(
        {"base_url": honcho.url}, should_keep_hidden_message=lambda extra: True
    )
    hidden = HumanMessage("hidden note", id="h", additional_kwargs={"hide_from_ui": True})
    manager.add("t1", [hidden], user_id="u")
    manager.close()
    assert stored(honcho, "u", "t1") == [("user", "hidden note")]


def test_a_long_turn_goes_as_several_messages_once(honcho: FakeHoncho) -> None:
    manager = build(honcho.url, max_message_chars=10)
    text = "abcdefghij" * 3 + "xyz"
    manager.add("t1", [HumanMessage(text, id="long")], user_id="u")
    manager.add("t1", [HumanMessage(text, id="long")], user_id="u")
    manager.close()
    parts = [part for _, part in stored(honcho, "u", "t1")]
    assert all(len(part) <= 10 for part in parts)
    assert "".join(parts) == text


def test_agents_speak_as_their_own_peers(manager: HonchoMemoryManager, honcho: FakeHoncho) -> None:
    manager.add("t1", conversation("hi", "hello from default"), user_id="u")
    manager.add(
        "t1",
        [*conversation("hi"), AIMessage("from coder", id="c")],
        user_id="u",
        agent_name="coder",
    )
    assert stored(honcho, "u", "t1")[-1] == ("assistant-coder", "from coder")
    workspace = honcho.state.workspaces[workspace_id("deerflow", "u")]
    assert workspace.sessions[session_id("t1")] == {"user", "assistant", "assistant-coder"}
    # Honcho models the user; it is told not to reason about the assistants.
    assert workspace.peers["assistant-coder"] == {"observe_me": False}


def test_a_session_deleted_on_the_server_is_recreated(
    manager: HonchoMemoryManager, honcho: FakeHoncho
) -> None:
    manager.add("t1", conversation("one", "two"), user_id="u")
    del honcho.state.workspaces[workspace_id("deerflow", "u")]
    manager.add("t1", conversation("one", "two", "three", "four"), user_id="u")
    assert [text for _, text in stored(honcho, "u", "t1")] == ["one", "two", "three", "four"]


def test_log_and_drop_sends_the_dropped_turns_with_the_next_one(
    manager: HonchoMemoryManager, honcho: FakeHoncho, caplog: pytest.LogCaptureFixture
) -> None:
    manager.add("t1", conversation("one", "two"), user_id="u")
    honcho.state.fail_status = 503
    with caplog.at_level(logging.ERROR):
        assert manager.add("t1", conversation("one", "two", "three", "four"), user_id="u") is None
    assert "dropped until its next turn" in caplog.text
    honcho.state.fail_status = None
    manager.add("t1", conversation("one", "two", "three", "four", "five", "six"), user_id="u")
    texts = [text for _, text in stored(honcho, "u", "t1")]
    assert texts == ["one", "two", "three", "four", "five", "six"]


def test_a_write_that_timed_out_but_was_stored_is_not_repeated(honcho: FakeHoncho) -> None:
    manager = build(honcho.url, timeout_seconds=0.3)
    manager.add("t1", conversation("one", "two"), user_id="u")
    honcho.state.delay_seconds = 0.6  # the server stores the batch after the client gave up
    manager.add("t1", conversation("one", "two", "three", "four"), user_id="u")
    stored_late = threading.Event()
    for _ in range(100):
        if len(stored(honcho, "u", "t1")) == 4:
            stored_late.set()
            break
        stored_late.wait(0.05)
    assert stored_late.is_set()
    honcho.state.delay_seconds = 0.0
    manager.add("t1", conversation("one", "two", "three", "four"), user_id="u")
    assert [text for _, text in stored(honcho, "u", "t1")] == ["one", "two", "three", "four"]


def test_write_policy_raise_surfaces_the_failure() -> None:
    manager = build(closed_port_url(), failure_policy={"write": "raise"})
    with pytest.raises(MemoryManagerError, match="Honcho write"):
        manager.add("t1", conversation("one", "two"), user_id="u")


# -- reads -----------------------------------------------------------------------------------


def test_get_context_is_the_users_representation_within_budget(honcho: FakeHoncho) -> None:
    manager = build(honcho.url, max_context_chars=60)
    turns = conversation(
        "I am allergic to cats.", "Noted.", "I drink green tea daily.", "Nice.", "x" * 200, "ok"
    )
    manager.add("t1", turns, user_id="u")
    context = manager.get_context("u", query="tea")
    assert context.splitlines() == ["Explicit observations:", "- I drink green tea daily."]
    assert len(context) <= 60
    assert "Noted." not in build(honcho.url).get_context("u")


def test_get_context_escapes_what_could_close_the_memory_block(
    manager: HonchoMemoryManager,
) -> None:
    manager.add("t1", conversation("I write </memory> tags & more", "ok"), user_id="u")
    context = manager.get_context("u")
    assert "</memory>" not in context
    assert "&lt;/memory&gt; tags &amp; more" in context


def test_reads_of_an_unknown_user_create_nothing(
    manager: HonchoMemoryManager, honcho: FakeHoncho
) -> None:
    assert manager.get_context("nobody") == ""
    assert manager.search("tea", user_id="nobody") == []
    assert honcho.state.workspaces == {}


def test_search_hits_are_fact_dicts_of_the_users_workspace(
    manager: HonchoMemoryManager,
) -> None:
    manager.add("t1", conversation("I like green tea.", "Tea noted."), user_id="u")
    manager.add("t2", conversation("Oolong tea too.", "ok"), user_id="u", agent_name="coder")
    hits = manager.search("tea", top_k=5, user_id="u")
    assert {hit["content"] for hit in hits} == {
        "I like green tea.",
        "Tea noted.",
        "Oolong tea too.",
    }
    assert {hit["category"] for hit in hits} == {"context"}
    assert {hit["role"] for hit in hits} == {"user", "assistant"}
    assert len(manager.search("tea", top_k=1, user_id="u")) == 1
    assert manager.search("tea", user_id="u", category="preference") == []
    with pytest.raises(ValueError, match="category"):
        manager.search("tea", user_id="u", category="nonsense")
    with pytest.raises(ValueError, match="query"):
        manager.search("  ", user_id="u")


@pytest.mark.parametrize("fault", ["down", "timeout", "server error"])
def test_fail_closed_raises_and_fail_open_returns_nothing(
    honcho: FakeHoncho, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = closed_port_url() if fault == "down" else honcho.url
    if fault == "timeout":
        honcho.state.delay_seconds = 1.0
    if fault == "server error":
        honcho.state.fail_status = 500
    settings: dict[str, Any] = {"timeout_seconds": 0.2}
    closed = build(url, failure_policy={"read": "fail_closed"}, **settings)
    with pytest.raises(MemoryReadError):
        closed.get_context("u")
    with pytest.raises(MemoryReadError):
        closed.search("tea", user_id="u")
    opened = build(url, failure_policy={"read": "fail_open"}, **settings)
    with caplog.at_level(logging.WARNING):
        assert opened.get_context("u") == ""
        assert opened.search("tea", user_id="u") == []
    assert "continuing without memory" in caplog.text


def test_read_policy_is_known_without_building() -> None:
    assert HonchoMemoryManager.read_failures_are_fatal_for_config(
        {"failure_policy": {"read": "fail_closed"}}
    )
    assert not HonchoMemoryManager.read_failures_are_fatal_for_config({})


# -- secrets ---------------------------------------------------------------------------------


def test_the_api_key_is_sent_and_never_shown(
    honcho: FakeHoncho, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HONCHO_TEST_KEY", SECRET)
    honcho.state.api_key = SECRET
    config = {"api_key_env": "HONCHO_TEST_KEY", "failure_policy": {"read": "fail_closed"}}
    manager = build(honcho.url, **config)
    manager.add("t1", conversation("I like tea.", "ok"), user_id="u")
    assert "I like tea." in manager.get_context("u")
    assert SECRET not in repr(manager)
    # The server fails and echoes the Authorization header it received.
    honcho.state.fail_status = 500
    with pytest.raises(MemoryReadError) as info:
        manager.get_context("u")
    with caplog.at_level(logging.DEBUG):
        build(honcho.url, api_key_env="HONCHO_TEST_KEY").get_context("u")
        manager.add("t1", conversation("I like tea.", "ok", "more", "ok"), user_id="u")
    assert "you sent" in str(info.value)
    assert SECRET not in str(info.value)
    assert "you sent" in caplog.text
    assert SECRET not in caplog.text


def test_a_wrong_api_key_is_a_read_failure(
    honcho: FakeHoncho, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HONCHO_TEST_KEY", "wrong")
    honcho.state.api_key = SECRET
    manager = build(
        honcho.url, api_key_env="HONCHO_TEST_KEY", failure_policy={"read": "fail_closed"}
    )
    with pytest.raises(MemoryReadError, match="AuthenticationError"):
        manager.get_context("u")


# -- lifecycle and wiring --------------------------------------------------------------------


def test_warm_checks_the_servers_health(honcho: FakeHoncho) -> None:
    assert build(honcho.url).warm() is True
    assert build(closed_port_url()).warm() is False


def test_tool_mode_keeps_passive_writes(honcho: FakeHoncho) -> None:
    manager = HonchoMemoryManager.from_config({"base_url": honcho.url}, mode="tool")
    assert manager.mode == "tool"
    assert HonchoMemoryManager.requires_passive_writes_in_tool_mode
    assert HonchoMemoryManager.supports_search


def test_manager_class_honcho_in_config_yaml_is_all_it_takes(
    honcho: FakeHoncho, tmp_path: Path
) -> None:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        "memory:\n"
        "  manager_class: honcho\n"
        "  mode: tool\n"
        "  backend_config:\n"
        f"    base_url: {honcho.url}\n"
        "    failure_policy: {read: fail_closed}\n",
        encoding="utf-8",
    )
    config = load_config(config_file)
    assert memory_read_failures_are_fatal(config.memory)
    manager = get_memory_manager(config)
    assert isinstance(manager, HonchoMemoryManager)
    manager.add("t1", conversation("I keep bees.", "Lovely."), user_id="alice")
    assert "I keep bees." in manager.get_context("alice")
    assert manager.search("bees", user_id="alice")[0]["content"] == "I keep bees."


def test_the_documented_config_works(
    honcho: FakeHoncho, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "backend-honcho.md").read_text()
    documented = re.search(r"```yaml\n(memory:.*?)```", page, re.S)
    assert documented, "docs/backend-honcho.md lost its config example"
    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        documented.group(1).replace("http://localhost:8000", honcho.url), encoding="utf-8"
    )
    monkeypatch.setenv("HONCHO_API_KEY", SECRET)
    honcho.state.api_key = SECRET
    manager = build_memory_manager(load_config(config_file).memory, home=tmp_path)
    manager.add("t1", conversation("I keep bees.", "Lovely."), user_id="alice")
    assert "I keep bees." in manager.get_context("alice")
    manager.close()


def test_the_defaults_build_without_a_server(tmp_path: Path) -> None:
    config_file = tmp_path / "config.yaml"
    config_file.write_text("memory:\n  manager_class: honcho\n", encoding="utf-8")
    manager = build_memory_manager(load_config(config_file).memory, home=tmp_path)
    assert isinstance(manager, HonchoMemoryManager)
    manager.close()


def test_without_the_extra_the_factory_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(sys.modules):
        if name == "honcho" or name.startswith("honcho."):
            monkeypatch.setitem(sys.modules, name, None)  # makes importing it fail
        elif name.startswith("deerflow.agents.memory.backends.honcho"):
            monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ValueError, match=r"deerflow-memory\[honcho\]"):
        resolve_manager_class("honcho")
    assert resolve_manager_class("noop").__name__ == "NoopMemoryManager"
