"""What the manager derives from stored fact records, cached per record object."""

from __future__ import annotations

import operator
import struct
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from itertools import compress
from typing import Any, Final, NamedTuple, Protocol, TypeVar

from deerflow.agents.memory.backends.deermem.deermem.context import ContextFact
from deerflow.agents.memory.backends.deermem.deermem.core.changes import MemorySnapshot
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import public_fact
from deerflow.agents.memory.backends.deermem.deermem.governance import keep_order, normalized

__all__ = ["BucketColumns", "ContextEntry", "RecordViews"]

RECORD_VIEWS_SIZE: Final = 200_000
BUCKETS_SIZE: Final = 256
_SORT_KEY: Final = operator.attrgetter("sort_key")
_DOUBLE: Final = struct.Struct(">d")
_Derived = TypeVar("_Derived", bound=tuple[Any, ...])  # a view or a context entry: never falsy


class _CarriedOver(Protocol):
    """What is kept of a bucket as of its `facts` mapping, and can follow it over a commit."""

    facts: Mapping[str, Mapping[str, Any]]

    def carry_over(
        self,
        facts: Mapping[str, Mapping[str, Any]],
        changed: Iterable[str],
        derive: Callable[[Mapping[str, Any]], Any],
    ) -> bool: ...


_Carried = TypeVar("_Carried", bound=_CarriedOver)


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


class _BucketFacts:
    """What documents and write checks read of one bucket's facts, as of the `facts` mapping
    it was built from: ids and normalised contents and eviction keys in the mapping's order,
    ids and public dicts in id order. A commit's snapshot names the facts it changed, so this
    is carried over in place (a create changes two facts of 500, and looking up, sorting and
    listing all 500 cost ~0.25 ms a create); anything else builds it afresh."""

    __slots__ = ("facts", "has_lists", "ids", "normalized", "order_keys", "publics", "sorted_ids")

    def __init__(self, facts: Mapping[str, Mapping[str, Any]], views: list[_View]) -> None:
        self.facts = facts
        self.ids = list(facts)
        self.normalized: list[str] = list(map(_NORMALIZED, views))
        self.order_keys: list[tuple[float, str]] = list(map(_ORDER_KEY, views))
        by_id = sorted(range(len(views)), key=self.ids.__getitem__)
        self.sorted_ids = list(map(self.ids.__getitem__, by_id))
        self.publics: list[dict[str, Any]] = list(map(_PUBLIC, map(views.__getitem__, by_id)))
        self.has_lists: list[bool] = list(map(_HAS_LISTS, map(views.__getitem__, by_id)))

    def carry_over(
        self,
        facts: Mapping[str, Mapping[str, Any]],
        changed: Iterable[str],
        view_of: Callable[[Mapping[str, Any]], _View],
    ) -> bool:
        """Move to `facts`, made from this one's mapping by changing `changed` as a dict
        changes (removed, replaced in place, or added at the end, in this order); False if the
        result does not add up, which only a storage breaking that promise would cause."""
        for fact_id in changed:
            record = facts.get(fact_id)
            view = None if record is None else view_of(record)
            if fact_id in self.facts:
                at = self.ids.index(fact_id)
                if view is None:
                    del self.ids[at], self.normalized[at], self.order_keys[at]
                else:
                    self.normalized[at], self.order_keys[at] = view[2], view[4]
            elif view is not None:
                self.ids.append(fact_id)
                self.normalized.append(view[2])
                self.order_keys.append(view[4])
            self._place(fact_id, view)
        self.facts = facts
        return len(self.ids) == len(self.sorted_ids) == len(facts)

    def _place(self, fact_id: str, view: _View | None) -> None:
        """Put the fact's public dict in its place in id order, or remove it (`view` None)."""
        at = bisect_left(self.sorted_ids, fact_id)
        present = at < len(self.sorted_ids) and self.sorted_ids[at] == fact_id
        if view is None:
            if present:
                del self.sorted_ids[at], self.publics[at], self.has_lists[at]
        elif present:
            self.publics[at], self.has_lists[at] = view[1], view[3]
        else:
            self.sorted_ids.insert(at, fact_id)
            self.publics.insert(at, view[1])
            self.has_lists.insert(at, view[3])

    def copies(self) -> list[dict[str, Any]]:
        """A copy of each public dict, in id order, that the caller may change (lists too)."""
        copies = list(map(dict, self.publics))
        for at in compress(range(len(copies)), self.has_lists):
            copies[at] = _with_lists_copied(copies[at])
        return copies


