"""What the manager derives from stored fact records, cached per record object."""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from deerflow.agents.memory.backends.deermem.deermem.context import ContextFact
from deerflow.agents.memory.backends.deermem.deermem.core.changes import MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import public_fact
from deerflow.agents.memory.backends.deermem.deermem.governance import normalized

__all__ = ["ContextEntry", "RecordViews"]

RECORD_VIEWS_SIZE: Final = 200_000
_SORT_KEY: Final = operator.attrgetter("sort_key")


# A record, its public dict, its normalised content, whether the public dict holds lists.
_View = tuple[Mapping[str, Any], dict[str, Any], str, bool]


def _copy(view: _View) -> dict[str, Any]:
    _, public, _, has_lists = view
    if not has_lists:
        return dict(public)
    return {key: list(v) if isinstance(v, list) else v for key, v in public.items()}


class ContextEntry(NamedTuple):
    """A stored fact record, the key it is ordered by in the injected text, and its line."""

    record: Mapping[str, Any]
    sort_key: tuple[float, str]
    fact: ContextFact


class RecordViews:
    """What the manager derives from a stored fact record, computed once per record object.

    The storage shares unchanged record objects between revisions, so after a commit only the
    changed facts are derived again: documents and duplicate checks cost no re-parsing.
    """

    def __init__(self) -> None:
        self._views: dict[int, _View] = {}
        self._context: dict[int, ContextEntry] = {}

    def _view(self, record: Mapping[str, Any]) -> _View:
        view = self._views.get(id(record))
        if view is None or view[0] is not record:
            public = public_fact(dict(record))
            has_lists = any(isinstance(value, list) for value in public.values())
            view = (record, public, normalized(record["content"]), has_lists)
            if len(self._views) >= RECORD_VIEWS_SIZE:
                self._views.clear()
            self._views[id(record)] = view  # holding `record` keeps its id from being reused
        return view

    def _all(self, records: Iterable[Mapping[str, Any]]) -> list[_View]:
        """`_view` of each record; the loop is inlined because documents list every fact."""
        known = self._views.get
        views = []
        for record in records:
            view = known(id(record))
            views.append(view if view is not None and view[0] is record else self._view(record))
        return views

    def public(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The contract's fact dict; a copy the caller may change (lists are copied too)."""
        return _copy(self._view(record))

    def normalized(self, snapshot: MemorySnapshot) -> list[tuple[str, str]]:
        """(fact id, normalised content) of every fact in the snapshot."""
        return [(view[1]["id"], view[2]) for view in self._all(snapshot.facts.values())]

    def by_confidence(self, snapshot: MemorySnapshot) -> list[ContextEntry]:
        """The snapshot's facts, most confident first, then most recently updated.

        Each record's entry is kept, and with it the fact's formatted line: a render after a
        change formats only the changed facts.
        """
        known = self._context.get
        entries = []
        for record in snapshot.facts.values():
            entry = known(id(record))
            if entry is None or entry.record is not record:
                entry = self._new_entry(record)
            entries.append(entry)
        entries.sort(key=_SORT_KEY, reverse=True)
        return entries

    def _new_entry(self, record: Mapping[str, Any]) -> ContextEntry:
        fact = ContextFact(
            record["content"], record["category"], record["confidence"], record.get("sourceError")
        )
        entry = ContextEntry(record, (record["confidence"], record.get("updatedAt", "")), fact)
        if len(self._context) >= RECORD_VIEWS_SIZE:
            self._context.clear()
        self._context[id(record)] = entry  # holding `record` keeps its id from being reused
        return entry

    def document(self, snapshot: MemorySnapshot) -> dict[str, Any]:
        """The memory document of a snapshot (SPEC §5.2), facts sorted by id."""
        facts = snapshot.facts
        return {
            "version": "2.0",
            "revision": snapshot.revision,
            "lastUpdated": snapshot.last_updated,
            "user": copy.deepcopy(dict(snapshot.summaries["user"])),
            "history": copy.deepcopy(dict(snapshot.summaries["history"])),
            "facts": [_copy(view) for view in self._all(map(facts.__getitem__, sorted(facts)))],
        }
