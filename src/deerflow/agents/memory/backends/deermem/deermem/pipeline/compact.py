"""The compact extraction prompt, for small models.

A model with a small context window (the offline Gemma 3 270M is one) cannot follow the full
prompt: it gets this one instead: a few lines of instruction, one worked example, what the user
said (the assistant's replies are left out: a small model mixes them up with the user's words),
and a reply that holds new facts only (no summaries, no edits of stored facts, no labels, which
such a model would only copy from the example). Two checks stand in for what the model cannot judge:
a fact that repeats the example is dropped (small models copy it), and so is a fact whose words
mostly do not occur in what the user said (it was invented). Both count as gate rejections.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from deerflow.agents.memory.backends.deermem.deermem.governance import content_tokens, jaccard
from deerflow.agents.memory.backends.deermem.deermem.pipeline.proposals import Extraction
from deerflow.agents.memory.manager import FACT_CATEGORIES

__all__ = [
    "COMPACT_REJECTIONS",
    "COMPACT_SCHEMA",
    "build_compact_messages",
    "ground",
    "with_kept_labels",
]

# Keys of `Extraction.rejected` added by `ground`.
COMPACT_REJECTIONS: Final = ("copied_example", "ungrounded")
# A fact whose words overlap an example fact this much is a copy of it.
COPY_SIMILARITY: Final = 0.6
# At least this share of a fact's words must occur in what the user said.
GROUNDED_SHARE: Final = 0.5
_CONFIDENCES: Final = (0.7, 0.8, 0.9, 1.0)
_KEPT_LABELS: Final = {"scope": "user", "durability": "durable", "authority": "descriptive"}

COMPACT_SCHEMA: Final[dict[str, Any]] = {
    "title": "new_facts",
    "type": "object",
    "properties": {
        "newFacts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "category": {"type": "string", "enum": list(FACT_CATEGORIES)},
                    "confidence": {"type": "number", "enum": list(_CONFIDENCES)},
                },
                "required": ["content", "category", "confidence"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["newFacts"],
    "additionalProperties": False,
}

COMPACT_SYSTEM: Final = (
    "List the lasting facts about the user that the user states in the conversation: who they "
    "are, their work, where they live, what they prefer, use or avoid. One short sentence per "
    "fact, about this user only. Nothing the user did not say. Reply with JSON only."
)
# The commonest kinds of fact (who, work and place, a preference), said plainly: a 270M base
# model follows the example's shape closely, so the shape is what it teaches.
_EXAMPLE_TURNS: Final = (
    {"role": "user", "text": "Hi, I'm Tomasz, a chemistry teacher in Gdansk."},
    {"role": "user", "text": "I prefer Go over Python for my grading scripts."},
)
_EXAMPLE_FACTS: Final = (
    ("Name is Tomasz", "identity", 1.0),
    ("Works as a chemistry teacher in Gdansk", "context", 0.9),
    ("Prefers Go over Python for grading scripts", "preference", 0.9),
)
_EXAMPLE_REPLY: Final = json.dumps(
    {
        "newFacts": [
            {"content": content, "category": category, "confidence": confidence}
            for content, category, confidence in _EXAMPLE_FACTS
        ]
    }
)
_EXAMPLE_TOKENS: Final = tuple(content_tokens(content) for content, _, _ in _EXAMPLE_FACTS)


def _user_lines(turns: Sequence[Mapping[str, str]]) -> str:
    said = (turn["text"] for turn in turns if turn["role"] == "user")
    return "\n".join(f"user: {' '.join(text.split())}" for text in said)


def build_compact_messages(turns: Sequence[Mapping[str, str]]) -> list[BaseMessage]:
    """The instruction, the worked example as one exchange, then what the user said.

    Raises:
        ValueError: a turn with a role other than user or assistant.
    """
    for turn in turns:
        if turn["role"] not in ("user", "assistant"):
            raise ValueError(f"turn role must be 'user' or 'assistant', got {turn['role']!r}")
    return [
        SystemMessage(content=COMPACT_SYSTEM),
        HumanMessage(content=_user_lines(_EXAMPLE_TURNS)),
        AIMessage(content=_EXAMPLE_REPLY),
        HumanMessage(content=_user_lines(turns)),
    ]


def with_kept_labels(reply: Mapping[str, Any]) -> dict[str, Any]:
    """The compact reply with the labels the full gate keeps, on every new fact.

    The compact prompt asks for lasting facts about the user only; its labels are implied.
    """
    facts = reply.get("newFacts")
    if not isinstance(facts, list):
        return dict(reply)
    labelled = [
        {**fact, "labels": dict(_KEPT_LABELS)} if isinstance(fact, Mapping) else fact
        for fact in facts
    ]
    return {**reply, "newFacts": labelled}


def ground(extraction: Extraction, turns: Sequence[Mapping[str, str]]) -> Extraction:
    """`extraction` without the facts copied from the example or not said by the user."""
    said = content_tokens(" ".join(turn["text"] for turn in turns if turn["role"] == "user"))
    rejected = dict(extraction.rejected)
    kept = []
    for fact in extraction.new_facts:
        words = content_tokens(fact.content)
        if any(jaccard(words, example) >= COPY_SIMILARITY for example in _EXAMPLE_TOKENS):
            reason: str | None = "copied_example"
        elif not words or len(words & said) < GROUNDED_SHARE * len(words):
            reason = "ungrounded"
        else:
            reason = None
        if reason is None:
            kept.append(fact)
        else:
            rejected[reason] = rejected.get(reason, 0) + 1
    return replace(extraction, new_facts=tuple(kept), rejected=rejected)