class _ContextOrder:
    """A bucket's context entries in ascending `_context_order`, as of the `facts` mapping
    they were made from; carried over a commit like `_BucketFacts`, so a render after a create
    neither looks up nor sorts all 500 entries again (0.12 ms a render)."""

    __slots__ = ("entries", "facts", "keys")

    def __init__(self, facts: Mapping[str, Mapping[str, Any]], entries: list[ContextEntry]) -> None:
        entries.sort(key=_SORT_KEY)
        self.facts = facts
        self.entries = entries
        self.keys: list[bytes] = list(map(_SORT_KEY, entries))

    def carry_over(
        self,
        facts: Mapping[str, Mapping[str, Any]],
        changed: Iterable[str],
        entry_of: Callable[[Mapping[str, Any]], ContextEntry],
    ) -> bool:
        """Move to `facts`, which differs from this one's mapping in `changed` only; False if
        an entry to remove is not where its key says, which only a storage breaking that
        promise would cause."""
        for fact_id in dict.fromkeys(changed):
            before, after = self.facts.get(fact_id), facts.get(fact_id)
            if before is after:
                continue
            if before is not None:
                key = entry_of(before).sort_key
                at = bisect_left(self.keys, key)
                if at == len(self.keys) or self.entries[at].record is not before:
                    return False
                del self.keys[at], self.entries[at]
            if after is not None:
                entry = entry_of(after)
                at = bisect_left(self.keys, entry.sort_key)
                self.keys.insert(at, entry.sort_key)
                self.entries.insert(at, entry)
        self.facts = facts
        return len(self.entries) == len(facts)


class BucketColumns(NamedTuple):
    """What the write checks read of every fact of a snapshot, in the snapshot's order."""

    ids: list[str]
    normalized: list[str]  # for `refuse_duplicate`
    order_keys: list[tuple[float, str]]  # for `capacity_evictions`


class ContextEntry(NamedTuple):
    """A stored fact record, the key it is ordered by in the injected text, and its line."""

    record: Mapping[str, Any]
    sort_key: bytes  # `_context_order`
    fact: ContextFact


def _context_order(record: Mapping[str, Any]) -> bytes:
    """The key of `(confidence, updatedAt, id)` order as one bytes object, which sorts and
    bisects faster than the tuple (57 against 113 us to sort 500 facts). A confidence in 0..1
    as a big-endian IEEE 754 double compares as the number does; then each text in UTF-8 with
    its NULs escaped (`_ordered_text`), which compares as the text's code points do. The id
    makes the order total, so a bucket carried over many commits orders ties as a fresh read
    of it does."""
    confidence = float(record["confidence"]) + 0.0  # -0.0 becomes 0.0: the sign bit would sort last
    return (
        _DOUBLE.pack(confidence)
        + _ordered_text(str(record.get("updatedAt", "")))
        + _ordered_text(str(record["id"]))
    )


def _ordered_text(text: str) -> bytes:
    """`text` in UTF-8 ending in two NULs, each NUL in it written as NUL, 1: a text then sorts
    before every longer text it begins, as a prefix does, whatever follows it in the key."""
    return text.encode("utf-8", "surrogatepass").replace(b"\0", b"\0\1") + b"\0\0"


