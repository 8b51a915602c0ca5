"""Step 1 of the write pipeline: the turns of a conversation worth extracting from.

`prepare_conversation` reads LangChain messages (or plain dicts) and keeps what the user said and
what the agent finally answered. It drops everything memory must not learn from: tool traffic,
system prompts, hidden host injections (among them the `<memory>` block, which would otherwise feed
memory back into itself), messages the harness wrote in the user's place (the summary of a
compacted thread), upload listings, and trivial turns ("ok", "谢谢") together with the reply they
got.

`add()` of a thread it has seen before filters only the messages after the last turn it queued
(`messages_after` finds that turn by its message id, from the end), so its cost follows what is
new, not the length of the thread: starting right after a kept turn gives the same turns as
filtering everything and dropping what comes before.

Signals (correction, preference, …) are not looked for here: that is the slowest part of
filtering (about a hundred regexes), and `add()` must only enqueue. The queue's worker looks for
them in the turns of each batch; `PreparedConversation.signals` finds them on demand for the one
caller that needs them before enqueueing (a full queue still admits a conversation with a signal).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.pipeline.signals import SignalPatterns
from deerflow.agents.memory.manager import (
    MessageRole,
    is_harness_message,
    is_hidden,
    is_memory_injection,
    read_message,
    strip_memory_blocks,
    strip_upload_blocks,
)

__all__ = [
    "SIGNAL_WINDOW",
    "PreparedConversation",
    "Turn",
    "kept_turns",
    "messages_after",
    "prepare_conversation",
]

# Signals are looked for in the user turns among this many latest kept turns: what the user says
# now, not what they said (and may have taken back) long ago.
SIGNAL_WINDOW: Final = 6

_HASH_PREFIX: Final = "sha256:"


@dataclass(frozen=True, slots=True)
class Turn:
    """One kept message: who said it and its cleaned text.

    Attributes:
        role: "user" or "assistant".
        text: The message text, stripped of upload and memory blocks.
        message_id: The LangChain message id, when the message had one.
    """

    role: MessageRole
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
    """The kept turns, in order, and the patterns to look for signals in them with."""

    turns: tuple[Turn, ...]
    patterns: SignalPatterns

    @property
    def signals(self) -> frozenset[str]:
        """The signal classes found in the user turns among the latest `SIGNAL_WINDOW` turns.

        Looked for on each access, never by `prepare_conversation`, so that `add()` does not
        pay for them.
        """
        recent = [turn.text for turn in self.turns[-SIGNAL_WINDOW:] if turn.role == "user"]
        return self.patterns.detect(recent)


def prepare_conversation(
    messages: Sequence[Any],
    *,
    keep_hidden: Callable[[dict[str, Any]], bool] | None = None,
    patterns: SignalPatterns | None = None,
) -> PreparedConversation | None:
    """The turns of `messages` worth extracting memory from.

    Args:
        messages: LangChain `BaseMessage` objects or dicts with `role` ("user", "human",
            "assistant", "ai"), `content`, and optionally `id` and `additional_kwargs`.
        keep_hidden: Decides, from its `additional_kwargs`, whether a hidden (`hide_from_ui`)
            message is still learned from; None drops every hidden message.
        patterns: Signal and trivial-turn patterns; None uses the bundled ones.

    Returns:
        The kept turns, or None when no user turn or no assistant turn is left.

    Raises:
        TypeError: A message is neither a `BaseMessage` nor a mapping.
    """
    if patterns is None:
        patterns = SignalPatterns.load()
    turns = kept_turns(messages, keep_hidden=keep_hidden, patterns=patterns)
    roles = {turn.role for turn in turns}
    if roles != {"user", "assistant"}:
        return None
    return PreparedConversation(tuple(turns), patterns)


def kept_turns(
    messages: Sequence[Any],
    *,
    keep_hidden: Callable[[dict[str, Any]], bool] | None,
    patterns: SignalPatterns,
) -> list[Turn]:
    """The turns of `messages` worth extracting memory from, whichever roles are left.

    Raises:
        TypeError: A message is neither a `BaseMessage` nor a mapping.
    """
    turns: list[Turn] = []
    # Set by a dropped upload-only or trivial user turn: its reply carries nothing either.
    skip_reply = False
    for message in map(read_message, messages):
        if (
            message.role is None
            or message.calls_tools
            or is_hidden(message, keep_hidden)
            or is_harness_message(message)
        ):
            continue
        if message.role == "assistant":
            text = strip_memory_blocks(message.text)
            if text and not skip_reply:
                turns.append(Turn("assistant", text, message.message_id))
            skip_reply = False
        elif not is_memory_injection(message.text):
            text = strip_memory_blocks(strip_upload_blocks(message.text))
            skip_reply = not text or patterns.is_trivial(text)
            if not skip_reply:
                turns.append(Turn("user", text, message.message_id))
    return turns


def messages_after(messages: Sequence[Any], identity: str) -> Sequence[Any] | None:
    """The messages after the one whose message id is `identity`, the last such one.

    None when no message has that id, and for the identity of a turn without a message id
    (a hash of its cleaned text, which only filtering every message could find). Message ids
    are unique within a conversation (LangGraph's `add_messages` merges by id), so looking from
    the end costs what is new, not the thread's length.
    """
    if identity.startswith(_HASH_PREFIX):
        return None
    for index in range(len(messages) - 1, -1, -1):
        if read_message(messages[index]).message_id == identity:
            return messages[index + 1 :]
    return None
