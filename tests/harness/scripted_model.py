"""A scripted chat model that config.yaml can name (`use: tests.harness.scripted_model:...`).

The harness builds models from `models:` entries, so the CLI tests configure this one there: its
chat replies come from `replies` in order (the last repeats), streamed word by word, and memory
extraction (a structured-output call) returns `facts` as new facts. Calls are recorded on the
class, since the harness builds one instance for the agent and another for memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Final, Self

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import Field, PrivateAttr

USE = "tests.harness.scripted_model:ScriptedConversationModel"
KEPT_LABELS = {"scope": "user", "durability": "durable", "authority": "descriptive"}


class ScriptedConversationModel(BaseChatModel):
    """Chat replies from `replies`; extraction answers with `facts`."""

    replies: list[str] = Field(default_factory=lambda: ["OK."])
    facts: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list, description="Tool calls of the first reply, one message each."
    )

    chat_prompts: ClassVar[list[list[BaseMessage]]] = []
    extraction_prompts: ClassVar[list[list[BaseMessage]]] = []
    bound_tools: ClassVar[list[list[str]]] = []
    _turn: int = PrivateAttr(default=0)

    @classmethod
    def reset(cls) -> None:
        cls.chat_prompts.clear()
        cls.extraction_prompts.clear()
        cls.bound_tools.clear()

    @classmethod
    def system_prompts(cls) -> list[str]:
        """The system prompt of every chat call, in order."""
        return ["\n".join(m.text for m in p if m.type == "system") for p in cls.chat_prompts]

    @property
    def _llm_type(self) -> str:
        return "scripted-conversation"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Self:
        ScriptedConversationModel.bound_tools.append(sorted(tool.name for tool in tools))
        return self

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        ScriptedConversationModel.chat_prompts.append(list(messages))
        turn, self._turn = self._turn, self._turn + 1
        if turn < len(self.tool_calls):
            call = self.tool_calls[turn]
            return AIMessage("", tool_calls=[{**call, "id": f"call-{turn}", "type": "tool_call"}])
        replies = self.replies
        return AIMessage(replies[min(turn - len(self.tool_calls), len(replies) - 1)])

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        message = self._next(messages)
        if message.tool_calls:
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        {
                            "name": c["name"],
                            "args": json.dumps(c["args"]),
                            "id": c["id"],
                            "index": 0,
                        }
                        for c in message.tool_calls
                    ],
                )
            )
            return
        words = message.text.split(" ")
        for index, word in enumerate(words):
            piece = word if index == len(words) - 1 else f"{word} "
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece))

    def extracted_facts(self, messages: list[BaseMessage]) -> list[dict[str, Any]]:
        """The new facts an extraction call over `messages` answers with."""
        return self.facts

    def with_structured_output(  # type: ignore[override]
        self, schema: dict[str, Any], *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[Any, Any]:
        def answer(messages: list[BaseMessage]) -> Any:
            ScriptedConversationModel.extraction_prompts.append(list(messages))
            facts = self.extracted_facts(messages)
            reply = {"newFacts": [{"labels": KEPT_LABELS, **fact} for fact in facts]}
            if not include_raw:
                return reply
            return {"raw": AIMessage(json.dumps(reply)), "parsed": reply, "parsing_error": None}

        return RunnableLambda(answer)


MARKER_USE = "tests.harness.scripted_model:MarkerModel"
MARKER: Final = re.compile(r"remember marker ([A-Za-z0-9-]+)")


def marker_fact(marker: str) -> str:
    """The fact `MarkerModel` extracts from a conversation that says `remember marker <marker>`."""
    return f"Marker {marker}"


class MarkerModel(ScriptedConversationModel):
    """Extraction answers with one fact per `remember marker <id>` in the conversation, so that
    tests can tell which queued conversations were extracted. (A stored marker fact is shown back
    to the model as memory; its text, `Marker <id>`, does not match the pattern.)"""

    def extracted_facts(self, messages: list[BaseMessage]) -> list[dict[str, Any]]:
        markers = dict.fromkeys(MARKER.findall("\n".join(m.text for m in messages)))
        return [
            {"content": marker_fact(m), "category": "context", "confidence": 0.9} for m in markers
        ]
