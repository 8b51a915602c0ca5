"""What this process knows of the Honcho sessions it writes to, and one lock per session.

Knowing which keys a session holds lets a turn send only its new messages in one request. The
knowledge is rebuilt from Honcho itself (the keys in the messages' metadata) the first time a
process writes to a session, so a restart or a second process never resends a message.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

__all__ = ["SessionState", "SessionStates"]

SessionKey = tuple[str, str]  # (workspace, session)

# Sessions remembered at once; a forgotten one costs one listing of its messages when used again.
CAPACITY: Final = 1024
# Writes to different sessions run in parallel unless their keys share a stripe.
LOCK_STRIPES: Final = 64


@dataclass
class SessionState:
    """The keys of the messages a session holds, and the peers known to be in it."""

    keys: set[str]
    peers: set[str] = field(default_factory=set)


class SessionStates:
    """A bounded, thread-safe map from (workspace, session) to its `SessionState`."""

    def __init__(self) -> None:
        self._states: OrderedDict[SessionKey, SessionState] = OrderedDict()
        self._guard = threading.Lock()
        self._locks = tuple(threading.Lock() for _ in range(LOCK_STRIPES))

    def lock(self, key: SessionKey) -> threading.Lock:
        """The lock to hold while reading and writing the session `key`."""
        return self._locks[hash(key) % LOCK_STRIPES]

    def get(self, key: SessionKey) -> SessionState | None:
        with self._guard:
            state = self._states.get(key)
            if state is not None:
                self._states.move_to_end(key)
            return state

    def put(self, key: SessionKey, state: SessionState) -> None:
        with self._guard:
            self._states[key] = state
            self._states.move_to_end(key)
            while len(self._states) > CAPACITY:
                self._states.popitem(last=False)

    def drop(self, key: SessionKey) -> None:
        with self._guard:
            self._states.pop(key, None)
