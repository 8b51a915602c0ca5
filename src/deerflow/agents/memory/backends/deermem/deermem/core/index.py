"""The retrieval index: a derived SQLite FTS5 index of every user's facts.

The fact files are the truth; this one database, shared by every scope (a user and an agent
bucket), can always be rebuilt from them.

Scoping by rowid. A scope's facts get rowids in `[scope_id << 32, (scope_id << 32) | 0xFFFFFFFF]`.
A search gives FTS5 that range with the MATCH, so FTS5 seeks straight into the scope inside each
posting list: results cannot cross scopes, and a search costs the same whatever others store.

Ranking. FTS5's own `bm25()` computes each term's IDF by walking the term's postings in the
whole table, so its cost grows with every other user's data (`benchmarks/index_probe.py`: a
scoped MATCH takes 0.011 ms with 10^4 or 10^5 other facts; adding `bm25()` makes it 0.05 and
0.26 ms, about 2 ms at 10^6). The score is therefore BM25 over the scope itself, from one scoped
MATCH per query term (`lexical.rank` has the formula): term frequency taken as 1, confidence and
recency each scaling the text score by 0.7..1, so they order facts that match equally well, but
a text match about twice as strong always wins. Nor does a user's ranking depend on others' data.
A fact's event time is indexed with its text as words (`8 May 2023`, `fts_query.event_words`).

Each search reads the scope's rows (fact id, category, confidence, time, length) once per indexed
revision of its user: the last 64 scopes searched stay in memory (`ScopeRows`), so a search costs
its MATCHes and a Python pass over the facts they matched. Scoring the MATCHes in SQL instead
(grouping, joining and sorting through temporary B-trees) took twice as long (docs/benchmarks.md).
A search reads in one transaction, so the rows and the MATCHes see the same snapshot.

Hybrid retrieval. Given a `VectorModel`, the index also keeps each fact's vector
(`vectors.py`), and a search fuses the lexical ranking with the semantic one (cosine similarity
to the query, times the same confidence and recency factors), `fusion.fuse`, over the best
`CANDIDATES` of each. Reading a scope's vectors costs more than scoring them (about 1.5 ms for
600 facts against 0.1 ms), so they are kept with the scope's rows, and read with them in one
statement (`vectors.read_scope`).

Concurrency. One connection per object behind a lock; WAL lets other processes read while one
writes; writes are `BEGIN IMMEDIATE` transactions, so writers queue on the busy timeout.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from deerflow.agents.memory.backends.deermem.deermem.core.fts_query import (
    STOP_WORDS,
    Cut,
    build_query,
    choose_segmenter,
    count_tokens,
)
from deerflow.agents.memory.backends.deermem.deermem.core.lexical import ScopeRows, rank
from deerflow.agents.memory.backends.deermem.deermem.core.sqlite import (
    apply_migrations,
    immediate_transaction,
    read_transaction,
)
from deerflow.agents.memory.backends.deermem.deermem.core.vectors import (
    VECTORS_TABLE,
    ScopeVectors,
    VectorModel,
    delete_vector,
    read_scope,
    store_vector,
    sync_model,
)
from deerflow.agents.memory.backends.deermem.deermem.retrieval import (
    CANDIDATES,
    ENCODE_BATCH,
    PROGRESS_EVERY,
    IndexClosedError,
    IndexCorruptionError,
    IndexedFact,
    SearchHit,
    batches,
    by_meaning,
    check_search,
    depths,
    encode,
    fused,
    index_text,
    timestamp,
)
from deerflow.agents.memory.backends.deermem.deermem.threads import ThreadOrder, spread

__all__ = [
    "CANDIDATES",
    "TOKENIZER",
    "IndexCorruptionError",
    "IndexedFact",
    "RetrievalIndex",
    "SearchHit",
]

_SCOPE_BITS: Final = 32
_BUSY_TIMEOUT_S: Final = 30.0

_CACHED_SCOPES: Final = 64
_TERM_SQL: Final = "SELECT rowid FROM facts_fts WHERE facts_fts MATCH ? AND rowid BETWEEN ? AND ?"
_ROWS_SQL: Final = (
    "SELECT id, fact_id, category, confidence, updated_ts, ntokens FROM facts"
    " WHERE id BETWEEN ? AND ?"
)
_THREADS_SQL: Final = (
    "SELECT fact_id, thread, category FROM facts WHERE id BETWEEN ? AND ? AND thread IS NOT NULL"
    " ORDER BY thread, created_ts, id"
)

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
    (
        VECTORS_TABLE,
        # Rows now carry their fact's event time as words: rebuild each user before a search.
        "UPDATE users SET revision = NULL",
    ),
    (
        "ALTER TABLE facts ADD COLUMN thread TEXT",
        "ALTER TABLE facts ADD COLUMN created_ts REAL NOT NULL DEFAULT 0",
        # The new columns are filled as each user is rebuilt before its next search.
        "UPDATE users SET revision = NULL",
    ),
)
"""Schema versions; `MIGRATIONS[i]` takes the database from version i to i + 1."""

_CORRUPTION_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


@dataclass(slots=True)
class _Scope:
    """One scope as searches read it, valid while its user's indexed revision is `revision`."""

    scope_id: int
    revision: int | None  # None: the user is dirty, so this is not kept
    rows: ScopeRows | None = None  # read when a search first matches something
    vectors: ScopeVectors | None = None  # read on the first hybrid search
    threads: ThreadOrder | None = None  # read on the first search with thread context


