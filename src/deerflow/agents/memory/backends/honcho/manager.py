"""The `honcho` backend: memory kept by a Honcho v3 server.

Each DeerFlow user gets a workspace of their own, in which the user is the peer `user` and each
agent a peer `assistant[-<agent>]`; each thread is one session. `add()` sends the turns Honcho
does not hold yet, Honcho's deriver builds its model of the user from them, and `get_context()`
injects that model: the user peer's representation, within `max_context_chars`. `search()`
looks through the messages of the user's whole workspace.

Nothing is read or written at construction; `warm()` checks the server's health.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable
from typing import Any, ClassVar, Final, Self, TypeVar

from pydantic import PrivateAttr

from deerflow.agents.memory.backends.honcho.client import (
    MESSAGES_PER_REQUEST,
    HonchoCallError,
    HonchoClient,
    MessageResponse,
)
from deerflow.agents.memory.backends.honcho.config import HonchoConfig, parse_config
from deerflow.agents.memory.backends.honcho.ids import (
    USER_PEER,
    assistant_peer_id,
    session_id,
    workspace_id,
)
from deerflow.agents.memory.backends.honcho.messages import OutgoingMessage, outgoing_messages
from deerflow.agents.memory.backends.honcho.sessions import SessionState, SessionStates
from deerflow.agents.memory.manager import (
    MemoryManager,
    MemoryManagerError,
    MemoryMode,
    MemoryReadError,
    validate_category,
)

__all__ = ["HonchoMemoryManager"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Search hits are messages: they have no category of their own and Honcho gives no score.
HIT_CATEGORY: Final = "context"
HIT_CONFIDENCE: Final = 0.5


class HonchoMemoryManager(MemoryManager):
    """Memory in Honcho v3, one workspace per user. See `docs/backend-honcho.md`."""

    supports_search: ClassVar[bool] = True
    # Honcho learns from every conversation, so tool mode keeps the middleware writing.
    requires_passive_writes_in_tool_mode: ClassVar[bool] = True

    _config: HonchoConfig = PrivateAttr()
    _client: HonchoClient = PrivateAttr()
    # The host's `should_keep_hidden_message`; without it every hidden message is dropped.
    _keep_hidden: Callable[[dict[str, Any]], bool] | None = PrivateAttr(default=None)
    _sessions: SessionStates = PrivateAttr(default_factory=SessionStates)

    @classmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **host_hooks: Any
    ) -> Self:
        manager = cls(
            backend_config=backend_config, mode=mode, callbacks=host_hooks.get("callbacks")
        )
        manager._keep_hidden = host_hooks.get("should_keep_hidden_message")
        return manager

    def model_post_init(self, context: Any, /) -> None:
        self._config = parse_config(self.backend_config)
        # The client connects lazily: building it makes no request.
        self._client = HonchoClient(
            base_url=self._config.base_url,
            api_key=self._config.api_key(),
            timeout=self._config.timeout_seconds,
            max_retries=self._config.max_retries,
        )

    # -- writes --------------------------------------------------------------------------------

    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        """Send the turns of `messages` that the thread's session does not hold yet.

        Raises:
            ValueError: an unusable user id, thread id or agent name.
            TypeError: a message is neither a LangChain message nor a dict.
            MemoryManagerError: Honcho refused or failed the write and `failure_policy.write`
                is `raise`. Under `log_and_drop` the failure is logged; what was not sent goes
                with the thread's next `add()`.
        """
        workspace = workspace_id(self._config.workspace_prefix, user_id)
        session = session_id(thread_id)
        assistant = assistant_peer_id(agent_name)
        outgoing = outgoing_messages(
            messages,
            user_peer=USER_PEER,
            assistant_peer=assistant,
            keep_hidden=self._keep_hidden,
            max_chars=self._config.max_message_chars,
        )
        if not outgoing:
            return
        key = (workspace, session)
        try:
            with self._sessions.lock(key):
                state = self._sessions.get(key)
                try:
                    self._send(key, assistant, outgoing, state or self._open(key, assistant))
                except HonchoCallError as exc:
                    if state is None or not exc.not_found:
                        raise
                    # Deleted on the server since this process learnt of it: start afresh once.
                    self._sessions.drop(key)
                    self._send(key, assistant, outgoing, self._open(key, assistant))
        except HonchoCallError as exc:
            # A batch that timed out may still have been stored: the next write asks Honcho.
            self._sessions.drop(key)
            if self._config.failure_policy.write == "raise":
                raise MemoryManagerError(
                    f"Honcho write of thread {thread_id!r} failed: {exc}"
                ) from exc
            logger.error(
                "honcho: write of thread %r dropped until its next turn: %s", thread_id, exc
            )

    def _open(self, key: tuple[str, str], assistant: str) -> SessionState:
        """Get or create the workspace, the assistant peer and the session; learn its keys."""
        workspace, session = key
        self._client.ensure_workspace(workspace)
        # Honcho models the user; reasoning about the assistant's own words would be wasted.
        self._client.ensure_peer(workspace, assistant, observed=False)
        self._client.ensure_session(workspace, session, [USER_PEER, assistant])
        state = SessionState(self._client.message_keys(workspace, session), {USER_PEER, assistant})
        self._sessions.put(key, state)
        return state

    def _send(
        self,
        key: tuple[str, str],
        assistant: str,
        outgoing: list[OutgoingMessage],
        state: SessionState,
    ) -> None:
        workspace, session = key
        if assistant not in state.peers:
            self._client.ensure_peer(workspace, assistant, observed=False)
            self._client.add_session_peers(workspace, session, [assistant])
            state.peers.add(assistant)
        new = [message for message in outgoing if message.key not in state.keys]
        for start in range(0, len(new), MESSAGES_PER_REQUEST):
            batch = new[start : start + MESSAGES_PER_REQUEST]
            self._client.add_messages(workspace, session, batch)
            state.keys.update(message.key for message in batch)

    # -- reads ---------------------------------------------------------------------------------

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        """The user peer's representation, curated around `query`, within `max_context_chars`.

        The representation is the user's across all agents and threads: Honcho models the user,
        not an agent's bucket.

        Raises:
            ValueError: an unusable user id or agent name.
            MemoryReadError: Honcho failed and `failure_policy.read` is `fail_closed`.
        """
        workspace = workspace_id(self._config.workspace_prefix, user_id)
        assistant_peer_id(agent_name)
        text = self._read(
            "get_context", lambda: self._client.representation(workspace, USER_PEER, query), ""
        )
        return _fit(text, self._config.max_context_chars)

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        """Messages of the user's workspace matching `query`, best first, as fact dicts.

        Every hit has category "context" (messages have none of their own), so another
        `category` finds nothing; Honcho gives no score, so `confidence` is 0.5.

        Raises:
            ValueError: an empty query, an unknown category, an unusable user id or agent name.
            MemoryReadError: Honcho failed and `failure_policy.read` is `fail_closed`.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query: must be non-empty text")
        if category is not None:
            validate_category(category)
        workspace = workspace_id(self._config.workspace_prefix, user_id)
        assistant_peer_id(agent_name)
        if top_k < 1 or category not in (None, HIT_CATEGORY):
            return []
        limit = min(top_k, MESSAGES_PER_REQUEST)
        hits: list[MessageResponse] = self._read(
            "search", lambda: self._client.search(workspace, query, limit), []
        )
        return [_fact(hit) for hit in hits[:top_k]]

    def _read(self, operation: str, call: Callable[[], T], empty: T) -> T:
        """Run a read under `failure_policy.read`; a workspace or peer not there yet is empty."""
        try:
            return call()
        except HonchoCallError as exc:
            if exc.not_found:
                return empty
            if self._config.failure_policy.read == "fail_closed":
                raise MemoryReadError(f"Honcho {operation} failed: {exc}") from exc
            logger.warning("honcho: %s failed, continuing without memory: %s", operation, exc)
            return empty

    # -- lifecycle -----------------------------------------------------------------------------

    def warm(self) -> bool:
        """Whether the server answers its health check; a failure is logged, never raised."""
        try:
            self._client.check_health()
        except HonchoCallError as exc:
            logger.warning("honcho: server not ready: %s", exc)
            return False
        return True

    def close(self) -> None:
        self._client.close()


def _fit(text: str, budget: int) -> str:
    """Whole lines of `text`, escaped, within `budget` characters; a first line too long is cut.

    Escaping keeps stored text from closing the host's `<memory>` block.
    """
    kept: list[str] = []
    used = 0
    for line in text.strip().splitlines():
        line = html.escape(line.rstrip(), quote=False)
        cost = len(line) + (1 if kept else 0)
        if used + cost > budget:
            if not kept:
                kept.append(line[: budget - 1] + "…")
            break
        kept.append(line)
        used += cost
    return "\n".join(kept)


def _fact(hit: MessageResponse) -> dict[str, Any]:
    created = hit.created_at.isoformat()
    return {
        "id": hit.id,
        "content": hit.content,
        "category": HIT_CATEGORY,
        "confidence": HIT_CONFIDENCE,
        "createdAt": created,
        "updatedAt": created,
        "source": f"honcho:{hit.session_id}",
        "role": "user" if hit.peer_id == USER_PEER else "assistant",
    }
