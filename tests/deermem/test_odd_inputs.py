"""Inputs that used to slip through: each is refused with a clear, typed error, or kept exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.core.paths import safe_user_id
from tests.deermem.storage_helpers import reopened


@pytest.fixture
def manager(tmp_path: Path) -> DeerMemMemoryManager:
    return DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})


@pytest.mark.parametrize(
    "query", ["coffee\x00", "\x00", "tea\ud800", "\x1b[2J tea", "'\x00\"", "tea\x0b"]
)
def test_search_takes_any_text_without_an_engine_error(
    manager: DeerMemMemoryManager, query: str
) -> None:
    manager.create_fact("Drinks tea and coffee", user_id="u")
    hits = manager.search(query, user_id="u")
    assert all(hit["content"] == "Drinks tea and coffee" for hit in hits)
    assert isinstance(manager.get_context("u", query=query), str)


@pytest.mark.parametrize("query", [None, 3, b"tea"])
def test_a_query_that_is_not_text_is_a_value_error(
    manager: DeerMemMemoryManager, query: Any
) -> None:
    with pytest.raises(ValueError, match="query: must be text"):
        manager.search(query, user_id="u")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("\u200b", "nothing visible"),
        ("\x00\x01", "control character U\\+0000"),
        ("Evil \x1b]0;pwned\x07 title", "control character U\\+001B"),
        ("a\x85b", "control character U\\+0085"),
        ("tea\ud800", "lone surrogate"),
    ],
)
def test_content_a_terminal_or_a_file_cannot_hold_is_refused(
    manager: DeerMemMemoryManager, content: str, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^content: .*{message}"):
        manager.create_fact(content, user_id="u")
    with pytest.raises(ValueError, match=f"facts\\[0\\]\\.content: .*{message}"):
        manager.import_memory({"facts": [{"content": content}]}, user_id="u")
    assert manager.get_memory(user_id="u")["revision"] == 0


@pytest.mark.parametrize(
    ("content", "kept"),
    [
        ("one\r\ntwo", "one\ntwo"),
        ("one\rtwo", "one\ntwo"),
        ("one\u2028two", "one\u2028two"),
        ("tab\tand emoji 👩\u200d💻", "tab\tand emoji 👩\u200d💻"),
    ],
)
def test_content_comes_back_the_same_from_the_writer_and_from_another_process(
    manager: DeerMemMemoryManager, content: str, kept: str
) -> None:
    document, fact_id = manager.create_fact(content, user_id="u")
    [written] = document["facts"]
    assert written["content"] == kept
    [read] = reopened(manager).get_memory(user_id="u")["facts"]
    assert (read["id"], read["content"]) == (fact_id, kept)


@pytest.mark.parametrize("agent", ["coder\n", "a" * 129])
def test_agent_names_with_a_trailing_newline_or_too_long_are_refused(
    manager: DeerMemMemoryManager, agent: str
) -> None:
    with pytest.raises(ValueError, match=r"^agent_name: "):
        manager.create_fact("Drinks tea", user_id="u", agent_name=agent)
    with pytest.raises(ValueError, match=r"^agent_name: "):
        manager.get_context("u", agent_name=agent)
    assert manager.agent_names(user_id="u") == []


def test_a_user_id_with_a_trailing_newline_is_not_kept_as_a_directory_name() -> None:
    assert safe_user_id("alice") == "alice"
    assert "\n" not in safe_user_id("alice\n")
    assert safe_user_id("alice\n") != safe_user_id("alice")


@pytest.mark.parametrize(
    ("user_id", "message"),
    [("   ", "must be non-empty text"), ("al\ud800ice", "lone surrogate"), ("", "non-empty")],
)
def test_bad_user_ids_are_refused_when_queued_not_in_the_worker(
    manager: DeerMemMemoryManager, user_id: str, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^user_id: .*{message}"):
        manager.add("t1", [], user_id=user_id)
    with pytest.raises(ValueError, match=f"^user_id: .*{message}"):
        manager.add_nowait("t1", [], user_id=user_id)
    with pytest.raises(ValueError, match=f"^user_id: .*{message}"):
        manager.create_fact("Drinks tea", user_id=user_id)


def test_an_imported_id_with_a_trailing_newline_is_replaced(
    manager: DeerMemMemoryManager,
) -> None:
    manager.import_memory({"facts": [{"id": "fact_deadbeef\n", "content": "x"}]}, user_id="u")
    [stored] = manager.get_memory(user_id="u")["facts"]
    assert stored["id"] != "fact_deadbeef\n"
    assert "\n" not in stored["id"]


def test_a_negative_zero_confidence_is_stored_as_zero(manager: DeerMemMemoryManager) -> None:
    document, _ = manager.create_fact("Drinks tea", confidence=-0.0, user_id="u")
    assert str(document["facts"][0]["confidence"]) == "0.0"
    assert "-0" not in manager.get_context("u")


def test_reading_or_clearing_a_user_with_nothing_stored_leaves_nothing_behind(
    manager: DeerMemMemoryManager, tmp_path: Path
) -> None:
    manager.create_fact("Drinks tea", user_id="u")
    before = sorted(p.name for p in (tmp_path / "users").iterdir())
    assert manager.get_memory(user_id="nobody")["facts"] == []
    assert manager.get_context("nobody") == ""
    assert manager.search("tea", user_id="nobody") == []
    assert manager.get_history(user_id="nobody") == []
    with pytest.raises(ValueError, match="no change"):
        manager.revert_change("chg_0", user_id="weird user/../x")
    manager.audit(user_id="nobody")
    reopened(manager).reload_memory(user_id="nobody")
    assert manager.clear_memory(user_id="nobody")["facts"] == []
    assert manager.clear_memory(user_id="nobody", agent_name="coder")["facts"] == []
    assert sorted(p.name for p in (tmp_path / "users").iterdir()) == before


@pytest.mark.parametrize("thread_id", ["", "t\ud800", "a\x00b", None, 3])
def test_bad_thread_ids_are_refused_when_queued(
    manager: DeerMemMemoryManager, thread_id: Any
) -> None:
    with pytest.raises(ValueError, match=r"^thread_id: "):
        manager.add(thread_id, [], user_id="u")
    with pytest.raises(ValueError, match=r"^thread_id: "):
        manager.add_nowait(thread_id, [], user_id="u")
