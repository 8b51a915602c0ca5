"""What the manager derives from stored fact records, cached per record object."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.core.changes import MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import public_fact
from deerflow.agents.memory.backends.deermem.deermem.governance import normalized

__all__ = ["RecordViews"]

RECORD_VIEWS_SIZE: Final = 200_000


class RecordViews:
    """What the manager derives from a stored fact record, computed once per record object.

    The storage shares unchanged record objects between revisions, so after a commit only the
    changed facts are derived again: documents and duplicate checks cost no re-parsing.
    """

    def __init__(self) -> None:
        self._views: dict[int, tuple[Mapping[str, Any], dict[str, Any], str, bool]] = {}

    def _view(
        self, record: Mapping[str, Any]
    ) -> tuple[Mapping[str, Any], dict[str, Any], str, bool]:
        view = self._views.get(id(record))
        if view is None or view[0] is not record:
            public = public_fact(dict(record))
            has_lists = any(isinstance(value, list) for value in public.values())
            view = (record, public, normalized(record["content"]), has_lists)
            if len(self._views) >= RECORD_VIEWS_SIZE:
                self._views.clear()
            self._views[id(record)] = view  # holding `record` keeps its id from being reused
        return view

    def public(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The contract's fact dict; a copy the caller may change (lists are copied too)."""
        _, public, _, has_lists = self._view(record)
        if not has_lists:
            return dict(public)
        return {key: list(v) if isinstance(v, list) else v for key, v in public.items()}

    def normalized(self, snapshot: MemorySnapshot) -> Iterator[tuple[str, str]]:
        """(fact id, normalised content) of every fact in the snapshot."""
        for fact_id, record in snapshot.facts.items():
            yield fact_id, self._view(record)[2]

    def document(self, snapshot: MemorySnapshot) -> dict[str, Any]:
        """The memory document of a snapshot (SPEC §5.2), facts sorted by id."""
        return {
            "version": "2.0",
            "revision": snapshot.revision,
            "lastUpdated": snapshot.last_updated,
            "user": copy.deepcopy(dict(snapshot.summaries["user"])),
            "history": copy.deepcopy(dict(snapshot.summaries["history"])),
            "facts": [self.public(snapshot.facts[i]) for i in sorted(snapshot.facts)],
        }
