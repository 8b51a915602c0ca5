"""The one module that imports `langchain-openviking` and `openviking-sdk` (both AGPL-3.0).

They come with the optional extra `openviking`. The manager imports this module only when it is
built, so listing backends, resolving `manager_class` and asking the class about its read policy
all work without the extra.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Final

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_openviking.messages import is_recordable_langchain_message
from langchain_openviking.recording import MAX_RECORDING_BATCH_SIZE, OpenVikingSessionRecorder
from langchain_openviking.retrievers import OpenVikingRetriever
from openviking_sdk import SyncHTTPClient  # type: ignore[import-untyped]  # ships no py.typed

__all__ = ["MEMORY_ROOT", "OpenVikingAdapter", "connect"]

MEMORY_ROOT: Final = "viking://user/memories"


def connect(base_url: str, api_key: str, timeout: float) -> SyncHTTPClient:
    """An HTTP client for one API key. It opens no connection until the first call."""
    # Explicit empty headers: without them the SDK adds those of ~/.openviking/ovcli.conf.
    return SyncHTTPClient(url=base_url, api_key=api_key, timeout=timeout, extra_headers={})


class OpenVikingAdapter:
    """Session writes through `OpenVikingSessionRecorder`, recall through `OpenVikingRetriever`.

    The recorder has no commit policy: the manager commits explicitly, after its cursor recorded
    what was written, so a failed or interrupted commit is retried rather than forgotten.
    """

    batch_size: Final = MAX_RECORDING_BATCH_SIZE

    def __init__(self, client: Any, *, owns_client: bool) -> None:
        self._client = client
        self._owns_client = owns_client
        self._initialized = False
        self._init_lock = threading.Lock()
        self._recorder = OpenVikingSessionRecorder(
            client=client, auto_initialize=False, batch_size=self.batch_size
        )

    def recordable(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages the recorder would write (no system prompts, summaries or empty turns)."""
        return [message for message in messages if is_recordable_langchain_message(message)]

    def write(self, session_id: str, messages: Sequence[BaseMessage]) -> None:
        """Append at most `batch_size` messages in one request: all are written or none."""
        self._ready()
        self._recorder.record(session_id, messages)

    def commit(self, session_id: str) -> None:
        """Commit the session if it holds uncommitted messages (OpenViking extracts memories)."""
        self._ready()
        self._recorder.flush(session_id)

    def find(
        self, query: str, *, limit: int, score_threshold: float | None, max_chars: int
    ) -> list[Document]:
        """The owner's memories most relevant to `query`, best first."""
        retriever = OpenVikingRetriever(
            client=self._ready(),
            auto_initialize=False,
            target_uri=MEMORY_ROOT,
            search_mode="find",
            limit=limit,
            score_threshold=score_threshold,
            context_types=("memory",),
            content_mode="overview",
            max_content_chars=max_chars,
        )
        return retriever.invoke(query)

    def healthy(self) -> bool:
        """The server's own verdict; over HTTP an authenticated call, so it checks the key too."""
        return bool(self._ready().is_healthy())

    def close(self) -> None:
        self._recorder.close()
        if self._owns_client and self._initialized:
            self._client.close()

    def _ready(self) -> Any:
        with self._init_lock:
            if not self._initialized:
                self._client.initialize()
                self._initialized = True
        return self._client
