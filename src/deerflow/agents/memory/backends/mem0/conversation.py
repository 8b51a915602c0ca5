"""Which messages of a conversation mem0 may learn from, as mem0's `{role, content}` dicts.

Kept: what the user said and what the agent answered. Dropped: tool traffic, system prompts,
empty turns, and hidden messages (`hide_from_ui`) unless the host's `should_keep_hidden_message`
hook keeps them. The host's `<memory>` injection is dropped too, hidden or not, because learning
from it would feed memory back into itself, and so are the messages the harness wrote in the
user's place (the summary of a compacted thread). The reading is shared with the other backends
(`deerflow.agents.memory.conversation`).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from deerflow.agents.memory.manager import (
    is_harness_message,
    is_hidden,
    is_memory_injection,
    read_message,
    strip_memory_blocks,
)

__all__ = ["KeepHidden", "SentTurns", "Turn", "conversation_turns"]

KeepHidden = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class Turn:
    """One message worth sending: its mem0 form and an identity to send it only once."""

    role: str
    content: str
    identity: str

    def as_mem0(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def conversation_turns(messages: Sequence[Any], keep_hidden: KeepHidden | None) -> list[Turn]:
    """The turns of `messages` mem0 may learn from, in order.

    Args:
        messages: LangChain messages or dicts with `role` (or `type`), `content`, and optionally
            `id`, `additional_kwargs`, `tool_calls`.
        keep_hidden: decides from a hidden message's `additional_kwargs` whether to keep it;
            None drops every hidden message.

    Raises:
        TypeError: a message is neither a LangChain message nor a mapping.
    """
    turns = []
    for raw in messages:
        message = read_message(raw)
        if (
            message.role is None
            or message.calls_tools
            or is_hidden(message, keep_hidden)
            or is_harness_message(message)
        ):
            continue
        if message.role == "user" and is_memory_injection(message.text):
            continue
        content = strip_memory_blocks(message.text).strip()
        if content:
            digest = hashlib.sha256(f"{message.role}\0{content}".encode()).hexdigest()[:32]
            turns.append(Turn(message.role, content, message.message_id or f"sha256:{digest}"))
    return turns


class SentTurns:
    """Per thread, the identities of the turns already handed to mem0.

    The middleware passes the whole thread after every turn; sending it again each time would
    make mem0 store (or re-extract) the same messages over and over. Kept in this process and
    bounded to the `max_threads` most recently written threads: after a restart, or for a thread
    pushed out, the next write sends that thread's history once more.
    """

    def __init__(self, max_threads: int = 1024) -> None:
        self._max_threads = max_threads
        self._threads: OrderedDict[Hashable, set[str]] = OrderedDict()
        self._lock = threading.Lock()

    def claim(self, thread: Hashable, turns: list[Turn]) -> list[Turn]:
        """Mark the turns not yet sent as sent and return them, so a concurrent write skips them."""
        with self._lock:
            seen = self._threads.setdefault(thread, set())
            self._threads.move_to_end(thread)
            while len(self._threads) > self._max_threads:
                self._threads.popitem(last=False)
            new = [turn for turn in turns if turn.identity not in seen]
            seen.update(turn.identity for turn in new)
            return new

    def release(self, thread: Hashable, turns: list[Turn]) -> None:
        """Forget that `turns` were sent (the write failed), so the next write sends them."""
        with self._lock:
            seen = self._threads.get(thread)
            if seen is not None:
                seen.difference_update(turn.identity for turn in turns)