class RetrievalIndex:
    """The FTS5 index of all scopes in one SQLite file, with fact vectors when given a model."""

    def __init__(self, path: Path, model: VectorModel | None = None) -> None:
        """Open or create the index at `path`, bringing its schema up to date.

        Args:
            path: the index file.
            model: the embedding model for hybrid retrieval; None keeps the index lexical.
                Every process sharing the file must use the same: opening it with another
                model (or none) drops the stored vectors (see `vectors.py`).

        Raises:
            IndexCorruptionError: `path` exists but is not a readable SQLite database.
        """
        self.path = path
        self._model = model
        # (user_key, agent) -> the scope as last read; LRU order.
        self._scopes: OrderedDict[tuple[str, str], _Scope] = OrderedDict()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._closed = False
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
                sync_model(conn, None if model is None else model.name)
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def reset(cls, path: Path, model: VectorModel | None = None) -> RetrievalIndex:
        """Delete the index at `path` (and its WAL files), then create an empty one.

        Dropping derived data is the caller's decision, e.g. after `IndexCorruptionError`.
        """
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return cls(path, model)

    def close(self) -> None:
        """Close the connection; the object cannot be used afterwards."""
        with self._lock:
            self._closed = True
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

        Raises:
            EmbeddingError: the model failed; nothing was written.
        """
        vectors = encode(self._model, upserts)
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
                    delete_vector(conn, row[0])
            scopes: dict[str, int] = {}
            for fact, vector in zip(upserts, vectors, strict=True):
                _upsert(conn, self._cut, user_key, fact, scopes, vector)

    def replace_user(self, user_key: str, revision: int, facts: Iterable[IndexedFact]) -> None:
        """Replace every row of the user (all agents) with `facts`, at `revision`.

        Raises:
            EmbeddingError: the model failed; nothing was written.
        """
        facts = list(facts)
        vectors = encode(self._model, facts)
        rows = "FROM facts WHERE scope_id IN (SELECT scope_id FROM scopes WHERE user_key = ?)"
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO facts_fts(facts_fts, rowid, body) SELECT 'delete', id, body {rows}",
                (user_key,),
            )
            conn.execute(f"DELETE FROM vectors WHERE id IN (SELECT id {rows})", (user_key,))
            for key in [key for key in self._scopes if key[0] == user_key]:
                del self._scopes[key]
            conn.execute(f"DELETE {rows}", (user_key,))
            conn.execute("DELETE FROM scopes WHERE user_key = ?", (user_key,))
            _set_revision(conn, user_key, revision)
            scopes: dict[str, int] = {}
            for fact, vector in zip(facts, vectors, strict=True):
                _upsert(conn, self._cut, user_key, fact, scopes, vector)

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

        Raises:
            EmbeddingError: the model failed; the index is left as it was.
        """
        done = 0
        with self._write() as conn:
            for table in ("users", "scopes", "facts", "vectors"):
                conn.execute(f"DELETE FROM {table}")
            self._scopes.clear()
            conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('delete-all')")
            for user_key, revision, facts in users:
                _set_revision(conn, user_key, revision)
                scopes: dict[str, int] = {}
                next_rowid: dict[int, int] = {}  # every scope starts empty: no look-ups
                # With a model, facts are read ahead a batch at a time to encode them together.
                size = 1 if self._model is None else ENCODE_BATCH
                for batch in batches(facts, size):
                    for fact, vector in zip(batch, encode(self._model, batch), strict=True):
                        scope_id = _scope_id(conn, user_key, fact.agent, scopes)
                        rowid = next_rowid.get(scope_id, _scope_range(scope_id)[0])
                        next_rowid[scope_id] = rowid + 1
                        row = (*_row(self._cut, fact), rowid, scope_id, fact.fact_id)
                        conn.execute(_INSERT_FACT, row)
                        if vector is not None:
                            store_vector(conn, rowid, vector)
                        done += 1
                        if progress is not None and done % PROGRESS_EVERY == 0:
                            progress(done)
            # The full-text index is built from `facts` in one pass (FTS5's 'rebuild' reads the
            # external content table in C), then merged into one segment per term, so every later
            # search is a single seek per posting list.
            conn.execute("INSERT INTO facts_fts(facts_fts) VALUES ('rebuild')")
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
        semantic_weight: float = 0.5,
        thread_context: float = 0.0,
    ) -> list[SearchHit]:
        """The facts of one scope that best match `query`, best first.

        Plain text is matched word by word (OR), without English stop words unless it has
        nothing else; deliberate FTS5 syntax passes through, and if FTS5 rejects it the text is
        searched again as plain words. With a model, the lexical ranking is fused with the
        semantic one (see the module docstring), so a fact can be found by meaning alone, and
        the score is the fused one (0..1). With thread context, the best `threads.POOL` of that
        ranking lend part of their score to their thread neighbours (`threads.spread`), and the
        score is relative to the ranking's best (which lends from 1).

        Args:
            user_key: the user's key.
            agent: the bucket name.
            query: the search text; blank text finds nothing.
            category: only facts of this category (filtered before the top `limit`).
            limit: the most hits to return.
            now: the moment recency is measured from (default: the current time).
            semantic_weight: the semantic ranking's weight in the fusion, 0..1.
            thread_context: the share of a hit's score its thread neighbours get, 0..1; 0 is off.

        Raises:
            ValueError: `limit` is below 1, or `thread_context` is outside 0..1.
            EmbeddingError: the model failed to encode the query.
        """
        check_search(limit, thread_context)
        moment = timestamp(now or datetime.now(UTC))
        model = self._model
        # Encoded before taking the lock: the model is not the connection's business.
        query_vector = model.encode([query])[0] if model is not None and query.strip() else None
        if query_vector is not None and not any(query_vector):
            query_vector = None  # no token the model knows (e.g. Chinese): lexical only
        pool, depth = depths(limit, thread_context, semantic=query_vector is not None)
        vectors = threads = None
        with self._guard(), read_transaction(self._conn):
            scope = self._scope(user_key, agent)
            if scope is None:
                return []
            if model is not None and query_vector is not None:
                vectors = self._vectors(scope)  # first: it reads the rows in the same statement
            ranking = self._lexical(query, scope, category=category, limit=depth, now=moment)
            if thread_context and (ranking or vectors is not None):
                threads = self._threads(scope)
        if model is not None and query_vector is not None and vectors is not None:
            priors = vectors.priors(moment, category)
            nearest = model.nearest(query_vector, vectors.matrix, priors, depth)
            semantic = [(vectors.fact_ids[row], score) for row, score in nearest]
            meaning = (vectors.fact_ids[row] for row in by_meaning(nearest, priors.__getitem__))
            ranking = fused(ranking, semantic, meaning, semantic_weight=semantic_weight, pool=pool)
        if threads is not None:
            ranking = spread(ranking, threads, share=thread_context, category=category, limit=limit)
        return [SearchHit(fact_id, score) for fact_id, score in ranking[:limit]]

    def similarities(self, user_key: str, agent: str, query: str) -> dict[str, float]:
        """The cosine similarity of `query` to every fact of the scope that has a vector.

        Empty without a model, for blank text, or for an unknown scope.

        Raises:
            EmbeddingError: the model failed to encode the query.
        """
        if self._model is None or not query.strip():
            return {}
        query_vector = self._model.encode([query])[0]
        with self._guard(), read_transaction(self._conn):
            scope = self._scope(user_key, agent)
            if scope is None:
                return {}
            vectors = self._vectors(scope)
        values = self._model.similarities(query_vector, vectors.matrix)
        return dict(zip(vectors.fact_ids, values, strict=True))

    def _scope(self, user_key: str, agent: str) -> _Scope | None:
        """The scope, from memory while its user's revision is unchanged; None for an unknown
        scope (the lock and a read transaction are held)."""
        row = self._conn.execute(
            "SELECT scope_id, revision FROM scopes LEFT JOIN users USING (user_key)"
            " WHERE user_key = ? AND agent = ?",
            (user_key, agent),
        ).fetchone()
        if row is None:
            return None
        scope_id, revision = row
        key = (user_key, agent)
        cached = self._scopes.get(key)
        if (
            cached is not None
            and revision is not None
            and (cached.scope_id, cached.revision) == (scope_id, revision)
        ):
            self._scopes.move_to_end(key)
            return cached
        scope = _Scope(scope_id, revision)
        self._scopes.pop(key, None)
        if revision is not None:  # a dirty user's rows are about to be rebuilt
            self._scopes[key] = scope
            while len(self._scopes) > _CACHED_SCOPES:
                self._scopes.popitem(last=False)
        return scope

    def _rows(self, scope: _Scope) -> ScopeRows:
        """The scope's rows, read once per cached scope (the lock is held)."""
        if scope.rows is None:
            rows = self._conn.execute(_ROWS_SQL, _scope_range(scope.scope_id)).fetchall()
            scope.rows = ScopeRows.of(rows)
        return scope.rows

    def _threads(self, scope: _Scope) -> ThreadOrder:
        """The scope's thread order, read once per cached scope (the lock is held)."""
        if scope.threads is None:
            rows = self._conn.execute(_THREADS_SQL, _scope_range(scope.scope_id))
            scope.threads = ThreadOrder.of(rows)
        return scope.threads

    def _vectors(self, scope: _Scope) -> ScopeVectors:
        """The scope's vectors, read once per cached scope with its rows (the lock is held)."""
        if scope.vectors is None:
            rows, scope.vectors = read_scope(self._conn, *_scope_range(scope.scope_id))
            if scope.rows is None:
                scope.rows = ScopeRows.of(rows)
        return scope.vectors

    def _lexical(
        self, query: str, scope: _Scope, *, category: str | None, limit: int, now: float
    ) -> list[tuple[str, float]]:
        """The BM25 ranking of the scope (the lock and a read transaction are held)."""
        lo, hi = _scope_range(scope.scope_id)
        built = build_query(query, self._cut, stop_words=STOP_WORDS)
        while built is not None:
            try:
                postings = [self._matches(term, lo, hi) for term in built.terms]
                # Plain text ORs its terms, so the terms' matches are the candidates; deliberate
                # syntax (AND, NOT, NEAR, phrases) decides them itself.
                candidates = self._matches(built.match, lo, hi) if built.syntax else None
            except sqlite3.OperationalError:
                if not built.syntax:
                    raise
                built = build_query(query, self._cut, plain=True, stop_words=STOP_WORDS)
                continue
            if not any(postings) and not candidates:
                return []  # nothing matched: the scope's rows are not needed
            return rank(
                self._rows(scope),
                postings,
                candidates=candidates,
                category=category,
                limit=limit,
                now=now,
            )
        return []

    def _matches(self, match: str, lo: int, hi: int) -> list[int]:
        return [rowid for (rowid,) in self._conn.execute(_TERM_SQL, (match, lo, hi))]

    def _choose_segmenter(self, conn: sqlite3.Connection) -> Cut:
        """The CJK segmenter recorded in the index; a new index records jieba if importable.

        The choice is fixed for the life of the file (`reset` chooses again). An index built
        with jieba, opened where jieba is missing, falls back to bigrams and marks every user
        dirty, because its CJK rows no longer match how queries are cut.
        """
        row = conn.execute("SELECT value FROM meta WHERE key = 'segmenter'").fetchone()
        choice = choose_segmenter(None if row is None else row[0])
        if choice.stale:
            conn.execute("UPDATE users SET revision = NULL")
        if choice.name != (None if row is None else row[0]):
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('segmenter', ?)", (choice.name,)
            )
        return choice.cut

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Hold the connection lock and report a corrupt file as `IndexCorruptionError`.

        Raises:
            IndexClosedError: `close()` has been called.
        """
        with self._lock:
            if self._closed:
                raise IndexClosedError(f"retrieval index {self.path} is closed")
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


_INSERT_FACT: Final = (
    "INSERT INTO facts (category, confidence, updated_ts, thread, created_ts, ntokens, body, id,"
    " scope_id, fact_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _row(cut: Cut, fact: IndexedFact) -> tuple[str, float, float, str | None, float, int, str]:
    """`(category, confidence, updated_ts, thread, created_ts, ntokens, body)`: what `facts`
    holds about the fact."""
    body = index_text(fact, cut)
    return (
        fact.category,
        fact.confidence,
        timestamp(fact.updated_at),
        fact.thread,
        timestamp(fact.created_at),
        count_tokens(body),
        body,
    )


def _upsert(
    conn: sqlite3.Connection,
    cut: Cut,
    user_key: str,
    fact: IndexedFact,
    scopes: dict[str, int],
    vector: bytes | None,
) -> None:
    """Insert or replace one fact (and its vector), keeping its rowid when already indexed."""
    values = _row(cut, fact)
    body = values[-1]
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
        conn.execute(_INSERT_FACT, (*values, rowid, scope_id, fact.fact_id))
    else:
        rowid = old[0]
        _unindex(conn, rowid, old[1])
        conn.execute(
            "UPDATE facts SET category = ?, confidence = ?, updated_ts = ?, thread = ?,"
            " created_ts = ?, ntokens = ?, body = ? WHERE id = ?",
            (*values, rowid),
        )
    conn.execute("INSERT INTO facts_fts(rowid, body) VALUES (?, ?)", (rowid, body))
    if vector is not None:
        store_vector(conn, rowid, vector)


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
    """The id of the scope, created if new; `cache` spares repeated look-ups in a transaction.

    Looked up before it is inserted: the scope almost always exists, and a write statement
    costs more than a read."""
    if agent not in cache:
        row = conn.execute(
            "SELECT scope_id FROM scopes WHERE user_key = ? AND agent = ?", (user_key, agent)
        ).fetchone()
        if row is None:
            inserted = conn.execute(
                "INSERT INTO scopes (user_key, agent) VALUES (?, ?)", (user_key, agent)
            )
            row = (inserted.lastrowid,)  # scope_id is the rowid
        (cache[agent],) = row
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