class RecordViews:
    """What the manager derives from a stored fact record, computed once per record object.

    The storage shares unchanged record objects between revisions, so after a commit only the
    changed facts are derived again: documents, duplicate checks and the capacity policy's
    ordering cost no re-parsing.
    """

    def __init__(self) -> None:
        self._views: dict[int, _View] = {}
        self._context: dict[int, ContextEntry] = {}
        # (user, bucket) → what documents and write checks read, and the context order;
        # updated in place, so guarded.
        self._buckets: dict[tuple[str, str], _BucketFacts] = {}
        self._orders: dict[tuple[str, str], _ContextOrder] = {}
        self._lock = threading.Lock()

    def _view(self, record: Mapping[str, Any]) -> _View:
        view = self._views.get(id(record))
        if view is None or view[0] is not record:
            public = public_fact(dict(record))
            has_lists = any(isinstance(value, list) for value in public.values())
            view = (record, public, normalized(record["content"]), has_lists, keep_order(record))
            _keep(self._views, record, view)
        return view

    def public(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The contract's fact dict; a copy the caller may change (lists are copied too)."""
        return _copy(self._view(record))

    def columns(self, snapshot: MemorySnapshot) -> BucketColumns:
        """The ids, normalised contents and eviction keys of the snapshot's facts."""
        with self._lock:
            kept = self._bucket(snapshot)
            return BucketColumns(list(kept.ids), list(kept.normalized), list(kept.order_keys))

    def by_confidence(self, snapshot: MemorySnapshot) -> list[ContextEntry]:
        """The snapshot's facts, most confident first, then most recently updated, then by id
        (descending).

        Each record's entry is kept, and with it the fact's formatted line: a render after a
        change formats only the changed facts.
        """
        with self._lock:
            entries = self._current(self._orders, snapshot, self._new_order, self._new_entry)
            return entries.entries[::-1]

    def _new_entry(self, record: Mapping[str, Any]) -> ContextEntry:
        source_error = record.get("sourceError")  # text when written here; a hand edit may not be
        fact = ContextFact(
            record["content"],
            record["category"],
            record["confidence"],
            source_error if isinstance(source_error, str) else None,
        )
        entry = ContextEntry(record, _context_order(record), fact)
        _keep(self._context, record, entry)
        return entry

    def _new_order(self, facts: Mapping[str, Mapping[str, Any]]) -> _ContextOrder:
        return _ContextOrder(facts, _kept(self._context, list(facts.values()), self._new_entry))

    def document(self, snapshot: MemorySnapshot) -> dict[str, Any]:
        """The memory document of a snapshot, facts sorted by id."""
        with self._lock:
            facts = self._bucket(snapshot).copies()
        return {
            "version": "2.0",
            "revision": snapshot.revision,
            "lastUpdated": snapshot.last_updated,
            "user": _sections_copy(snapshot.summaries["user"]),
            "history": _sections_copy(snapshot.summaries["history"]),
            "facts": facts,
        }

    def _bucket(self, snapshot: MemorySnapshot) -> _BucketFacts:
        return self._current(self._buckets, snapshot, self._new_bucket, self._view)

    def _new_bucket(self, facts: Mapping[str, Mapping[str, Any]]) -> _BucketFacts:
        return _BucketFacts(facts, _kept(self._views, list(facts.values()), self._view))

    def _current(
        self,
        kept_by_bucket: dict[tuple[str, str], _Carried],
        snapshot: MemorySnapshot,
        build: Callable[[Mapping[str, Mapping[str, Any]]], _Carried],
        derive: Callable[[Mapping[str, Any]], Any],
    ) -> _Carried:
        """What is kept of the snapshot's bucket: as it is, carried over a commit, or built
        (the lock is held). Only the mapping's identity decides which, so what was kept of one
        state of the bucket is never used for another."""
        key = (snapshot.user_id, snapshot.bucket)
        facts = snapshot.facts
        kept = kept_by_bucket.get(key)
        if kept is not None and kept.facts is facts:
            return kept
        base = snapshot.changed_from
        # Out of the dict while carried over: one an error stops half-way is never found again.
        kept_by_bucket.pop(key, None)
        if (
            kept is None
            or base is None
            or base[0] is not kept.facts
            or not kept.carry_over(facts, base[1], derive)
        ):
            kept = build(facts)
            if len(kept_by_bucket) >= BUCKETS_SIZE:
                kept_by_bucket.clear()
        kept_by_bucket[key] = kept
        return kept


def _keep(cache: dict[int, _Derived], record: Mapping[str, Any], derived: _Derived) -> None:
    """Keep what was derived from `record`, by its id; the cache is emptied when full.

    `derived` holds `record`, which keeps its id from being reused while it is kept.
    """
    if len(cache) >= RECORD_VIEWS_SIZE:
        cache.clear()
    cache[id(record)] = derived


def _kept(
    cache: Mapping[int, _Derived],
    records: list[Mapping[str, Any]],
    derive: Callable[[Mapping[str, Any]], _Derived],
) -> list[_Derived]:
    """What `cache` keeps for each record, by the record's id, or `derive(record)` for records
    it has nothing for. Documents, write checks and renders list every fact, so the kept values
    are looked up in C; only the records without one take the slow path.

    A value found by id is the record's own: each value holds its record, so no other live
    object can have that id.
    """
    found: list[_Derived | None] = list(map(cache.get, map(id, records)))
    if None in found:
        for at in compress(range(len(found)), map(operator.not_, found)):
            found[at] = derive(records[at])
    return found  # type: ignore[return-value]  # no None is left


def _sections_copy(sections: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """A copy of a summary part the caller may change (`copy.deepcopy` of both took 14 us)."""
    return {name: dict(section) for name, section in sections.items()}
