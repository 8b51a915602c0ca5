"""What `PostgresMemoryStorage` keeps of users between reads, each part labelled with the
revision it is true for.

A user's document and each bucket's facts are kept as of a revision; a reader hands them out
while the database still holds that revision. A commit of this process carries them over to
the revision it made; a read after another process's commit takes every record whose stored
text is unchanged as the very object it had (not parsed or checked again), and says what
changed (`changed_from`), so what callers derived from the records holds. Thread-safe in the
way a dict is: every entry is replaced whole, and one labelled revision r is true for r, so
an entry a slower thread writes late is only ever stale, and then read again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.core.changes import FactKey
from deerflow.agents.memory.backends.deermem.deermem.postgres.records import Document

__all__ = ["CachedBucket", "UserCache"]

# Past either, the cache starts again.
CACHED_USERS: Final = 4096
CACHED_BUCKETS: Final = 16384

ParseRecord = Callable[[str, str], dict[str, Any]]
"""Reads the record of (fact id, stored JSON text) of one bucket, checked."""


@dataclass(frozen=True, slots=True)
class CachedBucket:
    revision: int
    facts: dict[str, dict[str, Any]]
    texts: dict[str, str]  # each record's JSON text as stored
    # The facts of an earlier state and the ids changed since (`changed_from`).
    changed_from: tuple[dict[str, dict[str, Any]], tuple[str, ...]] | None = None


class UserCache:
    """Users' documents and buckets, by user key, as of the revision each is labelled with."""

    def __init__(self) -> None:
        self._documents: dict[str, Document] = {}
        self._buckets: dict[tuple[str, str], CachedBucket] = {}

    def document(self, user_key: str) -> Document | None:
        return self._documents.get(user_key)

    def bucket(self, user_key: str, bucket: str) -> CachedBucket | None:
        return self._buckets.get((user_key, bucket))

    def put_document(self, user_key: str, document: Document) -> None:
        if len(self._documents) >= CACHED_USERS and user_key not in self._documents:
            self.clear()
        self._documents[user_key] = document

    def put_bucket(self, user_key: str, bucket: str, read: CachedBucket) -> None:
        if len(self._buckets) >= CACHED_BUCKETS and (user_key, bucket) not in self._buckets:
            self.clear()
        self._buckets[(user_key, bucket)] = read

    def clear(self) -> None:
        self._documents.clear()
        self._buckets.clear()

    def drop(self, user_key: str) -> None:
        self._documents.pop(user_key, None)
        for key in [key for key in self._buckets if key[0] == user_key]:
            del self._buckets[key]

    def merged(
        self,
        user_key: str,
        bucket: str,
        revision: int,
        texts: dict[str, str],
        parse: ParseRecord,
        *,
        fresh: bool = False,
    ) -> CachedBucket:
        """The bucket as stored `texts` at `revision`, taking each record whose text is the
        one kept (the same object), and saying what changed since: while nothing of the
        bucket changed, the very same mapping. `fresh`: every record parsed again."""
        earlier = None if fresh else self._buckets.get((user_key, bucket))
        if earlier is None:
            facts = {fact_id: parse(fact_id, text) for fact_id, text in texts.items()}
            return CachedBucket(revision, facts, texts)
        facts = {}
        changed = []
        for fact_id, record in earlier.facts.items():  # removed, or replaced in place
            text = texts.get(fact_id)
            if text is not None and text == earlier.texts[fact_id]:
                facts[fact_id] = record
                continue
            changed.append(fact_id)
            if text is not None:
                facts[fact_id] = parse(fact_id, text)
        for fact_id, text in texts.items():  # added at the end
            if fact_id not in earlier.facts:
                changed.append(fact_id)
                facts[fact_id] = parse(fact_id, text)
        if not changed:
            return replace(earlier, revision=revision)
        return CachedBucket(revision, facts, texts, (earlier.facts, tuple(changed)))

    def carry_over(
        self,
        user_key: str,
        old: Document,
        new: Document,
        after: Mapping[FactKey, bytes | None],
        records: Mapping[FactKey, tuple[dict[str, Any], str]],
    ) -> None:
        """Carry what is kept of the user as of `old` over to the commit that made `new`:
        `after` gives each changed fact's new file (None: deleted), `records` each written
        record with its stored text."""
        known = self._documents.get(user_key)
        # The buckets holding facts, while known: a bucket kept whole is known to be empty.
        buckets = (
            set(known.buckets) if known is not None and known.revision == old.revision else None
        )
        touched = {key[0] for key in after}
        for (cached_user, bucket), cached in list(self._buckets.items()):
            if cached_user != user_key:
                continue
            if cached.revision != old.revision:
                del self._buckets[(cached_user, bucket)]
                continue
            changed = [key for key in after if key[0] == bucket]
            if not changed:  # the same facts: the same mapping, so what is derived from it holds
                self._buckets[(cached_user, bucket)] = replace(cached, revision=new.revision)
                continue
            facts, texts = dict(cached.facts), dict(cached.texts)
            for key in changed:
                if after[key] is None:
                    facts.pop(key[1], None)
                    texts.pop(key[1], None)
                else:
                    facts[key[1]], texts[key[1]] = records[key]
            self._buckets[(cached_user, bucket)] = CachedBucket(
                new.revision, facts, texts, (cached.facts, tuple(key[1] for key in changed))
            )
            if buckets is not None:
                (buckets.add if facts else buckets.discard)(bucket)
            touched.discard(bucket)
        for bucket in touched:  # not kept: it holds facts if one was written
            if buckets is not None and any(
                key[0] == bucket and data is not None for key, data in after.items()
            ):
                buckets.add(bucket)
            else:
                buckets = None
        if buckets is None:  # read again with the next snapshot
            self._documents.pop(user_key, None)
        else:
            self.put_document(user_key, replace(new, buckets=tuple(sorted(buckets))))
