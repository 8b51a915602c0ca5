"""Filtering a conversation before extraction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    add_notification_metadata,
)

from deerflow.agents.memory.backends.deermem.deermem.pipeline.filtering import (
    PreparedConversation,
    Turn,
    prepare_conversation,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.signals import SignalPatterns

HIDDEN = {"hide_from_ui": True}
MEMORY_BLOCK = "<memory>\nFacts:\n- [preference | 0.90] Prefers uv over pip\n</memory>"
UPLOADS = "<uploaded_files>\n- /mnt/user-data/uploads/report.pdf (2 MB)\n</uploaded_files>"


def prepared(messages: list[Any], **kwargs: Any) -> PreparedConversation:
    result = prepare_conversation(messages, **kwargs)
    assert result is not None
    return result


def pairs(result: PreparedConversation) -> list[tuple[str, str]]:
    return [(turn.role, turn.text) for turn in result.turns]


def test_a_realistic_langchain_conversation() -> None:
    messages = [
        SystemMessage("You are DeerFlow.\n" + MEMORY_BLOCK),
        HumanMessage(MEMORY_BLOCK, additional_kwargs=HIDDEN, id="mem"),
        HumanMessage(UPLOADS + "\n\nWhich quarter had the best revenue?", id="h1"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "read_file", "args": {"path": "report.pdf"}, "id": "call_1"}],
        ),
        ToolMessage("Q1 1.2M, Q2 1.9M, Q3 1.4M", tool_call_id="call_1", id="t1"),
        AIMessage("Q2 had the best revenue: 1.9M.", id="a2"),
        HumanMessage([{"type": "text", "text": UPLOADS}], id="h2"),
        AIMessage("I see a new upload. Anything to do with it?", id="a3"),
        HumanMessage("thanks!", id="h3"),
        AIMessage("You're welcome!", id="a4"),
        HumanMessage("No, I meant net revenue. I prefer numbers in EUR.", id="h4"),
        AIMessage("Net revenue peaked in Q2 at €1.1M.", id="a5"),
    ]
    result = prepared(messages)
    assert [turn.message_id for turn in result.turns] == ["h1", "a2", "h4", "a5"]
    assert pairs(result) == [
        ("user", "Which quarter had the best revenue?"),
        ("assistant", "Q2 had the best revenue: 1.9M."),
        ("user", "No, I meant net revenue. I prefer numbers in EUR."),
        ("assistant", "Net revenue peaked in Q2 at €1.1M."),
    ]
    assert result.signals == {"correction", "preference"}


def test_plain_dicts_with_every_role_spelling() -> None:
    messages = [
        {"role": "user", "content": "I work at Acme.", "id": "u1"},
        {"role": "ai", "content": "Noted."},
        {"role": "human", "content": [{"type": "text", "text": "我叫王伟"}], "id": 7},
        {"role": "assistant", "content": "你好，王伟", "additional_kwargs": {}},
        {"role": "system", "content": "be brief"},
        {"role": "tool", "content": "{}", "tool_call_id": "x"},
    ]
    result = prepared(messages)
    assert [(turn.role, turn.text, turn.message_id) for turn in result.turns] == [
        ("user", "I work at Acme.", "u1"),
        ("assistant", "Noted.", None),
        ("user", "我叫王伟", "7"),
        ("assistant", "你好，王伟", None),
    ]
    assert result.signals == {"identity"}


def test_other_langchain_message_kinds() -> None:
    messages = [
        ChatMessage(role="user", content="Hello there"),
        ChatMessage(role="developer", content="hidden instructions"),
        FunctionMessage(name="lookup", content="result"),
        AIMessageChunk(content="Hi!"),
    ]
    assert pairs(prepared(messages)) == [("user", "Hello there"), ("assistant", "Hi!")]


def test_content_blocks_keep_text_and_drop_images_and_files() -> None:
    question: list[str | dict[str, Any]] = [
        {"type": "text", "text": "What is in this chart?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "file", "file_id": "file-1"},
        "Focus on the trend.",
    ]
    answer: list[str | dict[str, Any]] = [
        {"type": "reasoning", "reasoning": "the user wants a trend"},
        {"type": "text", "text": "Revenue grows every quarter."},
    ]
    assert pairs(prepared([HumanMessage(question), AIMessage(answer)])) == [
        ("user", "What is in this chart?\nFocus on the trend."),
        ("assistant", "Revenue grows every quarter."),
    ]


@pytest.mark.parametrize(
    "tool_call",
    [
        AIMessage("", tool_calls=[{"name": "search", "args": {}, "id": "c1"}]),
        AIMessage("Let me look.", tool_calls=[{"name": "search", "args": {}, "id": "c1"}]),
        AIMessage("", invalid_tool_calls=[{"name": "search", "args": "{", "id": "c1"}]),
        AIMessage("", additional_kwargs={"tool_calls": [{"id": "c1", "type": "function"}]}),
        AIMessage("", additional_kwargs={"function_call": {"name": "search"}}),
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]},
    ],
)
def test_tool_calling_ai_messages_are_not_final_replies(tool_call: Any) -> None:
    messages = [HumanMessage("Find the docs"), tool_call, AIMessage("Here they are.")]
    assert pairs(prepared(messages)) == [("user", "Find the docs"), ("assistant", "Here they are.")]


def test_hidden_messages_are_dropped_unless_kept() -> None:
    messages = [
        HumanMessage("Use pnpm, not npm", additional_kwargs={**HIDDEN, "keep_in_memory": True}),
        HumanMessage("todo reminder", additional_kwargs=HIDDEN),
        AIMessage("hidden aside", additional_kwargs=HIDDEN),
        HumanMessage("Set up the project"),
        AIMessage("Done."),
    ]
    assert pairs(prepared(messages)) == [("user", "Set up the project"), ("assistant", "Done.")]

    seen: list[dict[str, Any]] = []

    def keep_flagged(additional_kwargs: dict[str, Any]) -> bool:
        seen.append(additional_kwargs)
        additional_kwargs["tampered"] = True
        return additional_kwargs.get("keep_in_memory") is True

    result = prepared(messages, keep_hidden=keep_flagged)
    assert pairs(result)[0] == ("user", "Use pnpm, not npm")
    assert len(result.turns) == 3
    assert len(seen) == 3
    # The hook gets a copy: the caller's messages stay as they were.
    assert "tampered" not in messages[0].additional_kwargs


def test_the_memory_block_never_feeds_back() -> None:
    messages = [
        HumanMessage(MEMORY_BLOCK),
        HumanMessage("  <memory>\nFacts: truncated by summarisation"),
        HumanMessage(MEMORY_BLOCK, additional_kwargs=HIDDEN),
        HumanMessage(f"Before {MEMORY_BLOCK}\n\n\n\nafter: what is my name?"),
        AIMessage(f"{MEMORY_BLOCK}You told me it is Lin."),
    ]
    result = prepared(messages, keep_hidden=lambda _: True)
    assert pairs(result) == [
        ("user", "Before \n\nafter: what is my name?"),
        ("assistant", "You told me it is Lin."),
    ]
    assert result.signals == frozenset()


def test_the_summary_of_a_compacted_thread_and_other_notifications_are_not_learned_from() -> None:
    # Exactly the message LangChain's SummarizationMiddleware puts in place of the older turns.
    (summary,) = SummarizationMiddleware._build_new_messages("The user prefers npm.")
    assert summary.additional_kwargs == {"lc_source": "summarization"}
    task = add_notification_metadata(HumanMessage("Task t_42 finished."), source="async_subagent")
    messages = [
        summary,
        AIMessage("Answer 3."),
        task,
        HumanMessage("Which one should I pick?"),
        AIMessage("pnpm."),
    ]
    expected = [
        ("assistant", "Answer 3."),
        ("user", "Which one should I pick?"),
        ("assistant", "pnpm."),
    ]
    result = prepared(messages, keep_hidden=lambda _: True)
    assert pairs(result) == expected
    assert result.signals == frozenset(), "the summary's 'prefers' is not a signal either"
    as_dicts = [
        {"role": m.type, "content": m.content, **m.model_dump(include={"additional_kwargs"})}
        for m in messages
    ]
    assert pairs(prepared(as_dicts)) == expected


def test_upload_blocks_are_stripped_and_upload_only_turns_dropped_with_their_reply() -> None:
    current = '<current_uploads count="1">\n- notes.md\n</current_uploads>'
    messages = [
        HumanMessage(f"{UPLOADS}\n{current}"),
        AIMessage("I can see two files.", id="dropped"),
        HumanMessage(f"Summarise notes.md please\n{current}"),
        AIMessage("notes.md lists three tasks."),
    ]
    assert pairs(prepared(messages)) == [
        ("user", "Summarise notes.md please"),
        ("assistant", "notes.md lists three tasks."),
    ]


def test_a_contentless_user_turn_is_dropped_with_its_reply() -> None:
    image_only = HumanMessage([{"type": "image_url", "image_url": {"url": "https://x/y.png"}}])
    messages = [
        image_only,
        AIMessage("A cat."),
        HumanMessage("Name three cat breeds"),
        AIMessage("Siamese, Persian, Maine Coon."),
    ]
    assert [turn.text for turn in prepared(messages).turns] == [
        "Name three cat breeds",
        "Siamese, Persian, Maine Coon.",
    ]


@pytest.mark.parametrize("trivial", ["thanks", "Thank you!", "OK.", "好的", "谢谢！", "嗯", "👍"])
def test_trivial_turns_are_dropped_with_their_reply(trivial: str) -> None:
    messages = [
        HumanMessage("I'm a backend developer."),
        AIMessage("Good to know."),
        HumanMessage(trivial),
        AIMessage("", tool_calls=[{"name": "note", "args": {}, "id": "c1"}]),
        ToolMessage("noted", tool_call_id="c1"),
        AIMessage("Anytime!"),
    ]
    assert pairs(prepared(messages)) == [
        ("user", "I'm a backend developer."),
        ("assistant", "Good to know."),
    ]


def test_the_reply_skip_ends_at_the_next_user_turn() -> None:
    messages = [
        HumanMessage("ok"),
        HumanMessage("Now add a test"),
        AIMessage("Added test_sort.py."),
    ]
    assert pairs(prepared(messages)) == [
        ("user", "Now add a test"),
        ("assistant", "Added test_sort.py."),
    ]


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [HumanMessage("Hello")],
        [AIMessage("Hello, how can I help?")],
        [HumanMessage("thanks"), AIMessage("You're welcome")],
        [HumanMessage(UPLOADS), AIMessage("Got the file.")],
        [SystemMessage("be brief"), HumanMessage(MEMORY_BLOCK), AIMessage("Hi")],
        [
            HumanMessage("Question?"),
            AIMessage("", tool_calls=[{"name": "x", "args": {}, "id": "1"}]),
        ],
    ],
)
def test_nothing_to_extract_without_a_user_and_an_assistant_turn(messages: list[Any]) -> None:
    assert prepare_conversation(messages) is None


def test_signals_come_from_user_turns_among_the_last_six() -> None:
    messages: list[Any] = [HumanMessage("My name is Lin."), AIMessage("I prefer short answers.")]
    for number in range(3):
        messages += [HumanMessage(f"Question {number}?"), AIMessage(f"Answer {number}.")]
    assert prepared(messages).signals == frozenset()
    messages += [HumanMessage("Actually, use pnpm."), AIMessage("Switched to pnpm.")]
    assert prepared(messages).signals == {"correction"}
    assert prepared(messages[2:]).signals == {"correction"}
    assert prepared(messages[:4]).signals == {"identity"}


def test_custom_patterns_drive_trivial_turns_and_signals(tmp_path: Path) -> None:
    (tmp_path / "team.yaml").write_text(
        "trivial:\n  - 'roger'\ndecision:\n  - 'ship it'\n", encoding="utf-8"
    )
    patterns = SignalPatterns.load(tmp_path)
    messages = [
        HumanMessage("roger"),
        AIMessage("Standing by."),
        HumanMessage("thanks"),
        AIMessage("Sure."),
        HumanMessage("Ship it on Friday"),
        AIMessage("Scheduled."),
    ]
    result = prepared(messages, patterns=patterns)
    assert [turn.text for turn in result.turns] == [
        "thanks",
        "Sure.",
        "Ship it on Friday",
        "Scheduled.",
    ]
    assert result.signals == {"decision"}


def test_unsupported_messages_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="got str"):
        prepare_conversation(["hello"])


def test_turn_identity_is_the_message_id_or_a_stable_hash() -> None:
    assert Turn("user", "I prefer uv", "msg-1").identity() == "msg-1"
    # A literal: the identity is persisted with the queue, so it must not change between runs.
    assert Turn("user", "I prefer uv").identity() == "sha256:b3fbd22b5c8802ae6807000f3213d9f0"
    assert Turn("user", "I prefer uv", "").identity() == Turn("user", "I prefer uv").identity()
    assert Turn("assistant", "I prefer uv").identity() != Turn("user", "I prefer uv").identity()
    assert Turn("user", "I prefer pip").identity() != Turn("user", "I prefer uv").identity()


def test_message_ids_are_carried_into_turns() -> None:
    result = prepared([HumanMessage("Hi", id="h"), AIMessage("Hello", id="")])
    assert [turn.message_id for turn in result.turns] == ["h", None]
    assert result.turns[1].identity().startswith("sha256:")


@pytest.mark.parametrize(
    "turn",
    [Turn("user", "我叫王伟\nline two", "msg-1"), Turn("assistant", "Hello <b>", None)],
)
def test_turn_round_trips_through_json(turn: Turn) -> None:
    data = json.loads(json.dumps(turn.to_dict()))
    assert Turn.from_dict(data) == turn
    assert Turn.from_dict(data).identity() == turn.identity()


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"role": "system", "text": "x", "message_id": None},
        {"role": "user", "text": 3, "message_id": None},
        {"role": "user", "text": "x", "message_id": 5},
    ],
)
def test_turn_from_dict_rejects_what_to_dict_never_writes(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not a serialised Turn"):
        Turn.from_dict(data)
