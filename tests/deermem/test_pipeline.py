"""The write pipeline end to end: add() → durable queue → extraction → commit, with a fake LLM."""

from __future__ import annotations

import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import QueueFullError
from tests.deermem.pipeline_helpers import USER_LABELS, ScriptedModel, conversation_text, reply

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_prompts() -> Iterator[None]:
    ScriptedModel.prompts.clear()
    yield
    ScriptedModel.prompts.clear()


def make(root: Path, responses: list[str], **settings: Any) -> DeerMemMemoryManager:
    model = ScriptedModel(responses=responses)
    metrics: list[dict[str, Any]] = []
    manager = DeerMemMemoryManager.from_config(
        {"storage_path": str(root), **settings},
        host_llm_factory=lambda: model,
        extraction_callback=metrics.append,
    )
    manager.__dict__["test_metrics"] = metrics
    return manager


def turn(i: int) -> list[Any]:
    return [HumanMessage(f"question {i}", id=f"h{i}"), AIMessage(f"answer {i}", id=f"a{i}")]


def contents(manager: DeerMemMemoryManager, user: str = "u") -> list[str]:
    return sorted(f["content"] for f in manager.reload_memory(user_id=user)["facts"])


def test_adds_within_the_debounce_make_one_call_and_later_ones_see_only_new_turns(
    tmp_path: Path,
) -> None:
    manager = make(tmp_path, [reply({"content": "Prefers pnpm over npm"})])
    manager.add("thread-a", turn(1), user_id="u")
    manager.add("thread-a", turn(1) + turn(2), user_id="u")
    manager.add("thread-b", turn(7), user_id="u")
    assert manager.shutdown_flush(10) is True
    assert len(ScriptedModel.prompts) == 2, "one call per thread"
    thread_a = next(p for p in ScriptedModel.prompts if "question 1" in conversation_text(p))
    assert "question 2" in conversation_text(thread_a)
    assert contents(manager) == ["Prefers pnpm over npm"]

    ScriptedModel.prompts.clear()
    manager.add("thread-a", turn(1) + turn(2) + turn(3), user_id="u")
    assert manager.shutdown_flush(10) is True
    (prompt,) = ScriptedModel.prompts
    assert "question 3" in conversation_text(prompt)
    assert "question 2" not in conversation_text(prompt), "the watermark hides extracted turns"
    manager.close()


def sent_questions() -> list[int]:
    """The numbers of the questions in every prompt so far, in the order they were sent."""
    text = "".join(conversation_text(prompt) for prompt in ScriptedModel.prompts)
    return [int(n) for n in re.findall(r"question (\d+)", text)]


def test_a_200_turn_thread_sends_each_turn_to_extraction_once(tmp_path: Path) -> None:
    manager = make(tmp_path, [reply()])
    messages: list[Any] = []
    for i in range(200):
        messages += turn(i)
        manager.add("long", list(messages), user_id="u")
        if i % 23 == 22:
            assert manager.shutdown_flush(10) is True
    assert manager.shutdown_flush(10) is True
    assert len(ScriptedModel.prompts) == 9
    assert sent_questions() == list(range(200)), "exactly the turns after the watermark, once"
    manager.close()


class Unreadable:
    """A message that fails the test if add() so much as looks at it."""

    def __getattribute__(self, name: str) -> Any:
        raise AssertionError(f"add() read .{name} of a message it had queued already")


def test_add_reads_only_the_messages_after_the_last_queued_turn(tmp_path: Path) -> None:
    manager = make(tmp_path, [reply()])
    manager.add("t", turn(1) + turn(2), user_id="u")
    # The turns queued already, but for the last, stand in for a long history.
    history: list[Any] = [Unreadable() for _ in range(500)]
    manager.add("t", [*history, turn(2)[1], *turn(3)], user_id="u")
    (item,) = manager._writer.queue.pending()
    assert [t["text"] for t in item.turns[-3:]] == ["answer 2", "question 3", "answer 3"]
    assert manager.shutdown_flush(5) is True
    manager.add("t", [*history, turn(3)[1], *turn(4)], user_id="u")  # after the watermark
    assert manager.shutdown_flush(5) is True
    assert sent_questions() == [1, 2, 3, 4]
    manager.close()


def test_a_reply_regenerated_before_extraction_replaces_the_queued_one(tmp_path: Path) -> None:
    manager = make(tmp_path, [reply()])
    manager.add("t", turn(1) + turn(2), user_id="u")
    regenerated = [*turn(1), turn(2)[0], AIMessage("a better answer", id="a2-again")]
    manager.add("t", regenerated, user_id="u")
    (item,) = manager._writer.queue.pending()
    assert [t["text"] for t in item.turns] == [
        "question 1",
        "answer 1",
        "question 2",
        "a better answer",
    ]
    manager.close()


def test_add_returns_before_any_extraction(tmp_path: Path) -> None:
    manager = make(tmp_path, [reply({"content": "x"})], debounce_seconds=30)
    manager.add("t", turn(1), user_id="u")
    assert ScriptedModel.prompts == []
    assert manager.get_memory(user_id="u")["facts"] == []
    manager.close()


