"""`PostgresMemoryStorage`: users' documents, facts and audit log in PostgreSQL.

Three tables (docs/data-format.md#postgresql): `users` (one row per user: summaries, revision),
`facts` (one row per fact: its record as JSON) and `history` (one row per commit: the audit
entry, whose facts carry their fact file text as the files engine's do, so undo and the audit
page work alike). Every query names the user (and bucket) by the leading columns of a primary
key, so a user's cost does not grow with other users' data.

A commit is one transaction that locks the user's row (`SELECT ... FOR UPDATE`) and applies
the rules the files engine applies (`core/commits.py`). Readers cache each user's document and
buckets by revision: `load` costs one query of the revision while nothing changed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from psycopg import OperationalError, Rollback
from psycopg_pool import PoolTimeout

from deerflow.agents.memory.backends.deermem.deermem.core.changes import (
    ChangeSet,
    CommitResult,
    FactKey,
    MemorySnapshot,
)
from deerflow.agents.memory.backends.deermem.deermem.core.commits import (
    Stored,
    changed_facts,
    changed_summaries,
    check_preconditions,
    prepare_commit,
    rebased,
)
from deerflow.agents.memory.backends.deermem.deermem.core.factfile import parse_fact, render_fact
from deerflow.agents.memory.backends.deermem.deermem.core.paths import (
    DEFAULT_USER,
    bucket_name,
    safe_user_id,
)
from deerflow.agents.memory.backends.deermem.deermem.core.storage import MemoryStorage
from deerflow.agents.memory.backends.deermem.deermem.engine import UserDump
from deerflow.agents.memory.backends.deermem.deermem.postgres.cache import (
    CachedBucket,
    ParseRecord,
    UserCache,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import (
    DatabaseUnavailableError,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.records import (
    Document,
    checked_document,
    checked_entry,
    checked_fact,
    checked_owner,
    checked_revision,
    fact_name,
    json_text,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.restore import write_dump
from deerflow.agents.memory.backends.deermem.deermem.postgres.schema import migrate
from deerflow.agents.memory.manager import (
    MemoryConflictError,
    MemoryCorruptionError,
    empty_document,
    utc_now,
)

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

    from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig

__all__ = ["MIGRATIONS", "PART", "PostgresMemoryStorage"]

PART: Final = "documents"
MIGRATIONS: Final = (
    (
        "CREATE TABLE users (user_key text PRIMARY KEY, user_id text NOT NULL,"
        " revision bigint NOT NULL, last_updated text NOT NULL, summaries json NOT NULL)",
        "CREATE TABLE facts (user_key text NOT NULL REFERENCES users, bucket text NOT NULL,"
        " fact_id text NOT NULL, record json NOT NULL, PRIMARY KEY (user_key, bucket, fact_id))",
        "CREATE TABLE history (user_key text NOT NULL REFERENCES users,"
        " revision bigint NOT NULL, entry json NOT NULL, PRIMARY KEY (user_key, revision))",
    ),
)
# Users listed per query by `user_ids`, which holds no connection between pages.
USER_PAGE: Final = 1000

_REVISION: Final = "SELECT revision FROM users WHERE user_key = %s"
_DOCUMENT: Final = (
    "SELECT u.user_id, u.revision, u.last_updated, u.summaries,"
    " ARRAY(SELECT DISTINCT f.bucket FROM facts f WHERE f.user_key = k.user_key ORDER BY 1)"
)
# One statement, so one snapshot: the document (the row without a fact id) and the facts
# agree on the revision. Records come as text, so the unchanged ones are not parsed again.
_WHOLE: Final = (
    f"SELECT NULL::text, NULL::text, d.* FROM ({_DOCUMENT} FROM (SELECT %(user)s::text"
    " AS user_key) k LEFT JOIN users u ON u.user_key = k.user_key) d"
    " UNION ALL (SELECT fact_id, record::text, NULL, NULL, NULL, NULL, NULL FROM facts"
    " WHERE user_key = %(user)s AND bucket = %(bucket)s ORDER BY fact_id)"
)
_SOME: Final = (
    "SELECT u.revision, (SELECT json_object_agg(f.fact_id, f.record) FROM facts f"
    " WHERE f.user_key = k.user_key AND f.bucket = %(bucket)s AND f.fact_id = ANY(%(ids)s))"
    " FROM (SELECT %(user)s::text AS user_key) k LEFT JOIN users u ON u.user_key = k.user_key"
)
_ALL_FACTS: Final = (
    "SELECT bucket, fact_id, record FROM facts WHERE user_key = %s ORDER BY bucket, fact_id"
)
_HISTORY: Final = "SELECT revision, entry FROM history WHERE user_key = %s ORDER BY revision"
_LOCK: Final = (
    "SELECT user_id, revision, last_updated, summaries FROM users WHERE user_key = %s FOR UPDATE"
)


class PostgresMemoryStorage(MemoryStorage):
    """Memory in the PostgreSQL database of `pool` (the engine's; it opens and closes it),
    in `config.database_schema`, whose tables this migrates on construction."""

    def __init__(self, config: DeerMemConfig, pool: ConnectionPool) -> None:
        super().__init__(config)
        self._pool = pool
        self._schema = config.database_schema
        with pool.connection() as conn:
            migrate(conn, self._schema, PART, MIGRATIONS)
        self._cache = UserCache()

    # -- reading -------------------------------------------------------------------------------

    def load(self, user_id: str | None, agent_name: str | None) -> MemorySnapshot:
        raw_user, user_key, bucket = _scope(user_id, agent_name)
        document = self._cache.document(user_key)
        cached = self._cache.bucket(user_key, bucket)
        if document is not None and cached is not None and cached.revision == document.revision:
            with self._connection() as conn:
                row = conn.execute(_REVISION, (user_key,)).fetchone()
            revision = 0 if row is None else checked_revision(self._where(user_key), row[0])
            if revision == document.revision:
                return _snapshot(raw_user, bucket, document, cached)
        return self._read_whole(raw_user, user_key, bucket, fresh=False)

    def reload(self, user_id: str | None, agent_name: str | None) -> MemorySnapshot:
        raw_user, user_key, bucket = _scope(user_id, agent_name)
        return self._read_whole(raw_user, user_key, bucket, fresh=True)

    def close(self) -> None:
        self._cache.clear()

    def _read_whole(
        self, raw_user: str, user_key: str, bucket: str, *, fresh: bool
    ) -> MemorySnapshot:
        with self._connection() as conn:
            rows = conn.execute(_WHOLE, {"user": user_key, "bucket": bucket}).fetchall()
        texts = {row[0]: row[1] for row in rows if row[0] is not None}
        [head] = [row[2:] for row in rows if row[0] is None]  # the LEFT JOIN keeps the key
        document = self._document(raw_user, user_key, head)
        parse = self._parser(raw_user, user_key, bucket)
        read = self._cache.merged(user_key, bucket, document.revision, texts, parse, fresh=fresh)
        self._cache.put_document(user_key, document)
        self._cache.put_bucket(user_key, bucket, read)
        return _snapshot(raw_user, bucket, document, read)

    def _parser(self, raw_user: str, user_key: str, bucket: str) -> ParseRecord:
        def parse(fact_id: str, text: str) -> dict[str, Any]:
            return checked_fact(self._schema, user_key, raw_user, bucket, fact_id, json.loads(text))

        return parse

    def _document(self, raw_user: str, user_key: str, row: tuple[Any, ...]) -> Document:
        """The user's document from (user_id, revision, last_updated, summaries, buckets): the
        cached object while it is the same, so what callers derived from it holds."""
        *stored, buckets = row
        known = self._cache.document(user_key)
        if stored[0] is None:  # no row: nothing stored yet
            if buckets:
                raise MemoryCorruptionError(
                    f"{self._where(user_key)}: facts of buckets {', '.join(buckets)} but no row"
                )
            if known is not None and known.revision == 0 and not known.buckets:
                return known  # its summaries are stamped with the time of a first read
            return _empty(raw_user)
        new = checked_document(self._schema, user_key, tuple(stored), tuple(buckets))
        return known if known == new else new

    def _facts(
        self, raw_user: str, user_key: str, bucket: str, rows: Mapping[str, Any]
    ) -> dict[str, dict[str, Any]]:
        return {
            fact_id: checked_fact(self._schema, user_key, raw_user, bucket, fact_id, record)
            for fact_id, record in rows.items()
        }

    def load_facts(
        self, user_id: str | None, agent_name: str | None, fact_ids: Iterable[str]
    ) -> tuple[int, dict[str, Mapping[str, Any]]]:
        raw_user, user_key, bucket = _scope(user_id, agent_name)
        wanted = list(fact_ids)
        with self._connection() as conn:
            found = conn.execute(_SOME, {"user": user_key, "bucket": bucket, "ids": wanted})
            stored, rows = found.fetchone() or (None, None)
        revision = 0 if stored is None else checked_revision(self._where(user_key), stored)
        cached = self._cache.bucket(user_key, bucket)
        if cached is not None and cached.revision == revision:
            facts: Mapping[str, Mapping[str, Any]] = cached.facts
        else:
            facts = self._facts(raw_user, user_key, bucket, rows or {})
        return revision, {fact_id: facts[fact_id] for fact_id in wanted if fact_id in facts}

    def read_history(self, user_id: str | None) -> list[dict[str, Any]]:
        """Every audit entry of the user, oldest first, as `history.jsonl` holds them."""
        _, user_key, _ = _scope(user_id, None)
        with self._connection() as conn:
            rows = conn.execute(_HISTORY, (user_key,)).fetchall()
        return [checked_entry(self._schema, user_key, revision, entry) for revision, entry in rows]

    def user_ids(self) -> Iterator[str]:
        """The raw id of every user with stored memory, in the order of their keys. Read a
        page at a time, holding no connection while the caller works on a user."""
        after = ""
        while True:
            with self._connection() as conn:
                rows = conn.execute(
                    "SELECT user_key, user_id FROM users WHERE user_key > %s"
                    " ORDER BY user_key LIMIT %s",
                    (after, USER_PAGE),
                ).fetchall()
            for user_key, user_id in rows:
                yield checked_owner(self._schema, user_key, user_id)
            if len(rows) < USER_PAGE:
                return
            after = rows[-1][0]

    def scan(self, user_id: str) -> tuple[int, list[dict[str, Any]]]:
        """The user's revision and every fact of every bucket, bypassing the cache."""
        document, facts, _ = self._read_user(user_id, with_history=False)
        return document.revision, facts

    def dump_user(self, user_id: str) -> UserDump:
        """Everything of the user, read in one snapshot of the database."""
        document, facts, history = self._read_user(user_id, with_history=True)
        return UserDump(
            user_id=user_id,
            revision=document.revision,
            last_updated=document.last_updated,
            summaries=document.summaries,
            facts=facts,
            history=history,
        )

    def _read_user(
        self, user_id: str, *, with_history: bool
    ) -> tuple[Document, list[dict[str, Any]], list[dict[str, Any]]]:
        raw_user, user_key, _ = _scope(user_id, None)
        with self._connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            row = conn.execute(
                f"{_DOCUMENT} FROM (SELECT %s::text AS user_key) k"
                " LEFT JOIN users u ON u.user_key = k.user_key",
                (user_key,),
            ).fetchone()
            facts = conn.execute(_ALL_FACTS, (user_key,)).fetchall()
            entries = conn.execute(_HISTORY, (user_key,)).fetchall() if with_history else []
        assert row is not None
        return (
            self._document(raw_user, user_key, row),
            [
                checked_fact(self._schema, user_key, raw_user, bucket, fact_id, record)
                for bucket, fact_id, record in facts
            ],
            [checked_entry(self._schema, user_key, revision, entry) for revision, entry in entries],
        )

    def restore_user(self, dump: UserDump) -> None:
        """Write a user another engine dumped, keeping revisions, records and history as they
        are.

        Raises:
            ValueError: the dump is not a memory this storage could have written.
            MemoryConflictError: the user already has a memory here (nothing is merged).
        """
        user_key = safe_user_id(dump.user_id)
        with self._connection() as conn, conn.transaction():
            write_dump(conn, self._schema, user_key, dump)
        self._cache.drop(user_key)

    # -- writing -------------------------------------------------------------------------------

    def save(self, user_id: str | None, changes: ChangeSet) -> CommitResult:
        raw_user, user_key, _ = _scope(user_id, None)
        unchanged: CommitResult | None = None
        with self._connection() as conn, conn.transaction():
            document = self._locked(conn, raw_user, user_key)
            if changes.rebase_onto is not None and changes.expected_revision != document.revision:
                changes = rebased(
                    changes,
                    document.revision,
                    lambda bucket: self._bucket_under_lock(
                        conn, raw_user, user_key, bucket, document.revision
                    ),
                )
            current = self._current(conn, raw_user, user_key, changes.touched())
            self._refuse_if_edited_by_hand(user_key, document.revision, current)
            check_preconditions(changes, document.revision, current, user_key)
            now = utc_now()
            after, upserted = changed_facts(
                changes,
                raw_user,
                current,
                lambda key, data: parse_fact(
                    data,
                    fact_name(self._schema, user_key, *key),
                    user_id=raw_user,
                    bucket=key[0],
                ),
            )
            summaries = changed_summaries(document.summaries, changes.summaries)
            if not after and not summaries:  # no revision; nor a row for a new user
                unchanged = CommitResult(document.revision, None, document.last_updated)
                raise Rollback
            new, result, written = self._commit(
                conn,
                raw_user,
                user_key,
                document,
                changes,
                current,
                (after, summaries, upserted),
                now,
            )
        if unchanged is not None:
            return unchanged
        self._cache.carry_over(user_key, document, new, after, written)
        return result

    def _locked(self, conn: Connection[Any], raw_user: str, user_key: str) -> Document:
        """The user's document, its row locked until the transaction ends (created, empty, on
        the user's first write)."""
        row = conn.execute(_LOCK, (user_key,)).fetchone()
        if row is None:
            empty = _empty(raw_user)
            conn.execute(
                "INSERT INTO users (user_key, user_id, revision, last_updated, summaries)"
                " VALUES (%s, %s, 0, %s, %s::json) ON CONFLICT (user_key) DO NOTHING",
                (user_key, raw_user, empty.last_updated, json_text(empty.summaries)),
            )
            row = conn.execute(_LOCK, (user_key,)).fetchone()
            assert row is not None
        known = self._cache.document(user_key)
        buckets = () if known is None else known.buckets  # only for the cache; not read here
        document = checked_document(self._schema, user_key, row, buckets)
        if known is not None and known.revision == document.revision and known == document:
            return known
        return document

    def _bucket_under_lock(
        self, conn: Connection[Any], raw_user: str, user_key: str, bucket: str, revision: int
    ) -> Mapping[str, Mapping[str, Any]]:
        cached = self._cache.bucket(user_key, bucket)
        if cached is not None and cached.revision == revision:
            return cached.facts
        rows = conn.execute(
            "SELECT fact_id, record::text FROM facts WHERE user_key = %s AND bucket = %s",
            (user_key, bucket),
        ).fetchall()
        read = self._cache.merged(
            user_key, bucket, revision, dict(rows), self._parser(raw_user, user_key, bucket)
        )
        self._cache.put_bucket(user_key, bucket, read)
        return read.facts

    def _current(
        self, conn: Connection[Any], raw_user: str, user_key: str, keys: set[FactKey]
    ) -> dict[FactKey, Stored | None]:
        """Each touched fact as stored: its record and the bytes of its fact file."""
        current: dict[FactKey, Stored | None] = dict.fromkeys(keys)
        if not keys:
            return current
        buckets, ids = zip(*keys, strict=True)
        rows = conn.execute(
            "SELECT f.bucket, f.fact_id, f.record FROM facts f"
            " JOIN unnest(%s::text[], %s::text[]) AS t(bucket, fact_id)"
            " ON f.bucket = t.bucket AND f.fact_id = t.fact_id WHERE f.user_key = %s",
            (list(buckets), list(ids), user_key),
        ).fetchall()
        for bucket, fact_id, record in rows:
            checked = checked_fact(self._schema, user_key, raw_user, bucket, fact_id, record)
            current[(bucket, fact_id)] = (render_fact(checked), checked)
        return current

    def _refuse_if_edited_by_hand(
        self, user_key: str, revision: int, current: Mapping[FactKey, Stored | None]
    ) -> None:
        """Refuse a change that may rest on a cached record its row no longer matches (a row
        edited by hand leaves the revision alone, so the cache outlives the edit). The cache is
        dropped, so the retry reads the rows.

        Raises:
            MemoryConflictError: a touched fact differs from its cached record.
        """
        for (bucket, fact_id), stored in current.items():
            cached = self._cache.bucket(user_key, bucket)
            if cached is None or cached.revision != revision:
                continue
            record = cached.facts.get(fact_id)
            if record != (None if stored is None else stored[1]):
                self._cache.drop(user_key)
                raise MemoryConflictError(
                    f"fact {fact_id} was changed outside DeerMem since it was read; "
                    "read again, retry"
                )

    def _commit(
        self,
        conn: Connection[Any],
        raw_user: str,
        user_key: str,
        document: Document,
        changes: ChangeSet,
        current: Mapping[FactKey, Stored | None],
        changed: tuple[
            dict[FactKey, bytes | None], dict[str, dict[str, str]], list[dict[str, Any]]
        ],
        now: str,
    ) -> tuple[Document, CommitResult, dict[FactKey, tuple[dict[str, Any], str]]]:
        """Write the change under the lock: facts, the audit entry, then the user's row.
        Returns the new document, the result and each written record with its JSON text."""
        after, summaries, upserted = changed
        commit = prepare_commit(
            changes,
            revision=document.revision,
            summaries=document.summaries,
            texts=summaries,
            current=current,
            after=after,
            now=now,
        )
        # Cached as a later read gives them back (JSON types, checked).
        texts = {(r["agent_name"], r["id"]): json_text(r) for r in upserted}
        records = {
            key: checked_fact(self._schema, user_key, raw_user, *key, json.loads(text))
            for key, text in texts.items()
        }
        written = [(user_key, *key, texts[key]) for key, data in after.items() if data is not None]
        deleted = [(user_key, *key) for key, data in after.items() if data is None]
        with conn.pipeline():
            cursor = conn.cursor()
            if deleted:
                cursor.executemany(
                    "DELETE FROM facts WHERE user_key = %s AND bucket = %s AND fact_id = %s",
                    deleted,
                )
            if written:
                cursor.executemany(
                    "INSERT INTO facts (user_key, bucket, fact_id, record)"
                    " VALUES (%s, %s, %s, %s::json) ON CONFLICT (user_key, bucket, fact_id)"
                    " DO UPDATE SET record = excluded.record",
                    written,
                )
            conn.execute(
                "INSERT INTO history (user_key, revision, entry) VALUES (%s, %s, %s::json)",
                (user_key, commit.revision, json_text(commit.entry)),
            )
            guard = conn.execute(
                "UPDATE users SET revision = %s, last_updated = %s, summaries = %s::json"
                " WHERE user_key = %s AND revision = %s",
                (commit.revision, now, json_text(commit.summaries), user_key, document.revision),
            )
        if guard.rowcount != 1:  # the row is locked: only a hand edit gets here
            raise MemoryConflictError(
                f"memory of {user_key} changed concurrently (revision {document.revision} "
                "moved under its lock); reload and retry"
            )
        new = Document(document.user_id, commit.revision, now, commit.summaries, document.buckets)
        result = CommitResult(
            revision=commit.revision,
            change_id=commit.change_id,
            last_updated=now,
            upserted=tuple(records[key] for key in texts),
            deleted=tuple(key for key, data in after.items() if data is None),
        )
        return new, result, {key: (records[key], texts[key]) for key in texts}

    # -- caching -------------------------------------------------------------------------------

    # -- helpers -------------------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        """A pooled connection in autocommit mode: a read is one round trip; writes open a
        transaction of their own.

        Raises:
            DatabaseUnavailableError: no connection, or it broke; a write it interrupted is
                committed whole or not at all.
        """
        try:
            with self._pool.connection() as conn:
                returned_as = conn.autocommit  # the pool's setting, for the next user
                conn.autocommit = True
                try:
                    yield conn
                finally:
                    if not conn.closed:
                        conn.autocommit = returned_as
        except (OperationalError, PoolTimeout) as exc:
            raise DatabaseUnavailableError(
                f"the memory database ({self._schema}) failed: {str(exc).strip()}"
            ) from exc

    def _where(self, user_key: str) -> str:
        return f"{self._schema}.users (user {user_key})"


def _scope(user_id: str | None, agent_name: str | None) -> tuple[str, str, str]:
    raw_user = DEFAULT_USER if user_id is None else user_id
    return raw_user, safe_user_id(raw_user), bucket_name(agent_name)


def _empty(raw_user: str) -> Document:
    """The document of a user with nothing stored, as the files engine gives it."""
    empty = empty_document()
    return Document(
        raw_user, 0, empty["lastUpdated"], {"user": empty["user"], "history": empty["history"]}, ()
    )


def _snapshot(
    raw_user: str, bucket: str, document: Document, cached: CachedBucket
) -> MemorySnapshot:
    return MemorySnapshot(
        user_id=raw_user,
        bucket=bucket,
        revision=document.revision,
        last_updated=document.last_updated,
        summaries=document.summaries,
        facts=cached.facts,
        buckets=document.buckets,
        changed_from=cached.changed_from,
    )
