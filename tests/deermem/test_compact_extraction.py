"""The compact extraction prompt for small models: when it is used, what it sends, what it keeps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import Field

from deerflow.agents.memory.backends.deermem.deermem.config import parse_config
from deerflow.agents.memory.backends.deermem.deermem.pipeline.compact import (
    COMPACT_SCHEMA,
    COMPACT_SYSTEM,
    build_compact_messages,
)
from deerflow.agents.memory.backends.deermem.deermem.pipeline.extraction import (
    extract,
    use_compact_prompt,
)
from deerflow.agents.memory.manager import build_memory_manager
from deerflow.config import MemoryConfig

TURNS = [
    {"role": "user", "text": "Hi! I'm Maria, a data engineer in Lisbon."},
    {"role": "assistant", "text": "Nice to meet you, Maria!"},
    {"role": "user", "text": "For JavaScript projects I always use pnpm, never npm."},
]


class SmallModel(GenericFakeChatModel):
    """A scripted model whose profile reports a small context window; it records its prompts."""

    prompts: list[list[Any]] = Field(default_factory=list)

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        self.prompts.append(list(input))
        return super().invoke(input, config, **kwargs)


def small(*replies: str, window: int = 2048) -> SmallModel:
    return SmallModel(messages=iter(replies), profile={"max_input_tokens": window})


def reply(*facts: tuple[str, str, float]) -> str:
    return json.dumps(
        {"newFacts": [{"content": c, "category": k, "confidence": p} for c, k, p in facts]}
    )


@pytest.mark.parametrize(
    ("setting", "profile", "compact"),
    [
        ("auto", {"max_input_tokens": 4096}, True),
        ("auto", {"max_input_tokens": 8192}, False),
        ("auto", {"max_input_tokens": 200_000}, False),
        ("auto", None, False),  # an unknown window gets the full prompt
        ("full", {"max_input_tokens": 4096}, False),
        ("compact", {"max_input_tokens": 200_000}, True),
    ],
)
def test_which_prompt_a_model_gets(
    setting: str, profile: dict[str, Any] | None, compact: bool
) -> None:
    model = GenericFakeChatModel(messages=iter([]), profile=profile)
    assert use_compact_prompt(setting, model) is compact


def test_the_setting_is_validated() -> None:
    with pytest.raises(ValueError, match=r"memory\.backend_config\.extraction_prompt"):
        parse_config({"storage_path": "/x", "extraction_prompt": "tiny"})


def test_the_compact_prompt_is_one_example_then_what_the_user_said() -> None:
    messages = build_compact_messages(TURNS)

    assert [type(m) for m in messages] == [SystemMessage, HumanMessage, AIMessage, HumanMessage]
    assert messages[0].text == COMPACT_SYSTEM
    json.loads(messages[2].text)  # the example answer is the reply format itself
    assert messages[3].text.splitlines() == [
        "user: Hi! I'm Maria, a data engineer in Lisbon.",
        "user: For JavaScript projects I always use pnpm, never npm.",
    ]
    with pytest.raises(ValueError, match="turn role"):
        build_compact_messages([{"role": "system", "text": "x"}])


def test_compact_extraction_keeps_what_the_user_said_and_drops_copies_and_inventions() -> None:
    model = small(
        reply(
            ("Name is Maria", "identity", 1.0),
            ("Prefers pnpm over npm for JavaScript projects", "preference", 0.9),
            ("Works as a chemistry teacher in Gdansk", "context", 0.9),  # the example's fact
            ("Enjoys climbing on weekends", "preference", 0.8),  # never said
        )
    )

    extraction, _ = extract(model, {}, TURNS, compact=True)

    assert [f.content for f in extraction.new_facts] == [
        "Name is Maria",
        "Prefers pnpm over npm for JavaScript projects",
    ]
    assert all(f.labels.scope == "user" for f in extraction.new_facts)
    assert extraction.rejected == {"copied_example": 1, "ungrounded": 1}
    [prompt] = model.prompts
    assert prompt[0].text == COMPACT_SYSTEM


def test_compact_extraction_still_gates_categories_and_confidence() -> None:
    model = small(
        reply(
            ("Lives in Lisbon", "hometown", 0.9),
            ("Is a data engineer", "context", 7.0),
        )
    )

    extraction, _ = extract(model, {}, TURNS, compact=True)

    assert extraction.new_facts == ()
    assert extraction.rejected == {"category": 1, "confidence": 1}


def test_the_compact_schema_allows_new_facts_only() -> None:
    assert COMPACT_SCHEMA["required"] == ["newFacts"]
    assert COMPACT_SCHEMA["additionalProperties"] is False
    item = COMPACT_SCHEMA["properties"]["newFacts"]["items"]
    assert set(item["properties"]) == {"content", "category", "confidence"}


def test_deermem_extracts_with_the_compact_prompt_for_a_small_host_model(tmp_path: Path) -> None:
    model = small(reply(("Prefers pnpm over npm for JavaScript projects", "preference", 0.9)))
    manager = build_memory_manager(
        MemoryConfig(backend_config={"storage_path": str(tmp_path)}),
        host_hooks={"host_llm_factory": lambda: model},
    )
    try:
        conversation = [
            HumanMessage(t["text"]) if t["role"] == "user" else AIMessage(t["text"]) for t in TURNS
        ]
        manager.add("t1", conversation)
        assert manager.shutdown_flush(10)
        facts = manager.get_memory()["facts"]
    finally:
        manager.close()

    assert [f["content"] for f in facts] == ["Prefers pnpm over npm for JavaScript projects"]
    assert model.prompts[0][0].text == COMPACT_SYSTEM
