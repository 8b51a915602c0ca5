"""The retrieval index: a derived SQLite FTS5 index of every user's facts (SPEC §5.5).

The fact files are the truth; this one database, shared by every scope (a user and an agent
bucket), can always be rebuilt from them.

Scoping by rowid. A scope's facts get rowids in `[scope_id << 32, (scope_id << 32) | 0xFFFFFFFF]`.
A search gives FTS5 that range with the MATCH, so FTS5 seeks straight into the scope inside each
posting list: results cannot cross scopes, and a search costs the same whatever others store.

Ranking. FTS5's own `bm25()` computes each term's IDF by walking the term's postings in the
whole table, so its cost grows with every other user's data (`benchmarks/index_probe.py`: a
scoped MATCH takes 0.011 ms with 10^4 or 10^5 other facts; adding `bm25()` makes it 0.05 and
0.26 ms, about 2 ms at 10^6). The score is therefore BM25 over the scope itself, computed in SQL
from one scoped MATCH per query term (`fts_query.search_sql`)::

    idf(t)  = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))       N, df: facts of the scope
    bm25(d) = sum(idf(t) for t matching d) * (k1 + 1) / (1 + k1 * (1 - b + b * len(d) / avglen))
    score   = bm25(d) * (0.7 + 0.3 * confidence) * (0.7 + 0.3 * 0.5 ** (age_days / 90))

with k1 = 1.2, b = 0.75 and term frequency taken as 1 (a fact is a sentence or two). Confidence
and recency each scale the text score by 0.7..1: they order facts that match equally well, but a
text match about twice as strong always wins. Nor does a user's ranking depend on others' data.

Concurrency. One connection per object behind a lock; WAL lets other processes read while one
writes; writes are `BEGIN IMMEDIATE` transactions, so writers queue on the busy timeout.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from deerflow.agents.memory.backends.deermem.deermem.core.fts_query import (
    STOP_WORDS,
    Cut,
    bigrams,
    build_query,
    count_tokens,
    jieba_cut,
    search_sql,
    segment,
)
from deerflow.agents.memory.backends.deermem.deermem.core.sqlite import (
    apply_migrations,
    immediate_transaction,
)
from deerflow.agents.memory.manager import MemoryCorruptionError

__all__ = ["TOKENIZER", "IndexCorruptionError", "IndexedFact", "RetrievalIndex", "SearchHit"]

_SCOPE_BITS: Final = 32
_BUSY_TIMEOUT_S: Final = 30.0
_PROGRESS_EVERY: Final = 1000

TOKENIZER: Final = "porter unicode61 remove_diacritics 2"
"""The FTS5 tokenizer: English words are Porter-stemmed (`stories` finds `story`); other scripts,
and the CJK words `segment` writes, pass through unicode61 unchanged."""
_FTS_TABLE: Final = (
    "CREATE VIRTUAL TABLE facts_fts USING fts5(body, content='facts', content_rowid='id',"
    " columnsize=0, tokenize='{tokenizer}')"
)

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        # revision NULL means dirty: the index may not match the user's files.
        "CREATE TABLE users (user_key TEXT PRIMARY KEY, revision INTEGER) WITHOUT ROWID",
        "CREATE TABLE scopes (scope_id INTEGER PRIMARY KEY, user_key TEXT NOT NULL,"
        " agent TEXT NOT NULL, UNIQUE (user_key, agent))",
        "CREATE TABLE facts (id INTEGER PRIMARY KEY, scope_id INTEGER NOT NULL,"
        " fact_id TEXT NOT NULL, category TEXT NOT NULL, confidence REAL NOT NULL,"
        " updated_ts REAL NOT NULL, ntokens INTEGER NOT NULL, body TEXT NOT NULL,"
        " UNIQUE (scope_id, fact_id))",
        # No per-row sizes (columnsize=0): FTS5's bm25() is not used, see the module docstring.
        # `_retokenize` then recreates this table with `TOKENIZER` (Porter stemming).
        "CREATE VIRTUAL TABLE facts_fts USING fts5(body, content='facts', content_rowid='id',"
        " columnsize=0, tokenize='unicode61 remove_diacritics 2')",
        # Which CJK segmenter built the index; queries must use the same one.
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    ),
)
"""Schema versions; `MIGRATIONS[i]` takes the database from version i to i + 1."""

_CORRUPTION_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


class IndexCorruptionError(MemoryCorruptionError):
    """The index file is not a readable SQLite database; `RetrievalIndex.reset` recreates it."""


@dataclass(frozen=True, slots=True)
class IndexedFact:
    """The part of a fact the index stores. `agent` is the bucket name, already validated."""

    agent: str
    fact_id: str
    content: str
    category: str
    confidence: float
    updated_at: str


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result; a higher score is better."""

    fact_id: str
    score: float