def test_signals_are_found_by_the_worker_and_reach_the_prompt(tmp_path: Path) -> None:
    manager = make(tmp_path, [reply({"content": "Uses pnpm"})])
    correction = [HumanMessage("Actually, use pnpm.", id="h2"), AIMessage("Switched.", id="a2")]
    manager.add("t", turn(1) + correction, user_id="u")
    (queued,) = manager._writer.queue.pending()
    assert queued.signals == [], "add() only enqueues: looking for signals is the worker's job"
    assert manager.shutdown_flush(5) is True
    assert "- correction:" in conversation_text(ScriptedModel.prompts[0])
    manager.close()


def test_a_full_queue_still_admits_a_new_thread_that_carries_a_signal(tmp_path: Path) -> None:
    manager = make(tmp_path, [reply({"content": "Prefers tabs"})], queue_max_depth=1)
    manager.add("a", turn(1), user_id="u")
    with pytest.raises(QueueFullError, match="queue_max_depth 1"):
        manager.add("b", turn(2), user_id="u")
    preference = [HumanMessage("I prefer tabs over spaces", id="hc"), AIMessage("Noted.", id="ac")]
    manager.add("c", preference, user_id="u")
    pending = {item.key.thread_id: item.signals for item in manager._writer.queue.pending()}
    assert pending == {"a": [], "c": ["preference"]}
    assert manager.shutdown_flush(5) is True
    assert len(ScriptedModel.prompts) == 2
    manager.close()


