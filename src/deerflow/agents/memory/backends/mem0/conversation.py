"""Which messages of a conversation mem0 may learn from, as mem0's `{role, content}` dicts.

Kept: what the user said and what the agent answered. Dropped: tool traffic, system prompts,
empty turns, and hidden messages (`hide_from_ui`) unless the host's `should_keep_hidden_message`
hook keeps them. The host's `<memory>` injection is dropped too, hidden or not, because learning
from it would feed memory back into itself.
"""

from __future__ import annotations

import hashlib
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["KeepHidden", "SentTurns", "Turn", "conversation_turns"]

KeepHidden = Callable[[dict[str, Any]], bool]

_ROLES: Final[Mapping[str, str]] = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
}
_MEMORY_BLOCK: Final = re.compile(r"<memory>.*?</memory>", re.DOTALL)


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
    for message in messages:
        role, text, message_id, extra, calls_tools = _read(message)
        if role is None or calls_tools or _hidden(extra, keep_hidden):
            continue
        if role == "user" and text.lstrip().startswith("<memory>"):
            continue
        content = _MEMORY_BLOCK.sub("", text).strip()
        if content:
            digest = hashlib.sha256(f"{role}\0{content}".encode()).hexdigest()[:32]
            turns.append(Turn(role, content, message_id or f"sha256:{digest}"))
    return turns


def _read(message: Any) -> tuple[str | None, str, str | None, dict[str, Any], bool]:
    # Looked up, not imported: a process that never built a LangChain message need not load it.
    lc = sys.modules.get("langchain_core.messages")
    if lc is not None and isinstance(message, lc.BaseMessage):
        kind = message.role if isinstance(message, lc.ChatMessage) else message.type
        extra = dict(message.additional_kwargs)
        calls = bool(getattr(message, "tool_calls", None)) or _legacy_tool_call(extra)
        return _ROLES.get(kind), _text(message.content), message.id or None, extra, calls
    if isinstance(message, Mapping):
        raw_extra = message.get("additional_kwargs")
        extra = dict(raw_extra) if isinstance(raw_extra, Mapping) else {}
        calls = bool(message.get("tool_calls")) or _legacy_tool_call(extra)
        role = _ROLES.get(str(message.get("role", message.get("type"))))
        raw_id = message.get("id")
        message_id = str(raw_id) if raw_id not in (None, "") else None
        return role, _text(message.get("content")), message_id, extra, calls
    raise TypeError(f"expected a LangChain message or a dict, got {type(message).__name__}")


def _legacy_tool_call(extra: Mapping[str, Any]) -> bool:
    return bool(extra.get("tool_calls") or extra.get("function_call"))


def _text(content: Any) -> str:
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


def _hidden(extra: dict[str, Any], keep_hidden: KeepHidden | None) -> bool:
    if not extra.get("hide_from_ui"):
        return False
    return keep_hidden is None or not keep_hidden(dict(extra))


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