class RetrievalIndex:
    """The FTS5 index of all scopes in one SQLite file."""

    def __init__(self, path: Path) -> None:
        """Open or create the index at `path`, bringing its schema up to date.

        Raises:
            IndexCorruptionError: `path` exists but is not a readable SQLite database.
        """
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        try:
            with self._guard():
                self._conn.execute("PRAGMA journal_mode=WAL")
                # Derived data: losing the last commits on power loss only costs a rebuild.
                self._conn.execute("PRAGMA synchronous=NORMAL")
            with self._write() as conn:
                apply_migrations(conn, MIGRATIONS)
                _retokenize(conn)
                self._cut = self._choose_segmenter(conn)
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def reset(cls, path: Path) -> RetrievalIndex:
        """Delete the index at `path` (and its WAL files), then create an empty one.

        Dropping derived data is the caller's decision, e.g. after `IndexCorruptionError`.
        """
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return cls(path)

    def close(self) -> None:
        """Close the connection; the object cannot be used afterwards."""
        with self._lock:
            self._conn.close()

    def indexed_revision(self, user_key: str) -> int | None:
        """The user's revision the index reflects, or None when unknown (dirty or never seen)."""
        with self._guard():
            row = self._conn.execute(
                "SELECT revision FROM users WHERE user_key = ?", (user_key,)
            ).fetchone()
        return None if row is None else row[0]

    def mark_dirty(self, user_key: str) -> None:
        """Record that the user's rows may be stale, so the next search rebuilds them."""
        with self._write() as conn:
            _set_revision(conn, user_key, None)

    def apply(
        self,
        user_key: str,
        revision: int,
        upserts: Sequence[IndexedFact],
        deletes: Sequence[tuple[str, str]],
    ) -> None:
        """Apply one committed change of a user, in one transaction.

        The user's indexed revision becomes `revision` only if it was `revision - 1` (or the
        user is new and `revision == 1`); any gap means a change was missed, so the user is
        marked dirty instead.

        Args:
            user_key: the user's key.
            revision: the user's revision after the change.
            upserts: facts created or changed.
            deletes: `(agent, fact_id)` of facts removed; unknown ones are ignored.
        """
        with self._write() as conn:
            row = conn.execute(
                "SELECT revision FROM users WHERE user_key = ?", (user_key,)
            ).fetchone()
            expected = 0 if row is None else row[0]
            sequential = expected is not None and expected == revision - 1
            _set_revision(conn, user_key, revision if sequential else None)
            for agent, fact_id in deletes:
                row = conn.execute(
                    "SELECT f.id, f.body FROM facts AS f JOIN scopes USING (scope_id)"
                    " WHERE user_key = ? AND agent = ? AND fact_id = ?",
                    (user_key, agent, fact_id),
                ).fetchone()
                if row is not None:
                    _unindex(conn, *row)
                    conn.execute("DELETE FROM facts WHERE id = ?", (row[0],))
            scopes: dict[str, int] = {}
            for fact in upserts:
                _upsert(conn, self._cut, user_key, fact, scopes)

    def replace_user(self, user_key: str, revision: int, facts: Iterable[IndexedFact]) -> None:
        """Replace every row of the user (all agents) with `facts`, at `revision`."""
        rows = "FROM facts WHERE scope_id IN (SELECT scope_id FROM scopes WHERE user_key = ?)"
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO facts_fts(facts_fts, rowid, body) SELECT 'delete', id, body {rows}",
                (user_key,),
            )
            conn.execute(f"DELETE {rows}", (user_key,))
            conn.execute("DELETE FROM scopes WHERE user_key = ?", (user_key,))
            _set_revision(conn, user_key, revision)
            scopes: dict[str, int] = {}
            for fact in facts:
                _upsert(conn, self._cut, user_key, fact, scopes)

    def rebuild(
        self,
        users: Iterable[tuple[str, int, Iterable[IndexedFact]]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Drop everything and index `users` afresh, in one transaction.

        Facts are consumed as they come, so memory stays flat however many there are.

        Args:
            users: `(user_key, revision, facts)` for every user.
            progress: called with the number of facts indexed so far, every 1000 facts and
                once at the end.

        Returns:
            The number of facts indexed.
        """
        done = 0
        with self._write() as conn:
            for table in ("users", "scopes", "facts"):
                conn.execute(f"DELETE FROM {table}")
            conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('delete-all')")
            for user_key, revision, facts in users:
                _set_revision(conn, user_key, revision)
                scopes: dict[str, int] = {}
                for fact in facts:
                    _upsert(conn, self._cut, user_key, fact, scopes)
                    done += 1
                    if progress is not None and done % _PROGRESS_EVERY == 0:
                        progress(done)
            # One segment per term makes every later search a single seek per posting list.
            conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('optimize')")
        with self._guard():
            # Hand the page cache the rebuild filled back to the allocator: kept, it left this
            # process's later searches twice as slow (measured; a fresh connection was not).
            self._conn.execute("PRAGMA shrink_memory")
        if progress is not None:
            progress(done)
        return done

    def search(
        self,
        user_key: str,
        agent: str,
        query: str,
        *,
        category: str | None = None,
        limit: int = 5,
        now: datetime | None = None,
    ) -> list[SearchHit]:
        """The facts of one scope that best match `query`, best first.

        Plain text is matched word by word (OR), without English stop words unless it has
        nothing else; deliberate FTS5 syntax passes through, and if FTS5 rejects it the text is
        searched again as plain words.

        Args:
            user_key: the user's key.
            agent: the bucket name.
            query: the search text; blank text finds nothing.
            category: only facts of this category (filtered before the top `limit`).
            limit: the most hits to return.
            now: the moment recency is measured from (default: the current time).

        Raises:
            ValueError: `limit` is below 1.
        """
        if limit < 1:
            raise ValueError(f"limit: must be at least 1, got {limit}")
        moment = _timestamp(now or datetime.now(UTC))
        with self._guard():
            row = self._conn.execute(
                "SELECT scope_id FROM scopes WHERE user_key = ? AND agent = ?", (user_key, agent)
            ).fetchone()
            if row is None:
                return []
            lo, hi = _scope_range(row[0])
            built = build_query(query, self._cut, stop_words=STOP_WORDS)
            while built is not None:
                params: dict[str, object] = {"lo": lo, "hi": hi, "match": built.match}
                params |= {f"t{i}": term for i, term in enumerate(built.terms)}
                params |= {"now": moment, "limit": limit, "category": category}
                sql = search_sql(len(built.terms), category=category is not None)
                try:
                    rows = self._conn.execute(sql, params).fetchall()
                except sqlite3.OperationalError:
                    if not built.syntax:
                        raise
                    built = build_query(query, self._cut, plain=True, stop_words=STOP_WORDS)
                    continue
                return [SearchHit(fact_id, score) for fact_id, score in rows]
        return []

    def _choose_segmenter(self, conn: sqlite3.Connection) -> Cut:
        """The CJK segmenter recorded in the index; a new index records jieba if importable.

        The choice is fixed for the life of the file (`reset` chooses again). An index built
        with jieba, opened where jieba is missing, falls back to bigrams and marks every user
        dirty, because its CJK rows no longer match how queries are cut.
        """
        row = conn.execute("SELECT value FROM meta WHERE key = 'segmenter'").fetchone()
        jieba = jieba_cut()
        if row is not None and row[0] == "bigram":
            return bigrams
        if row is not None and jieba is not None:
            return jieba
        if row is not None:
            conn.execute("UPDATE users SET revision = NULL")
        name = "bigram" if jieba is None else "jieba"
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('segmenter', ?)", (name,))
        return jieba or bigrams

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Hold the connection lock and report a corrupt file as `IndexCorruptionError`."""
        with self._lock:
            try:
                yield
            except sqlite3.DatabaseError as exc:
                # Extended codes (SQLITE_CORRUPT_VTAB, ...) keep the primary code in the low byte.
                code = getattr(exc, "sqlite_errorcode", None)
                if code is not None and code & 0xFF in _CORRUPTION_CODES:
                    raise IndexCorruptionError(
                        f"retrieval index {self.path} is unreadable ({exc}); it is derived data: "
                        "RetrievalIndex.reset() recreates it, then rebuild it from the files"
                    ) from exc
                raise

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on this object's connection (see `immediate_transaction`)."""
        with self._guard(), immediate_transaction(self._conn) as conn:
            yield conn


def _upsert(
    conn: sqlite3.Connection, cut: Cut, user_key: str, fact: IndexedFact, scopes: dict[str, int]
) -> None:
    """Insert or replace one fact, keeping its rowid when it is already indexed."""
    body = segment(fact.content, cut)
    values = (fact.category, fact.confidence, _timestamp(fact.updated_at), count_tokens(body), body)
    scope_id = _scope_id(conn, user_key, fact.agent, scopes)
    old = conn.execute(
        "SELECT id, body FROM facts WHERE scope_id = ? AND fact_id = ?",
        (scope_id, fact.fact_id),
    ).fetchone()
    if old is None:
        lo, hi = _scope_range(scope_id)
        (rowid,) = conn.execute(
            "SELECT coalesce(max(id) + 1, ?) FROM facts WHERE id BETWEEN ? AND ?", (lo, lo, hi)
        ).fetchone()
        if rowid > hi:
            raise OverflowError(f"scope {user_key}/{fact.agent}: rowid range exhausted")
        conn.execute(
            "INSERT INTO facts (category, confidence, updated_ts, ntokens, body,"
            " id, scope_id, fact_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (*values, rowid, scope_id, fact.fact_id),
        )
    else:
        rowid = old[0]
        _unindex(conn, rowid, old[1])
        conn.execute(
            "UPDATE facts SET category = ?, confidence = ?, updated_ts = ?, ntokens = ?,"
            " body = ? WHERE id = ?",
            (*values, rowid),
        )
    conn.execute("INSERT INTO facts_fts(rowid, body) VALUES (?, ?)", (rowid, body))


def _retokenize(conn: sqlite3.Connection) -> None:
    """Recreate `facts_fts` with `TOKENIZER` if the file was built with another tokenizer.

    Schema version 1 created the table with plain `unicode61`. The body text is kept in `facts`,
    so FTS5's 'rebuild' re-indexes every row from it in this transaction: no user goes dirty.
    """
    (sql,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'facts_fts'"
    ).fetchone()
    if f"tokenize='{TOKENIZER}'" in sql:
        return
    conn.execute("DROP TABLE facts_fts")
    conn.execute(_FTS_TABLE.format(tokenizer=TOKENIZER))
    conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('rebuild')")


def _scope_range(scope_id: int) -> tuple[int, int]:
    lo = scope_id << _SCOPE_BITS
    return lo, lo | ((1 << _SCOPE_BITS) - 1)


def _scope_id(conn: sqlite3.Connection, user_key: str, agent: str, cache: dict[str, int]) -> int:
    """The id of the scope, created if new; `cache` spares repeated look-ups in a transaction."""
    if agent not in cache:
        conn.execute(
            "INSERT INTO scopes (user_key, agent) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (user_key, agent),
        )
        (cache[agent],) = conn.execute(
            "SELECT scope_id FROM scopes WHERE user_key = ? AND agent = ?", (user_key, agent)
        ).fetchone()
    return cache[agent]


def _unindex(conn: sqlite3.Connection, rowid: int, body: str) -> None:
    # An external-content FTS5 table forgets a row only when given the exact text it indexed.
    conn.execute(
        "INSERT INTO facts_fts(facts_fts, rowid, body) VALUES ('delete', ?, ?)", (rowid, body)
    )


def _set_revision(conn: sqlite3.Connection, user_key: str, revision: int | None) -> None:
    conn.execute(
        "INSERT INTO users (user_key, revision) VALUES (?, ?)"
        " ON CONFLICT (user_key) DO UPDATE SET revision = excluded.revision",
        (user_key, revision),
    )


def _timestamp(moment: str | datetime) -> float:
    """Unix seconds of an ISO-8601 time or a datetime; one without an offset is taken as UTC.

    An empty or unreadable time gives 0, which only ranks the fact as old: a derived index
    must not refuse a fact its files hold.
    """
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
