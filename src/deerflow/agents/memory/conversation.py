"""Reading the conversation a host hands to `add()`, and what memory must never learn from.

Hosts pass LangChain messages or plain `{"role", "content"}` dicts. `read_message` reduces either
to the few things a backend looks at. Every backend drops the same things: tool traffic, system
prompts, hidden host injections (`hide_from_ui`, unless the host's keep hook says otherwise),
among them the `<memory>` block, which would otherwise feed memory back into itself, and the
messages the harness wrote in the user's place, such as the summary of a compacted thread.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "ConversationMessage",
    "MessageRole",
    "is_harness_message",
    "is_hidden",
    "is_memory_injection",
    "read_message",
    "strip_memory_blocks",
    "strip_upload_blocks",
]

MessageRole = Literal["user", "assistant"]

# Message types (BaseMessage.type, ChatMessage.role, a dict's "role") that memory reads.
_ROLES: Final[Mapping[str, MessageRole]] = {
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


@dataclass(frozen=True, slots=True)
class ConversationMessage:
    """A message of either accepted shape, reduced to what memory looks at.

    Attributes:
        role: "user" or "assistant"; None for a kind memory never reads (system, tool, …).
        text: The text of the content (a string, or the text blocks of a block list).
        message_id: The LangChain message id, when the message had one.
        additional_kwargs: The message's `additional_kwargs` (where `hide_from_ui` lives).
        calls_tools: Whether the message asks for tool calls (an intermediate agent step).
    """

    role: MessageRole | None
    text: str
    message_id: str | None
    additional_kwargs: dict[str, Any]
    calls_tools: bool


def read_message(message: Any) -> ConversationMessage:
    """Reduce a LangChain `BaseMessage` or a message dict to a `ConversationMessage`.

    Raises:
        TypeError: `message` is neither a `BaseMessage` nor a mapping.
    """
    # A LangChain message can only exist once langchain_core.messages is imported, so looking it
    # up instead of importing it spares every process that never sees one ~200 ms of imports.
    lc = sys.modules.get("langchain_core.messages")
    if lc is not None and isinstance(message, lc.BaseMessage):
        kind = message.role if isinstance(message, lc.ChatMessage) else message.type
        extra = message.additional_kwargs
        # Only AI messages carry tool calls; on the others a getattr miss costs a pydantic
        # `__getattr__` and an exception, several times the rest of this function.
        ai = isinstance(message, lc.AIMessage)
        calls = (message.tool_calls, message.invalid_tool_calls) if ai else ()
        return ConversationMessage(
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
        return ConversationMessage(
            _ROLES.get(str(message.get("role", message.get("type")))),
            _text(message.get("content")),
            str(raw_id) if raw_id not in (None, "") else None,
            extra,
            any(calls) or _legacy_tool_call(extra),
        )
    raise TypeError(f"expected a LangChain message or a dict, got {type(message).__name__}")


def is_hidden(
    message: ConversationMessage, keep_hidden: Callable[[dict[str, Any]], bool] | None
) -> bool:
    """A hidden (`hide_from_ui`) message the host does not ask to keep; None keeps none."""
    if not message.additional_kwargs.get("hide_from_ui"):
        return False
    # A copy: the hook must not be able to change the caller's message.
    return keep_hidden is None or not keep_hidden(dict(message.additional_kwargs))


def is_harness_message(message: ConversationMessage) -> bool:
    """A message the agent harness wrote, not the user: LangChain marks it with `lc_source`.

    LangChain's `SummarizationMiddleware` replaces the older part of a thread by a human message
    "Here is a summary of the conversation to date: …" with `additional_kwargs={"lc_source":
    "summarization"}`. Learning from it would turn the summariser's words, about turns memory
    was already handed, into facts about the user. `add_notification_metadata` sets the same key
    on the other messages a user did not type (background task updates).
    """
    return isinstance(message.additional_kwargs.get("lc_source"), str)


def is_memory_injection(text: str) -> bool:
    """A user message that opens with the memory block is the host's injection, hidden or not."""
    return text.lstrip().startswith("<memory>")


def strip_memory_blocks(text: str) -> str:
    """`text` without embedded `<memory>` blocks and the blank lines they leave behind."""
    return _EXTRA_BLANK_LINES.sub("\n\n", _MEMORY_BLOCK.sub("", text)).strip()


def strip_upload_blocks(text: str) -> str:
    """`text` without the host's upload listings (`<uploaded_files>`, `<current_uploads>`)."""
    return _UPLOAD_BLOCK.sub("", text)


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
