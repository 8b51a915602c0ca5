"""The `openviking` backend: an OpenViking server keeps the memory of one owner.

One API key is one OpenViking user, so the backend serves exactly one DeerFlow user,
`owner_user_id`; any other user is refused with `MemoryAccessError` before anything is read or
sent. Each DeerFlow thread is one OpenViking session whose id is derived from the owner and the
thread, so it is the same after a restart. `add()` sends only the messages the session does not
have yet (see `cursor.py`) and then commits the session, which is when OpenViking extracts
memories. `get_context` and `search` ask OpenViking for the owner's memories.

Middleware mode only: OpenViking learns from whole sessions, which only the middleware records.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

from langchain_core.messages import BaseMessage
from pydantic import PrivateAttr

from deerflow.agents.memory.backends.openviking.config import OpenVikingSettings, parse_settings
from deerflow.agents.memory.backends.openviking.cursor import (
    Cursor,
    CursorStore,
    advance,
    signatures,
    unsent,
)
from deerflow.agents.memory.backends.openviking.messages import KeepHidden, visible_messages
from deerflow.agents.memory.backends.openviking.recall import (
    INJECTION_QUERY,
    as_facts,
    render_context,
)
from deerflow.agents.memory.manager import (
    MemoryAccessError,
    MemoryManager,
    MemoryManagerError,
    MemoryMode,
    MemoryReadError,
    validate_category,
)

if TYPE_CHECKING:
    from deerflow.agents.memory.backends.openviking.adapter import OpenVikingAdapter

__all__ = ["MISSING_EXTRA", "OpenVikingMemoryManager"]

logger = logging.getLogger(__name__)

MISSING_EXTRA: Final = (
    "The openviking memory backend needs the optional extra 'openviking' (langchain-openviking "
    "and openviking-sdk, licensed AGPL-3.0): pip install 'deerflow-memory[openviking]', or "
    "uv sync --extra openviking."
)
DEFAULT_USER: Final = "default"
_SEARCH_FETCH_LIMIT: Final = 100  # with a category filter, filter among this many, then cut
_MAX_ERROR_CHARS: Final = 300


class _RemoteWriteError(Exception):
    """A write or commit the server did not acknowledge; the write policy decides what follows."""


class OpenVikingMemoryManager(MemoryManager):
    """Memory in an OpenViking server, through `langchain-openviking` (extra `openviking`).

    Supported: `add`/`add_nowait` (each message sent once), `get_context`, `search`, `warm`
    (health check), `shutdown_flush` (retries commits that failed), `close`. Everything else
    raises `MemoryUnsupportedError`: OpenViking owns its memories.

    `from_config` takes one keyword beyond the host hooks, `client`: an OpenViking client to use
    instead of connecting to `base_url` (e.g. `langchain_openviking.InMemoryOpenVikingClient`
    in tests). The manager does not close a client it was given.
    """

    supports_search: ClassVar[bool] = True

    _settings: OpenVikingSettings = PrivateAttr()
    _api_key: str = PrivateAttr(default="")
    _adapter: OpenVikingAdapter = PrivateAttr()
    _cursors: CursorStore = PrivateAttr()
    _keep_hidden: KeepHidden | None = PrivateAttr(default=None)
    _commit_pending: set[str] = PrivateAttr(default_factory=set)
    _pending_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _closed: bool = PrivateAttr(default=False)

    @classmethod
    def from_config(
        cls,
        backend_config: dict[str, Any],
        *,
        mode: MemoryMode = "middleware",
        client: Any = None,
        **host_hooks: Any,
    ) -> Self:
        return cls(
            backend_config=backend_config,
            mode=mode,
            callbacks=host_hooks.get("callbacks"),
            host_hooks=host_hooks,
            client=client,
        )

    def __init__(self, /, **data: Any) -> None:
        hooks: Mapping[str, Any] = data.pop("host_hooks", {})
        client = data.pop("client", None)
        # Read the mode the way the contract does, before pydantic runs: a plain ValueError.
        if data.get("mode", "middleware") == "tool":
            raise ValueError(
                "memory.mode 'tool' is not supported by the openviking backend: OpenViking "
                "learns from whole sessions, which only the middleware records. Use mode: "
                "middleware."
            )
        super().__init__(**data)
        self._settings = settings = parse_settings(self.backend_config)
        if client is None:
            self._api_key = settings.api_key()
        self._adapter = _build_adapter(settings, self._api_key, client)
        self._cursors = CursorStore(Path(settings.storage_path) / "openviking" / "sessions")
        self._keep_hidden = hooks.get("should_keep_hidden_message")

    @classmethod
    def read_failures_are_fatal_for_config(cls, backend_config: Mapping[str, Any] | None) -> bool:
        """True for `failure_policy.read` `fail_closed` and its alias `raise`."""
        policy = (backend_config or {}).get("failure_policy")
        return isinstance(policy, Mapping) and policy.get("read") in ("fail_closed", "raise")

    # -- writes ----------------------------------------------------------------------------------

    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        """Send the thread's messages OpenViking does not have yet, then commit the session.

        Raises:
            MemoryAccessError: `user_id` is not the owner (nothing is read or sent).
            ValueError: no thread id, or a message of an unknown shape.
            MemoryCorruptionError: the thread's cursor file is unreadable; nothing is resent.
            MemoryManagerError: the server refused the write and `failure_policy.write` is
                `raise`. With `log_and_drop` the failure is logged; what was not acknowledged
                is sent by the next `add` of the thread.
        """
        self._check_owner(user_id)
        session_id = self._session_id(thread_id)
        kept = self._adapter.recordable(visible_messages(messages, self._keep_hidden))
        try:
            self._sync(session_id, kept)
        except _RemoteWriteError as failure:
            if self._settings.failure_policy.write == "raise":
                raise MemoryManagerError(str(failure)) from None
            logger.warning("%s; dropped for now, the next add of the thread retries", failure)

    def shutdown_flush(self, timeout: float) -> bool:
        """Retry, within `timeout` seconds, the commits that failed in this process.

        `add()` writes synchronously, so nothing else is ever queued. Returns False when a
        commit is still pending; it is retried by the thread's next `add`.
        """
        deadline = time.monotonic() + timeout
        with self._pending_lock:
            sessions = sorted(self._commit_pending)
        for session_id in sessions:
            if time.monotonic() >= deadline:
                break
            try:
                with self._cursors.locked(session_id):
                    cursor = self._cursors.load(session_id)
                    if cursor.commit_pending:
                        self._commit(session_id, cursor)
                    else:  # another process sharing the directory committed it
                        self._note_pending(session_id, pending=False)
            except (_RemoteWriteError, MemoryManagerError) as exc:
                logger.warning("shutdown flush: %s", exc)
        with self._pending_lock:
            return not self._commit_pending

    def warm(self) -> bool:
        """Check that the server is up (and, over HTTP, that it accepts the API key).

        Raises:
            MemoryReadError: it is not, and `failure_policy.read` is `fail_closed`.
        """
        try:
            healthy = self._adapter.healthy()
            reason = "the server reports itself unhealthy"
        except Exception as exc:
            healthy, reason = False, self._describe(exc)
        if healthy:
            return True
        message = f"OpenViking at {self._settings.base_url} is not ready: {reason}"
        if self._settings.failure_policy.read == "fail_closed":
            raise MemoryReadError(message)
        logger.warning("%s; memory reads will return nothing until it is", message)
        return False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._adapter.close()

    # -- reads -----------------------------------------------------------------------------------

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        """The owner's memories most relevant to `query`, as lines within the char budget.

        Raises:
            MemoryAccessError: `user_id` is not the owner.
            MemoryReadError: the server failed and `failure_policy.read` is `fail_closed`
                (with `fail_open` the failure is logged and "" returned).
        """
        self._check_owner(user_id)
        retrieval = self._settings.retrieval
        try:
            documents = self._adapter.find(
                query if query and query.strip() else INJECTION_QUERY,
                limit=retrieval.top_k,
                score_threshold=retrieval.score_threshold,
                max_chars=retrieval.max_injection_chars,
            )
        except Exception as exc:
            self._read_failed("get_context", exc)
            return ""
        return render_context(documents, retrieval.max_injection_chars)

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        """The owner's memories most relevant to `query` as fact dicts, best first.

        Raises:
            MemoryAccessError: `user_id` is not the owner.
            ValueError: empty query, negative `top_k`, unknown category.
            MemoryReadError: the server failed and `failure_policy.read` is `fail_closed`.
        """
        self._check_owner(user_id)
        if not isinstance(query, str) or not query.strip():
            raise ValueError("search: query must be non-empty text")
        if top_k < 0:
            raise ValueError(f"search: top_k must be >= 0, got {top_k}")
        if category is not None:
            category = validate_category(category)
        if top_k == 0:
            return []
        retrieval = self._settings.retrieval
        try:
            documents = self._adapter.find(
                query,
                limit=_SEARCH_FETCH_LIMIT if category else min(top_k, _SEARCH_FETCH_LIMIT),
                score_threshold=retrieval.score_threshold,
                max_chars=retrieval.max_injection_chars,
            )
        except Exception as exc:
            self._read_failed("search", exc)
            return []
        facts = as_facts(documents)
        return [fact for fact in facts if category in (None, fact["category"])][:top_k]

    # -- internals -------------------------------------------------------------------------------

    def _sync(self, session_id: str, kept: Sequence[BaseMessage]) -> None:
        """Bring the session up to `kept`, recording progress after every acknowledged step."""
        sigs = signatures(session_id, kept)
        with self._cursors.locked(session_id):
            cursor = self._cursors.load(session_id)
            if cursor.commit_pending:
                cursor = self._commit(session_id, cursor)
            pending = unsent(cursor, sigs)
            max_seen = self._settings.max_seen_messages
            if not pending:
                settled = advance(cursor, sigs, pending, 0, commit_pending=False, max_seen=max_seen)
                if settled != cursor:
                    self._save(session_id, settled)
                return
            written = cursor
            step = self._adapter.batch_size
            for start in range(0, len(pending), step):
                batch = pending[start : start + step]
                try:
                    self._adapter.write(session_id, [kept[index] for index in batch])
                except Exception as exc:
                    raise _RemoteWriteError(
                        f"OpenViking session {session_id}: {start} of {len(pending)} new "
                        f"messages acknowledged, then: {self._describe(exc)}"
                    ) from None
                written = advance(
                    cursor,
                    sigs,
                    pending,
                    start + len(batch),
                    commit_pending=True,
                    max_seen=max_seen,
                )
                self._save(session_id, written)
            self._commit(session_id, written)

    def _commit(self, session_id: str, cursor: Cursor) -> Cursor:
        """Commit the session and record that; the caller holds the session's lock."""
        try:
            self._adapter.commit(session_id)
        except Exception as exc:
            raise _RemoteWriteError(
                f"OpenViking session {session_id}: messages written, commit pending: "
                f"{self._describe(exc)}"
            ) from None
        committed = cursor.model_copy(update={"commit_pending": False})
        self._save(session_id, committed)
        return committed

    def _save(self, session_id: str, cursor: Cursor) -> None:
        self._cursors.save(session_id, cursor)
        self._note_pending(session_id, pending=cursor.commit_pending)

    def _note_pending(self, session_id: str, *, pending: bool) -> None:
        """Track the sessions whose commit `shutdown_flush` must retry."""
        with self._pending_lock:
            if pending:
                self._commit_pending.add(session_id)
            else:
                self._commit_pending.discard(session_id)

    def _check_owner(self, user_id: str | None) -> None:
        requested = DEFAULT_USER if user_id is None else user_id
        if requested != self._settings.owner_user_id:
            raise MemoryAccessError(
                f"user {requested!r} is not the owner of this OpenViking API key; the openviking "
                f"backend serves one user (memory.backend_config.owner_user_id)"
            )

    def _session_id(self, thread_id: str) -> str:
        """The thread's OpenViking session: stable across restarts, distinct per owner."""
        if not isinstance(thread_id, str) or not thread_id.strip():
            raise ValueError("add: thread_id must be non-empty text")
        key = f"deerflow-openviking-session-v1\0{self._settings.owner_user_id}\0{thread_id}"
        return "df_" + hashlib.sha256(key.encode()).hexdigest()[:48]

    def _read_failed(self, operation: str, exc: Exception) -> None:
        message = f"OpenViking {operation} failed: {self._describe(exc)}"
        if self._settings.failure_policy.read == "fail_closed":
            raise MemoryReadError(message) from None
        logger.warning("%s; continuing without memory (failure_policy.read: fail_open)", message)

    def _describe(self, exc: BaseException) -> str:
        """The error's type and text, the API key masked, cut short; never the exception chain."""
        text = f"{type(exc).__name__}: {exc}"
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 1] + "…"


def _build_adapter(settings: OpenVikingSettings, api_key: str, client: Any) -> OpenVikingAdapter:
    try:
        from deerflow.agents.memory.backends.openviking.adapter import OpenVikingAdapter, connect
    except ImportError as exc:
        if not (exc.name or "").startswith(("langchain_openviking", "openviking_sdk")):
            raise
        raise ImportError(MISSING_EXTRA) from exc
    if client is not None:
        return OpenVikingAdapter(client, owns_client=False)
    own = connect(settings.base_url, api_key, settings.timeout_seconds)
    return OpenVikingAdapter(own, owns_client=True)