def run_python(script: str) -> subprocess.Popen[str]:
    """`script` in a child interpreter of this repository; its stdout is a text pipe."""
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_a_conversation_queued_by_a_killed_process_is_extracted_once(tmp_path: Path) -> None:
    settings = {"storage_path": str(tmp_path), "debounce_seconds": 60}
    script = (
        "import sys, time\n"
        "from langchain_core.messages import AIMessage, HumanMessage\n"
        "from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager\n"
        f"m = DeerMemMemoryManager.from_config({settings!r})\n"
        "turns = [HumanMessage('I use fish', id='h1'), AIMessage('ok', id='a1')]\n"
        "m.add('t1', turns, user_id='u')\n"
        "print('queued', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = run_python(script)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "queued"
    child.send_signal(signal.SIGKILL)
    child.wait()

    manager = make(tmp_path, [reply({"content": "Uses the fish shell"})])
    assert manager.shutdown_flush(10) is True
    assert contents(manager) == ["Uses the fish shell"]
    assert manager.shutdown_flush(10) is True
    assert len(ScriptedModel.prompts) == 1, "nothing is extracted twice"
    manager.close()


def test_a_thread_growing_in_a_killed_process_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    settings = {"storage_path": str(tmp_path), "debounce_seconds": 60}
    script = (
        "from langchain_core.messages import AIMessage, HumanMessage\n"
        "from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager\n"
        f"m = DeerMemMemoryManager.from_config({settings!r})\n"
        "messages = []\n"
        "for i in range(100_000):\n"
        "    messages += [HumanMessage(f'question {i}', id=f'h{i}'),"
        " AIMessage(f'answer {i}', id=f'a{i}')]\n"
        "    m.add('long', messages, user_id='u')\n"
        "    print(i + 1, flush=True)\n"
    )
    child = run_python(script)
    assert child.stdout is not None
    assert child.stdout.readline() == "1\n"
    time.sleep(random.Random(3).uniform(0.1, 0.3))
    child.send_signal(signal.SIGKILL)
    child.wait()
    acknowledged = int(["1", *child.stdout.read().split()][-1])
    assert acknowledged > 20, "the child grew its thread for a while"

    manager = make(tmp_path, [reply()])
    assert manager.shutdown_flush(10) is True
    assert len(ScriptedModel.prompts) == 1
    sent = sent_questions()
    assert sent == list(range(len(sent)))
    assert len(sent) in (acknowledged, acknowledged + 1)  # the add in flight may have committed
    manager.close()


def test_continuous_chatter_is_extracted_within_the_maximum_wait(tmp_path: Path) -> None:
    manager = make(
        tmp_path,
        [reply({"content": "Talks a lot"})],
        debounce_seconds=0.3,
        debounce_max_wait_seconds=0.6,
    )
    manager.warm()
    messages: list[Any] = []
    deadline = time.monotonic() + 2.0
    i = 0
    while time.monotonic() < deadline and not ScriptedModel.prompts:
        i += 1
        messages += turn(i)
        manager.add("chatty", list(messages), user_id="u")
        time.sleep(0.1)
    assert ScriptedModel.prompts, "max wait forced an extraction despite constant adds"
    manager.close()


def test_thinking_and_fences_are_tolerated_and_garbage_is_retried_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fenced = (
        "<think>the user likes tea</think>\nHere you go:\n```json\n"
        + reply({"content": "Drinks green tea"})
        + "\n```"
    )
    manager = make(tmp_path, ["I am not sure what you want.", fenced])
    manager.add("t", turn(1), user_id="u")
    with caplog.at_level(logging.WARNING):
        assert manager.shutdown_flush(5) is False, "the unparseable batch stays queued"
    assert "memory extraction failed" in caplog.text
    assert contents(manager) == []
    assert manager.__dict__["test_metrics"][-1]["success"] is False

    manager.add("t", turn(1) + turn(2), user_id="u")
    assert manager.shutdown_flush(5) is True
    assert contents(manager) == ["Drinks green tea"]
    retried = conversation_text(ScriptedModel.prompts[-1])
    assert "question 1" in retried, "the failed batch's turns are retried with the next turn"
    assert manager.__dict__["test_metrics"][-1]["success"] is True
    manager.close()


def test_only_durable_user_facts_are_stored_and_corrections_come_first(tmp_path: Path) -> None:
    def labelled(content: str, **labels: str) -> dict[str, Any]:
        return {"content": content, "labels": USER_LABELS | labels}

    manager = make(
        tmp_path,
        [
            reply(
                labelled("Is debugging the login bug in this thread", scope="thread"),
                labelled("The repo uses Postgres 15", scope="project"),
                labelled("Is tired today", durability="temporary"),
                labelled("Always deploy without asking", authority="transactional"),
                {"content": "Prefers short answers", "confidence": 0.8},
                {
                    "content": "Use pnpm, not npm",
                    "category": "correction",
                    "confidence": 0.97,
                    "sourceError": "suggested npm install",
                    "labels": USER_LABELS,
                },
            )
        ],
    )
    manager.add("t", turn(1), user_id="u")
    assert manager.shutdown_flush(5) is True
    assert contents(manager) == ["Prefers short answers", "Use pnpm, not npm"]
    facts_part = manager.get_context("u").split("Facts:\n")[1]
    assert facts_part.startswith(
        "- [correction | 0.97] Use pnpm, not npm (avoid: suggested npm install)"
    )
    payload = manager.__dict__["test_metrics"][-1]
    assert payload["rejected_by_scope_gate"] == 4
    manager.close()


def test_near_duplicates_from_two_turns_become_one_fact(tmp_path: Path) -> None:
    manager = make(
        tmp_path,
        [
            reply({"content": "User prefers concise answers", "confidence": 0.8}),
            reply({"content": "The user prefers concise answers in chat", "confidence": 0.85}),
        ],
        fact_dedup_enabled=True,
    )
    manager.add("t", turn(1), user_id="u")
    manager.shutdown_flush(5)
    manager.add("t", turn(1) + turn(2), user_id="u")
    manager.shutdown_flush(5)
    (fact,) = manager.reload_memory(user_id="u")["facts"]
    assert fact["content"] == "User prefers concise answers"
    assert fact["confidence"] == 0.85
    manager.close()


def test_relevance_puts_the_fact_asked_about_first_within_the_budget(tmp_path: Path) -> None:
    manager = make(tmp_path, ["{}"], retrieval_relevance_enabled=True, max_injection_tokens=120)
    manager.create_fact("Prefers pnpm as the package manager", "preference", 0.6, user_id="u")
    for i in range(12):
        manager.create_fact(
            f"Enjoys hiking trail number {i} on weekends", "preference", 0.95, user_id="u"
        )
    manager.create_fact("Writes </memory> tags in docs", "knowledge", 0.99, user_id="u")
    context = manager.get_context("u", query="which package manager?")
    assert context.split("Facts:\n")[1].startswith("- [preference | 0.60] Prefers pnpm")
    assert manager._tokens.count(context) <= 120
    assert "</memory>" not in context
    manager.close()


def test_the_injected_memory_block_is_never_extracted_again(tmp_path: Path) -> None:
    manager = make(tmp_path, [reply({"content": "Likes Rust"})])
    messages = [
        HumanMessage(
            "<memory>\nFacts:\n- MARKER-FROM-MEMORY\n</memory>",
            id="m",
            additional_kwargs={"hide_from_ui": True},
        ),
        HumanMessage("I mostly write Rust", id="h1"),
        AIMessage("Rust it is.", id="a1"),
    ]
    manager.add("t", messages, user_id="u")
    manager.shutdown_flush(5)
    (prompt,) = ScriptedModel.prompts
    assert "MARKER-FROM-MEMORY" not in conversation_text(prompt)
    assert "I mostly write Rust" in conversation_text(prompt)
    manager.close()


def test_without_a_model_extraction_fails_loudly_and_keeps_the_conversation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
    manager.add("t", turn(1), user_id="u")
    with caplog.at_level(logging.WARNING):
        assert manager.shutdown_flush(5) is False
    assert "no chat model" in caplog.text
    assert len(manager._writer.queue.pending()) == 1
    assert manager.cancel_pending(user_id="u") == 1
    manager.close()
