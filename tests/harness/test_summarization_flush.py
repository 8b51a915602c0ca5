"""Summarising a long thread first hands exactly the messages it drops to `add_nowait`, once."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain.agents.middleware import SummarizationMiddleware

from deerflow.agents.memory.manager import MemoryConflictError
from deerflow.agents.memory_wiring import wire_memory
from deerflow.agents.middlewares.summarization import MemoryFlushSummarizationMiddleware
from deerflow.config import AppConfig, MemoryConfig, SummarizationConfig
from tests.harness.fakes import HOW, How, RecordingManager, ScriptedChatModel, build_agent, run_turn

# Summarise once the thread holds 6 messages, keeping the last 2.
SUMMARIZE = SummarizationConfig(trigger_tokens=None, trigger_messages=6, keep_messages=2)


def long_thread(manager: RecordingManager, how: How, **memory: Any) -> list[Any]:
    """Four turns; the fourth model call finds 7 messages and summarises first."""
    config = AppConfig(memory=MemoryConfig(**memory), summarization=SUMMARIZE)
    model = ScriptedChatModel.replying(
        "answer 1", "answer 2", "answer 3", "SUMMARY OF 1-3", "answer 4"
    )
    agent = build_agent(
        model, wire_memory(config, manager, agent_name="coder", tools=[], model=model)
    )
    for turn in range(1, 4):
        run_turn(agent, f"question {turn}", thread="long", user="alice", how=how)
    assert manager.writes("add_nowait") == [], "nothing is summarised below the trigger"
    return run_turn(agent, "question 4", thread="long", user="alice", how=how)


@pytest.mark.parametrize("how", HOW)
def test_the_dropped_messages_go_to_add_nowait_once_before_the_summary_replaces_them(
    how: How,
) -> None:
    manager = RecordingManager()
    after = long_thread(manager, how)

    ((thread, flushed, kwargs),) = manager.writes("add_nowait")
    assert thread == "long"
    assert kwargs == {"agent_name": "coder", "user_id": "alice"}
    assert [m.content for m in flushed] == [
        "question 1", "answer 1", "question 2", "answer 2", "question 3",
    ]  # fmt: skip
    kept = {m.id for m in after}
    assert not any(m.id in kept for m in flushed), "only what the summary replaced was flushed"
    assert [m.content for m in after][1:] == ["answer 3", "question 4", "answer 4"]
    assert "SUMMARY OF 1-3" in str(after[0].content)


def test_summarisation_without_memory_flushes_nothing() -> None:
    manager = RecordingManager()
    after = long_thread(manager, "invoke", enabled=False)
    assert manager.calls == []
    assert "SUMMARY OF 1-3" in str(after[0].content)


def test_a_failed_flush_is_logged_and_the_thread_is_still_summarised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Refusing(RecordingManager):
        def add_nowait(self, thread_id: str, messages: list[Any], **kwargs: Any) -> None:
            raise MemoryConflictError("queue is full")

    with caplog.at_level(logging.ERROR):
        after = long_thread(Refusing(), "invoke")
    assert "memory flush before summarisation failed for user 'alice'" in caplog.text
    assert after[-1].content == "answer 4"


def test_a_failed_flush_keeps_the_messages_when_the_write_policy_says_raise() -> None:
    class Refusing(RecordingManager):
        def add_nowait(self, thread_id: str, messages: list[Any], **kwargs: Any) -> None:
            raise MemoryConflictError("remote write refused")

    manager = Refusing.from_config({"failure_policy": {"write": "raise"}})
    with pytest.raises(MemoryConflictError, match="remote write refused"):
        long_thread(manager, "invoke")


def test_the_wiring_builds_summarisation_from_config() -> None:
    model = ScriptedChatModel.replying()
    config = AppConfig(
        summarization=SummarizationConfig(trigger_tokens=500, trigger_messages=40, keep_messages=7)
    )
    wiring = wire_memory(config, RecordingManager(), agent_name=None, tools=[], model=model)
    summarization = wiring.middleware[-1]
    assert isinstance(summarization, MemoryFlushSummarizationMiddleware)
    assert summarization.trigger == [("tokens", 500), ("messages", 40)]
    assert summarization.keep == ("messages", 7)

    off = AppConfig(summarization=SummarizationConfig(enabled=False))
    wiring = wire_memory(off, RecordingManager(), agent_name=None, tools=[], model=model)
    assert not any(isinstance(m, SummarizationMiddleware) for m in wiring.middleware)


def test_enabled_summarisation_needs_a_trigger() -> None:
    with pytest.raises(ValueError, match="needs trigger_tokens or trigger_messages"):
        SummarizationConfig(trigger_tokens=None)
    assert SummarizationConfig(enabled=False, trigger_tokens=None).enabled is False
