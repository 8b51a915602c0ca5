"""A scripted chat model for pipeline tests, and replies in the extraction format."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import BaseMessage

USER_LABELS = {"scope": "user", "durability": "durable", "authority": "descriptive"}


class ScriptedModel(FakeListChatModel):
    """Replies from `responses` in order (the last one repeats) and records every prompt."""

    prompts: ClassVar[list[list[BaseMessage]]] = []

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        ScriptedModel.prompts.append(list(input))
        if self.i >= len(self.responses):
            self.i = len(self.responses) - 1
        return super().invoke(input, config, **kwargs)


def reply(*facts: dict[str, Any], **extra: Any) -> str:
    """A well-formed extraction reply proposing `facts` (labels default to user/durable)."""
    body = {
        "user": {},
        "history": {},
        "newFacts": [
            {"category": "preference", "confidence": 0.9, "labels": USER_LABELS, **fact}
            for fact in facts
        ],
        "factsToReinforce": [],
        "factsToRemove": [],
        "staleFactsToRemove": [],
        "staleFactsToExtend": [],
        "factsToConsolidate": [],
    }
    body.update(extra)
    return json.dumps(body)


def conversation_text(prompt: list[BaseMessage]) -> str:
    """The human part of an extraction prompt (memory, candidates and the conversation)."""
    return str(prompt[-1].content)
