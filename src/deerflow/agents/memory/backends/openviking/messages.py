"""Which messages of a thread go to OpenViking: the conversation, tool traffic included.

Unlike DeerMem, which extracts facts itself from what the user said and the agent answered,
OpenViking keeps the session as it happened, so tool calls and tool results are kept too. Hidden
messages (`hide_from_ui`, mostly the host's own injections such as the `<memory>` block) are
dropped unless the host's `should_keep_hidden_message` hook keeps them, exactly as DeerMem does;
without the hook every hidden message is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages

from deerflow.agents.memory.manager import is_hidden, read_message

__all__ = ["KeepHidden", "visible_messages"]

KeepHidden = Callable[[dict[str, Any]], bool]


def visible_messages(messages: Sequence[Any], keep_hidden: KeepHidden | None) -> list[BaseMessage]:
    """`messages` as LangChain messages, without the hidden ones the host does not keep.

    Args:
        messages: LangChain messages, or dicts with `role` and `content` (and optionally `id`,
            `additional_kwargs`, `tool_calls`, `tool_call_id`).
        keep_hidden: the host's hook; None drops every hidden message.

    Raises:
        ValueError: an item is neither; the message names its index and type, never its text.
    """
    result = []
    for index, item in enumerate(messages):
        message = _coerce(index, item)
        if not is_hidden(read_message(message), keep_hidden):
            result.append(message)
    return result


def _coerce(index: int, item: Any) -> BaseMessage:
    if isinstance(item, BaseMessage):
        return item
    if isinstance(item, Mapping):
        try:
            [message] = convert_to_messages([dict(item)])
        except (ValueError, NotImplementedError, TypeError):
            pass  # LangChain's message quotes the dict, text and all; ours must not
        else:
            return message
    raise ValueError(
        f"messages[{index}]: expected a LangChain message or a dict with 'role' and 'content' "
        f"(role one of user, assistant, tool, system), got {type(item).__name__}"
    )
