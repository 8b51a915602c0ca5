"""Step 1 of the write pipeline (SPEC §5.6): the turns of a conversation worth extracting from.

`prepare_conversation` reads LangChain messages (or plain dicts) and keeps what the user said and
what the agent finally answered. It drops everything memory must not learn from: tool traffic,
system prompts, hidden host injections (among them the `<memory>` block, which would otherwise feed
memory back into itself), upload listings, and trivial turns ("ok", "谢谢") together with the reply
they got. Signals (correction, preference, …) are then looked for in the latest user turns.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from deerflow.agents.memory.backends.deermem.deermem.pipeline.signals import SignalPatterns

__all__ = ["SIGNAL_WINDOW", "PreparedConversation", "Role", "Turn", "prepare_conversation"]

Role = Literal["user", "assistant"]

# Signals are looked for in the user turns among this many latest kept turns: what the user says
# now, not what they said (and may have taken back) long ago.
SIGNAL_WINDOW: Final = 6

# Message types (BaseMessage.type, ChatMessage.role, a dict's "role") that memory reads.
_ROLES: Final[Mapping[str, Role]] = {
    "human": "user",
    "user": "user",
    "HumanMessageChunk": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "AIMessageChunk": "assistant",
}
_MEMORY_BLOCK: Final = re.compile(r"<memory>.*?</memory>", re.DOTALL)
_UPLOAD_BLOCK: Final = re.compile(
    r"<(uploaded_files|current_uploads)\b[^>]*>.*?</\1>", re.DOTALL | re.IGNORECASE
)
_EXTRA_BLANK_LINES: Final = re.compile(r"\n[ \t]*(?:\n[ \t]*)+\n")
_HASH_PREFIX: Final = "sha256:"


@dataclass(frozen=True, slots=True)
class Turn:
    """One kept message: who said it and its cleaned text.

    Attributes:
        role: "user" or "assistant".
        text: The message text, stripped of upload and memory blocks.
        message_id: The LangChain message id, when the message had one.
    """

    role: Role
    text: str
    message_id: str | None = None

    def identity(self) -> str:
        """What the extraction watermark remembers of this turn.

        The message id when there is one; otherwise a hash of role and text, which is stable
        across processes (unlike `hash()`) because the watermark is persisted with the queue.
        """
        if self.message_id:
            return self.message_id
        digest = hashlib.sha256(f"{self.role}\0{self.text}".encode()).hexdigest()
        return f"{_HASH_PREFIX}{digest[:32]}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form, for the durable queue."""
        return {"role": self.role, "text": self.text, "message_id": self.message_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Turn:
        """The turn that `to_dict` produced `data` from.

        Raises:
            ValueError: `data` is not a serialised turn.
        """
        role, text, message_id = data.get("role"), data.get("text"), data.get("message_id")
        if role not in ("user", "assistant") or not isinstance(text, str):
            raise ValueError(f"not a serialised Turn: {dict(data)!r}")
        if message_id is not None and not isinstance(message_id, str):
            raise ValueError(f"not a serialised Turn (message_id): {dict(data)!r}")
        return cls(role=role, text=text, message_id=message_id)


@dataclass(frozen=True, slots=True)
class PreparedConversation:
    """The kept turns, in order, and the signals found in the latest user turns."""

    turns: tuple[Turn, ...]
    signals: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Message:
    """A message of either accepted shape, reduced to what filtering looks at."""

    role: Role | None  # None: a kind memory never reads (system, tool, function, …)
    text: str
    message_id: str | None
    additional_kwargs: dict[str, Any]
    calls_tools: bool


def prepare_conversation(
    messages: Sequence[Any],
    *,
    keep_hidden: Callable[[dict[str, Any]], bool] | None = None,
    patterns: SignalPatterns | None = None,
) -> PreparedConversation | None:
    """The turns of `messages` worth extracting memory from, with their signals.

    Args:
        messages: LangChain `BaseMessage` objects or dicts with `role` ("user", "human",
            "assistant", "ai"), `content`, and optionally `id` and `additional_kwargs`.
        keep_hidden: Decides, from its `additional_kwargs`, whether a hidden (`hide_from_ui`)
            message is still learned from; None drops every hidden message.
        patterns: Signal and trivial-turn patterns; None uses the bundled ones.

    Returns:
        The kept turns and signals, or None when no user turn or no assistant turn is left.

    Raises:
        TypeError: A message is neither a `BaseMessage` nor a mapping.
    """
    if patterns is None:
        patterns = SignalPatterns.load()
    turns: list[Turn] = []
    # Set by a dropped upload-only or trivial user turn: its reply carries nothing either.
    skip_reply = False
    for message in map(_read, messages):
        if message.role is None or message.calls_tools or _hidden(message, keep_hidden):
            continue
        if message.role == "assistant":
            text = _clean(message.text)
            if text and not skip_reply:
                turns.append(Turn("assistant", text, message.message_id))
            skip_reply = False
        # A user message that opens with the memory block is the host's injection, hidden or not.
        elif not message.text.lstrip().startswith("<memory>"):
            text = _clean(_UPLOAD_BLOCK.sub("", message.text))
            skip_reply = not text or patterns.is_trivial(text)
            if not skip_reply:
                turns.append(Turn("user", text, message.message_id))
    roles = {turn.role for turn in turns}
    if roles != {"user", "assistant"}:
        return None
    recent = [turn.text for turn in turns[-SIGNAL_WINDOW:] if turn.role == "user"]
    return PreparedConversation(tuple(turns), patterns.detect(recent))


def _read(message: Any) -> _Message:
    # A LangChain message can only exist once langchain_core.messages is imported, so looking it
    # up instead of importing it spares every process that never sees one ~200 ms of imports.
    lc = sys.modules.get("langchain_core.messages")
    if lc is not None and isinstance(message, lc.BaseMessage):
        kind = message.role if isinstance(message, lc.ChatMessage) else message.type
        extra = message.additional_kwargs
        calls = (getattr(message, "tool_calls", None), getattr(message, "invalid_tool_calls", None))
        return _Message(
            _ROLES.get(kind),
            _text(message.content),
            message.id or None,
            extra,
            any(calls) or _legacy_tool_call(extra),
        )
    if isinstance(message, Mapping):
        raw_extra = message.get("additional_kwargs")
        extra = dict(raw_extra) if isinstance(raw_extra, Mapping) else {}
        calls = (message.get("tool_calls"), message.get("function_call"))
        raw_id = message.get("id")
        return _Message(
            _ROLES.get(str(message.get("role", message.get("type")))),
            _text(message.get("content")),
            str(raw_id) if raw_id not in (None, "") else None,
            extra,
            any(calls) or _legacy_tool_call(extra),
        )
    raise TypeError(f"expected a LangChain message or a dict, got {type(message).__name__}")


def _legacy_tool_call(additional_kwargs: Mapping[str, Any]) -> bool:
    """OpenAI-style tool calls that older integrations leave in `additional_kwargs`."""
    return bool(additional_kwargs.get("tool_calls") or additional_kwargs.get("function_call"))


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text blocks of a block list."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = (
        block if isinstance(block, str) else block.get("text")
        for block in content
        if isinstance(block, str) or (isinstance(block, Mapping) and block.get("type") == "text")
    )
    return "\n".join(part for part in parts if isinstance(part, str))


def _hidden(message: _Message, keep_hidden: Callable[[dict[str, Any]], bool] | None) -> bool:
    """A hidden message the host does not ask to keep."""
    if not message.additional_kwargs.get("hide_from_ui"):
        return False
    # A copy: the hook must not be able to change the caller's message.
    return keep_hidden is None or not keep_hidden(dict(message.additional_kwargs))


def _clean(text: str) -> str:
    """`text` without embedded `<memory>` blocks and the blank lines they leave behind."""
    return _EXTRA_BLANK_LINES.sub("\n\n", _MEMORY_BLOCK.sub("", text)).strip()
