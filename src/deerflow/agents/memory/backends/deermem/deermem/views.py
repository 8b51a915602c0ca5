"""What the manager derives from stored fact records, cached per record object."""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterable, Mapping
from itertools import compress
from typing import Any, Final, NamedTuple

from deerflow.agents.memory.backends.deermem.deermem.context import ContextFact
from deerflow.agents.memory.backends.deermem.deermem.core.changes import MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import public_fact
from deerflow.agents.memory.backends.deermem.deermem.governance import keep_order, normalized

__all__ = ["BucketColumns", "ContextEntry", "RecordViews"]

RECORD_VIEWS_SIZE: Final = 200_000
_SORT_KEY: Final = operator.attrgetter("sort_key")


# A record, its public dict, its normalised content, whether the public dict holds lists, and
# its `keep_order` key. Read a field of many views with these getters: in C, without a loop.
_View = tuple[Mapping[str, Any], dict[str, Any], str, bool, tuple[float, str]]
_PUBLIC: Final = operator.itemgetter(1)
_NORMALIZED: Final = operator.itemgetter(2)
_HAS_LISTS: Final = operator.itemgetter(3)
_ORDER_KEY: Final = operator.itemgetter(4)


def _copy(view: _View) -> dict[str, Any]:
    return _with_lists_copied(view[1]) if view[3] else dict(view[1])


def _with_lists_copied(public: dict[str, Any]) -> dict[str, Any]:
    return {key: list(v) if isinstance(v, list) else v for key, v in public.items()}


class BucketColumns(NamedTuple):
    """What the write checks read of every fact of a snapshot, in the snapshot's order."""

    ids: list[str]
    normalized: list[str]  # for `refuse_duplicate`
    order_keys: list[tuple[float, str]]  # for `capacity_evictions`


class ContextEntry(NamedTuple):
    """A stored fact record, the key it is ordered by in the injected text, and its line."""

    record: Mapping[str, Any]
    sort_key: tuple[float, str]
    fact: ContextFact


class RecordViews:
    """What the manager derives from a stored fact record, computed once per record object.

    The storage shares unchanged record objects between revisions, so after a commit only the
    changed facts are derived again: documents, duplicate checks and the capacity policy's
    ordering cost no re-parsing.
    """

    def __init__(self) -> None:
        self._views: dict[int, _View] = {}
        self._context: dict[int, ContextEntry] = {}

    def _view(self, record: Mapping[str, Any]) -> _View:
        view = self._views.get(id(record))
        if view is None or view[0] is not record:
            public = public_fact(dict(record))
            has_lists = any(isinstance(value, list) for value in public.values())
            view = (record, public, normalized(record["content"]), has_lists, keep_order(record))
            if len(self._views) >= RECORD_VIEWS_SIZE:
                self._views.clear()
            self._views[id(record)] = view  # holding `record` keeps its id from being reused
        return view

    def _all(self, records: Iterable[Mapping[str, Any]]) -> list[_View]:
        """`_view` of each record. Documents and write checks list every fact, so the kept
        views are looked up in C; only records without one take the slow path."""
        records = list(records)
        # A view found by id is the record's own: the view holds its record, so no other live
        # object can have that id.
        views: list[_View | None] = list(map(self._views.get, map(id, records)))
        if None in views:
            for at in compress(range(len(views)), map(operator.not_, views)):
                views[at] = self._view(records[at])
        return views  # type: ignore[return-value]  # no None is left

    def public(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The contract's fact dict; a copy the caller may change (lists are copied too)."""
        return _copy(self._view(record))

    def columns(self, snapshot: MemorySnapshot) -> BucketColumns:
        """The ids, normalised contents and eviction keys of the snapshot's facts."""
        views = self._all(snapshot.facts.values())
        return BucketColumns(
            list(snapshot.facts),
            list(map(_NORMALIZED, views)),
            list(map(_ORDER_KEY, views)),
        )

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
            "facts": _copies(self._all(map(facts.__getitem__, sorted(facts)))),
        }


def _copies(views: list[_View]) -> list[dict[str, Any]]:
    """A copy of each view's public dict that the caller may change (lists are copied too)."""
    copies = list(map(dict, map(_PUBLIC, views)))
    for at in compress(range(len(views)), map(_HAS_LISTS, views)):
        copies[at] = _with_lists_copied(copies[at])
    return copies
