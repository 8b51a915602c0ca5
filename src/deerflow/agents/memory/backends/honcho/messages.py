"""The turns of a conversation that go to Honcho, each with a key that makes it go only once.

Filtering is the one every backend applies (`deerflow.agents.memory.conversation`): tool
traffic, system prompts, hidden host injections, `<memory>` blocks and the messages the harness
wrote in the user's place (the summary of a compacted thread) never leave the process.
What remains is kept verbatim, because Honcho derives its own model of the user from it.

The host hands `add()` the whole thread on every turn, so every message carries a key in its
Honcho metadata: the LangChain message id, or for an id-less dict a hash of its role, text and
how many identical messages came before it. A message whose key the session already holds is
not sent again.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from deerflow.agents.memory.manager import (
    MessageRole,
    is_harness_message,
    is_hidden,
    is_memory_injection,
    read_message,
    strip_memory_blocks,
    strip_upload_blocks,
)

__all__ = ["KEY_FIELD", "OutgoingMessage", "outgoing_messages"]

# The metadata field of a Honcho message that holds its key.
KEY_FIELD: Final = "deerflow_id"


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One Honcho message to create: who says it, what, and its key."""

    peer_id: str
    content: str
    key: str


def outgoing_messages(
    messages: Sequence[Any],
    *,
    user_peer: str,
    assistant_peer: str,
    keep_hidden: Callable[[dict[str, Any]], bool] | None,
    max_chars: int,
) -> list[OutgoingMessage]:
    """The Honcho messages for `messages`, in order; a turn over `max_chars` becomes several.

    Raises:
        TypeError: a message is neither a LangChain message nor a mapping.
    """
    occurrences: Counter[tuple[MessageRole, str]] = Counter()
    outgoing: list[OutgoingMessage] = []
    for message in map(read_message, messages):
        if (
            message.role is None
            or message.calls_tools
            or is_hidden(message, keep_hidden)
            or is_harness_message(message)
        ):
            continue
        if message.role == "user":
            if is_memory_injection(message.text):
                continue
            text = strip_memory_blocks(strip_upload_blocks(message.text))
        else:
            text = strip_memory_blocks(message.text)
        if not text:
            continue
        occurrence = occurrences[message.role, text]
        occurrences[message.role, text] += 1
        key = message.message_id or _content_key(message.role, text, occurrence)
        peer = user_peer if message.role == "user" else assistant_peer
        parts = [text[start : start + max_chars] for start in range(0, len(text), max_chars)]
        for number, part in enumerate(parts, start=1):
            part_key = key if len(parts) == 1 else f"{key}#{number}/{len(parts)}"
            outgoing.append(OutgoingMessage(peer, part, part_key))
    return outgoing


def _content_key(role: MessageRole, text: str, occurrence: int) -> str:
    digest = hashlib.sha256(f"{role}\0{text}\0{occurrence}".encode()).hexdigest()
    return f"sha256:{digest[:32]}"
