"""Where DeerFlow's identities live in Honcho: a workspace per user, peers, a session per thread.

Honcho names allow only `[A-Za-z0-9_-]`, so user and thread ids become a readable slug plus a
digest of the whole id (`slug_with_digest`): the names are stable across restarts and processes,
and ids that differ only in punctuation never share a workspace or a session.
"""

from __future__ import annotations

import re
from typing import Final

from deerflow.agents.memory.manager import checked_id, checked_user_id, slug_with_digest

__all__ = ["ASSISTANT_PEER", "USER_PEER", "assistant_peer_id", "session_id", "workspace_id"]

# The workspace belongs to one user, so the user is always the same peer in it.
USER_PEER: Final = "user"
# The assistant peer of the default agent; a named agent is `assistant-<name>`.
ASSISTANT_PEER: Final = "assistant"
_AGENT_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def workspace_id(prefix: str, user_id: str | None) -> str:
    """The user's workspace: `<prefix>-<slug>_<digest>`; None is the "default" user.

    Raises:
        ValueError: an empty user id, one longer than 1024 characters, or one with NUL.
    """
    return f"{prefix}-{slug_with_digest(checked_user_id(user_id), '_', 'user')}"


def session_id(thread_id: str) -> str:
    """The thread's session inside the user's workspace: `<slug>_<digest>`.

    Raises:
        ValueError: an empty thread id, one longer than 1024 characters, or one with NUL.
    """
    return slug_with_digest(checked_id(thread_id, "thread_id"), "_", "thread")


def assistant_peer_id(agent_name: str | None) -> str:
    """The peer that speaks for an agent: `assistant`, or `assistant-<name>` in lower case.

    Lower case because agent names are case-insensitive in DeerFlow, as DeerMem's buckets are.

    Raises:
        ValueError: a name that is not 1 to 64 letters, digits, `_` or `-`.
    """
    if agent_name is None:
        return ASSISTANT_PEER
    if not isinstance(agent_name, str) or not _AGENT_NAME.fullmatch(agent_name):
        raise ValueError(f"agent_name: {agent_name!r} must be 1 to 64 letters, digits, '_' or '-'")
    return f"{ASSISTANT_PEER}-{agent_name.lower()}"
