"""The search index of the PostgreSQL engine: the facts' full text and vectors, in SQL.

The twin of the files engine's FTS5 index (`core/index.py`): derived data, kept per user at an
indexed revision (`search_users`; NULL is dirty, rebuilt from the storage before the user's next
search), and ranked the same way, so that a memory moved between engines answers a query with
the same facts in the same order (up to float rounding in the similarities).

Tokens. `tsquery.tokens` splits and folds text the way FTS5's unicode61 does; `search_facts.body`
holds those tokens and its generated `tsv` column their stems (`search_stem`: Snowball's
`porter`, the Porter algorithm of FTS5, tokens under 3 bytes unstemmed as FTS5 leaves them).
Queries are built by `fts_query.build_query` as for FTS5 and translated by `tsquery.translate`;
the stems of query words are asked of the database once per process (`_stem`).

Ranking. One statement per search reads the scope's rows (user_key, agent: the unique btree
index's prefix, so a search costs the same whatever other users store) with, for each row, which
query terms its `tsv` matches, whether the whole expression does (deliberate syntax), and its
inner product with the query vector (the vectors are unit length: the cosine similarity, 0 for a
text the model knows no token of, as in the files index). Python then ranks exactly as the files
index does: `lexical.rank` (BM25 over the scope, term frequency 1, confidence and recency),
nearest by similarity times the same confidence and recency, `retrieval.by_meaning`,
`retrieval.fused` and `threads.spread`. The scoped reads use the btree index: a scope holds at
most `max_facts` per agent, and evaluating the terms and one inner product per row is cheaper
than any index lookup there. The GIN index on `tsv` and the HNSW index on `embedding`
(`vector_ip_ops`) serve queries across scopes (an operator's ad hoc `@@` or nearest-neighbour
query over all users); no search of one scope uses them (`benchmarks/pg_search_probe.py`).

Vectors. Given a `VectorModel`, `search_facts.embedding` holds each fact's vector, dimension
from the model. `search_meta` records the model: opening the index with another model, or with
none, drops the column (and its index); with a model every user is marked dirty, so their
vectors are rebuilt before their next search, as in `core/vectors.py`.
"""

from __future__ import annotations

import heapq
import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg.rows import namedtuple_row

from deerflow.agents.memory.backends.deermem.deermem.core.fts_query import (
    STOP_WORDS,
    build_query,
    choose_segmenter,
    count_tokens,
)
from deerflow.agents.memory.backends.deermem.deermem.core.lexical import (
    ScopeRows,
    confidence_factor,
    rank,
    recency,
)
from deerflow.agents.memory.backends.deermem.deermem.core.vectors import scored_form
from deerflow.agents.memory.backends.deermem.deermem.postgres import tsquery
from deerflow.agents.memory.backends.deermem.deermem.postgres.schema import migrate_pool
from deerflow.agents.memory.backends.deermem.deermem.retrieval import (
    ENCODE_BATCH,
    PROGRESS_EVERY,
    IndexClosedError,
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

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

    from deerflow.agents.memory.backends.deermem.deermem.core.fts_query import Cut
    from deerflow.agents.memory.backends.deermem.deermem.core.vectors import VectorModel

__all__ = ["MIGRATIONS", "PostgresIndex"]

_STEMS_KEPT: Final = 10_000

MIGRATIONS: Final = (
    (
        "CREATE TEXT SEARCH DICTIONARY search_porter (TEMPLATE = snowball, Language = porter)",
        # FTS5's porter tokenizer leaves tokens shorter than 3 bytes as they are.
        "CREATE FUNCTION search_stem(token text) RETURNS text LANGUAGE sql IMMUTABLE STRICT"
        " PARALLEL SAFE RETURN CASE WHEN octet_length(token) < 3 THEN token"
        " ELSE coalesce((ts_lexize('search_porter', token))[1], token) END",
        # `body` is space-separated tokens already folded (`tsquery.tokens`): position i is the
        # i-th token, so phrases and NEAR count tokens as FTS5 does.
        "CREATE FUNCTION search_tsvector(body text) RETURNS tsvector LANGUAGE sql IMMUTABLE"
        " STRICT PARALLEL SAFE BEGIN ATOMIC SELECT coalesce(string_agg(quote_literal("
        "search_stem(token)) || ':' || least(n, 16383), ' '), '')::tsvector"
        " FROM unnest(string_to_array(body, ' ')) WITH ORDINALITY AS t(token, n)"
        " WHERE token <> ''; END",
        # revision NULL means dirty: the rows may not match the user's stored facts.
        "CREATE TABLE search_users (user_key text PRIMARY KEY, revision bigint)",
        "CREATE TABLE search_meta (key text PRIMARY KEY, value text NOT NULL)",
        # '' until chosen: the embedding model's name (none: ''), the CJK segmenter.
        "INSERT INTO search_meta (key, value) VALUES ('embedder', ''), ('segmenter', '')",
        "CREATE TABLE search_facts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " user_key text NOT NULL, agent text NOT NULL, fact_id text NOT NULL,"
        " category text NOT NULL, confidence double precision NOT NULL,"
        " updated_ts double precision NOT NULL, created_ts double precision NOT NULL,"
        " thread text, ntokens integer NOT NULL, body text NOT NULL,"
        " tsv tsvector GENERATED ALWAYS AS (search_tsvector(body)) STORED,"
        " UNIQUE (user_key, agent, fact_id))",
        "CREATE INDEX search_facts_tsv ON search_facts USING gin (tsv)",
    ),
)
"""Schema versions of the "search" part; `MIGRATIONS[i]` takes it from version i to i + 1."""

_COLUMNS: Final = (
    "user_key, agent, fact_id, category, confidence, updated_ts, created_ts, thread, ntokens, body"
)
_UPDATES: Final = ", ".join(
    f"{column} = excluded.{column}"
    for column in (
        "category",
        "confidence",
        "updated_ts",
        "created_ts",
        "thread",
        "ntokens",
        "body",
    )
)


class _Embedding(bytes):
    """A fact's or a query's vector (float32, native order) on its way to pgvector."""


class _VectorDumper(Dumper):
    """pgvector's binary input: dimensions and a spare (int16 each), then big-endian float4."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        values = array("f", bytes(obj))
        if sys.byteorder == "little":
            values.byteswap()
        return struct.pack(">HH", len(values), 0) + values.tobytes()


class _VectorTextDumper(Dumper):
    """pgvector's text input, for COPY."""

    def dump(self, obj: Any) -> bytes:
        return ("[" + ",".join(map(repr, array("f", bytes(obj)))) + "]").encode()


class PostgresIndex:
    """The `search_*` tables of the pool's schema. Thread-safe (one pool connection per call)."""

    def __init__(self, pool: ConnectionPool, model: VectorModel | None = None) -> None:
        """Create or upgrade the tables and make the stored vectors those of `model`.

        Args:
            pool: connections whose search path is the engine's schema; owned by the caller.
            model: the embedding model for hybrid retrieval; None keeps the index lexical.
                Every replica must use the same: opening with another model (or none) drops
                the stored vectors.

        Raises:
            psycopg.Error: the database refused the migration (e.g. pgvector is missing).
            MemoryCorruptionError: a newer DeerFlow Memory migrated the tables.
            EmbeddingError: the model failed to give its dimension.
        """
        self._pool = pool
        self._model = model
        self._closed = False
        self._stems: dict[str, str] = {}
        self._vector_dumpers: tuple[type[Dumper], type[Dumper]] | None = None
        self._distance = ""  # the inner product operator, qualified by pgvector's schema
        self._vector_schema = "public"
        migrate_pool(pool, "search", MIGRATIONS)
        with pool.connection() as conn:
            recorded = _meta(conn, "segmenter")
            choice = choose_segmenter(recorded or None)
            if choice.stale:
                conn.execute("UPDATE search_users SET revision = NULL")
            if choice.name != recorded:
                _set_meta(conn, "segmenter", choice.name)
            self._cut: Cut = choice.cut
            self._sync_model(conn)

    @classmethod
    def reset(cls, pool: ConnectionPool, model: VectorModel | None = None) -> PostgresIndex:
        """Empty the index, then open it: every user is rebuilt from the storage before their
        next search (derived data; dropping it is the caller's decision)."""
        index = cls(pool, model)
        with index._connection() as conn:
            conn.execute("DELETE FROM search_facts")
            conn.execute("DELETE FROM search_users")
        return index

    def close(self) -> None:
        """Stop using the pool (the engine closes it); the object cannot be used afterwards."""
        self._closed = True

    def indexed_revision(self, user_key: str) -> int | None:
        """The user's revision the index reflects, or None when unknown (dirty or never seen)."""
        with self._connection(read=True) as conn:
            row = conn.execute(
                "SELECT revision FROM search_users WHERE user_key = %s", (user_key,)
            ).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def mark_dirty(self, user_key: str) -> None:
        """Record that the user's rows may be stale, so the next search rebuilds them."""
        with self._connection() as conn:
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
        marked dirty instead. Replicas applying changes of one user take turns on its row.

        Raises:
            EmbeddingError: the model failed; nothing was written.
        """
        vectors = encode(self._model, upserts)
        with self._connection() as conn:
            conn.execute(
                "INSERT INTO search_users (user_key, revision) VALUES (%s, 0)"
                " ON CONFLICT (user_key) DO NOTHING",
                (user_key,),
            )
            row = conn.execute(
                "SELECT revision FROM search_users WHERE user_key = %s FOR UPDATE", (user_key,)
            ).fetchone()
            sequential = row is not None and row[0] is not None and row[0] == revision - 1
            _set_revision(conn, user_key, revision if sequential else None)
            if deletes:
                conn.execute(
                    "DELETE FROM search_facts AS f USING unnest(%s::text[], %s::text[])"
                    " AS gone(agent, fact_id) WHERE f.user_key = %s AND f.agent = gone.agent"
                    " AND f.fact_id = gone.fact_id",
                    ([agent for agent, _ in deletes], [fact for _, fact in deletes], user_key),
                )
            self._upsert(conn, user_key, upserts, vectors)

    def replace_user(self, user_key: str, revision: int, facts: Iterable[IndexedFact]) -> None:
        """Replace every row of the user (all agents) with `facts`, at `revision`.

        Raises:
            EmbeddingError: the model failed; nothing was written.
        """
        facts = list(facts)
        vectors = encode(self._model, facts)
        with self._connection() as conn:
            _set_revision(conn, user_key, revision)
            conn.execute("DELETE FROM search_facts WHERE user_key = %s", (user_key,))
            self._upsert(conn, user_key, facts, vectors)

    def rebuild(
        self,
        users: Iterable[tuple[str, int, Iterable[IndexedFact]]],
        *,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Drop everything and index `users` afresh, in one transaction (searches meanwhile
        see the old rows). Facts are consumed as they come and copied in with COPY, so memory
        stays flat however many there are.

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
        revisions: list[tuple[str, int]] = []
        with self._connection() as conn:
            conn.execute("DELETE FROM search_facts")
            conn.execute("DELETE FROM search_users")
            if self._model is not None:  # built once at the end: faster than row by row
                conn.execute("DROP INDEX IF EXISTS search_facts_embedding")
            columns = _COLUMNS + (", embedding" if self._model is not None else "")
            with conn.cursor().copy(f"COPY search_facts ({columns}) FROM STDIN") as copy:
                for user_key, revision, facts in users:
                    revisions.append((user_key, revision))
                    # With a model, facts are read ahead a batch at a time to encode together.
                    size = 1 if self._model is None else ENCODE_BATCH
                    for batch in batches(facts, size):
                        for fact, vector in zip(batch, encode(self._model, batch), strict=True):
                            row = self._row(user_key, fact)
                            copy.write_row(
                                row if vector is None else (*row, _Embedding(scored_form(vector)))
                            )
                            done += 1
                            if progress is not None and done % PROGRESS_EVERY == 0:
                                progress(done)
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO search_users (user_key, revision) VALUES (%s, %s)", revisions
                )
            if self._model is not None:
                conn.execute(self._vector_index_sql())
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
        """The facts of one scope that best match `query`, best first: `RetrievalIndex.search`
        on the same facts gives the same hits (see the module docstring).

        Raises:
            ValueError: `limit` is below 1, or `thread_context` is outside 0..1.
            EmbeddingError: the model failed to encode the query.
        """
        check_search(limit, thread_context)
        moment = timestamp(now or datetime.now(UTC))
        model = self._model
        query_vector = model.encode([query])[0] if model is not None and query.strip() else None
        if query_vector is not None and not any(query_vector):
            query_vector = None  # no token the model knows (e.g. Chinese): lexical only
        pool, depth = depths(limit, thread_context, semantic=query_vector is not None)
        with self._connection(read=True) as conn:  # the scope is read by one statement
            lexical = self._lexical(conn, query)
            rows = self._scope_rows(conn, user_key, agent, lexical, query_vector)
        if not rows:
            return []
        scope = ScopeRows.of([row[:6] for row in rows])  # the columns `ScopeRows.of` takes
        postings: list[list[int]] = [[] for _ in lexical[0]]
        for row in rows:
            for term in row.matched:
                postings[term - 1].append(row.id)
        candidates = None if lexical[1] is None else [row.id for row in rows if row.candidate]
        ranking = []
        if any(postings) or candidates:
            ranking = rank(
                scope, postings, candidates=candidates, category=category, limit=depth, now=moment
            )
        if query_vector is not None:
            priors = [
                0.0
                if row.similarity is None or (category is not None and row.category != category)
                else confidence_factor(row.confidence) * recency(row.updated_ts, moment)
                for row in rows
            ]
            nearest = heapq.nsmallest(
                depth,
                (
                    (position, rows[position].similarity * prior)
                    for position, prior in enumerate(priors)
                    if prior != 0.0
                ),
                key=lambda pair: (-pair[1], pair[0]),
            )
            semantic = [(rows[position].fact_id, score) for position, score in nearest]
            found = by_meaning(nearest, priors.__getitem__)
            meaning = (rows[position].fact_id for position in found)
            ranking = fused(ranking, semantic, meaning, semantic_weight=semantic_weight, pool=pool)
        if thread_context and ranking:
            threaded = sorted(
                (row.thread, row.created_ts, row.id, row.fact_id, row.category)
                for row in rows
                if row.thread
            )
            order = ThreadOrder.of((fact_id, thread, of) for thread, _, _, fact_id, of in threaded)
            ranking = spread(ranking, order, share=thread_context, category=category, limit=limit)
        return [SearchHit(fact_id, score) for fact_id, score in ranking[:limit]]

    def similarities(self, user_key: str, agent: str, query: str) -> dict[str, float]:
        """The cosine similarity of `query` to every fact of the scope that has a vector.

        Empty without a model, for blank text, or for an unknown scope.

        Raises:
            EmbeddingError: the model failed to encode the query.
        """
        if self._model is None or not query.strip():
            return {}
        vector = _Embedding(self._model.encode([query])[0])
        with self._connection(read=True) as conn:
            rows = conn.execute(
                f"SELECT fact_id, -(embedding {self._distance} %b) FROM search_facts"
                " WHERE user_key = %s AND agent = %s AND embedding IS NOT NULL ORDER BY id",
                (vector, user_key, agent),
            ).fetchall()
        return {str(fact_id): float(similarity) for fact_id, similarity in rows}

    # -- reading ------------------------------------------------------------------------------

    def _lexical(self, conn: Connection[Any], query: str) -> tuple[list[str | None], str | None]:
        """`(terms, match)`: the tsquery of each scored term (None: matches nothing) and of the
        deliberate expression deciding the candidates (None: plain words, OR-ed)."""
        built = build_query(query, self._cut, stop_words=STOP_WORDS)
        if built is None:
            return [], None
        try:
            expression = tsquery.translate(built.match) if built.syntax else None
        except tsquery.QuerySyntaxError:  # FTS5 would reject it too: search the plain words
            built = build_query(query, self._cut, plain=True, stop_words=STOP_WORDS)
            expression = None
            if built is None:
                return [], None
        terms = [tsquery.translate(term) for term in built.terms]
        stems = self._stem(conn, set().union(*map(tsquery.words, [*terms, expression])))
        match = None
        if built.syntax:
            match = tsquery.render(expression, stems) or ""  # "": nothing is a candidate
        return [tsquery.render(term, stems) for term in terms], match

    def _scope_rows(
        self,
        conn: Connection[Any],
        user_key: str,
        agent: str,
        lexical: tuple[list[str | None], str | None],
        query_vector: bytes | None,
    ) -> list[Any]:
        """Every row of the scope, in index order, as named tuples: `id, fact_id, category,
        confidence, updated_ts, ntokens` (what `ScopeRows.of` takes), `thread, created_ts`,
        `matched` (the numbers of the terms it matches, from 1), `candidate` (the deliberate
        expression matches it) and `similarity` (to the query vector)."""
        terms, match = lexical
        values: list[Any] = []
        matched = []
        for number, term in enumerate(terms, start=1):
            if term is not None:
                matched.append(f"CASE WHEN tsv @@ %s::tsquery THEN {number} END")
                values.append(term)
        candidate = "NULL"
        if match:
            candidate = "tsv @@ %s::tsquery"
            values.append(match)
        similarity = "NULL::float8"
        if query_vector is not None:
            similarity = f"-(embedding {self._distance} %b)"
            values.append(_Embedding(query_vector))
        flags = (
            "array_remove(ARRAY[" + ", ".join(matched) + "]::int[], NULL)"
            if matched
            else ("'{}'::int[]")
        )
        sql = (
            "SELECT id, fact_id, category, confidence, updated_ts, ntokens, thread, created_ts,"
            f" {flags} AS matched, {candidate} AS candidate, {similarity} AS similarity"
            " FROM search_facts"
            " WHERE user_key = %s AND agent = %s ORDER BY id"
        )
        with conn.cursor(row_factory=namedtuple_row) as cursor:
            return cursor.execute(sql, (*values, user_key, agent)).fetchall()

    def _stem(self, conn: Connection[Any], words: set[str]) -> dict[str, str]:
        """The stems of `words`, asked of the database once per process (stemming is fixed).

        Threads share the cache: it is replaced, never emptied, when it grows too large."""
        cache = self._stems
        stems = {word: cache[word] for word in words if word in cache}
        unknown = [word for word in words if word not in stems]
        if unknown:
            rows = conn.execute(
                "SELECT word, search_stem(word) FROM unnest(%s::text[]) AS word", (unknown,)
            )
            fresh = {str(word): str(stem) for word, stem in rows}
            if len(cache) > _STEMS_KEPT:
                self._stems = cache = {}
            cache.update(fresh)
            stems.update(fresh)
        return stems

    # -- writing ------------------------------------------------------------------------------

    def _row(self, user_key: str, fact: IndexedFact) -> tuple[Any, ...]:
        text = index_text(fact, self._cut)
        return (
            user_key,
            fact.agent,
            fact.fact_id,
            fact.category,
            fact.confidence,
            timestamp(fact.updated_at),
            timestamp(fact.created_at),
            fact.thread,
            count_tokens(text),
            tsquery.index_terms(text),
        )

    def _upsert(
        self,
        conn: Connection[Any],
        user_key: str,
        facts: Sequence[IndexedFact],
        vectors: Sequence[bytes | None],
    ) -> None:
        """Insert or replace facts (and their vectors), keeping the row of one already indexed."""
        if not facts:
            return
        rows = [self._row(user_key, fact) for fact in facts]
        columns, updates, marks = _COLUMNS, _UPDATES, ", ".join(["%s"] * 10)
        if self._model is not None:
            rows = [
                (*row, _Embedding(scored_form(v) if v else b""))
                for row, v in zip(rows, vectors, strict=True)
            ]
            columns, updates = columns + ", embedding", updates + ", embedding = excluded.embedding"
            marks += ", %b"
        with conn.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO search_facts ({columns}) VALUES ({marks})"
                f" ON CONFLICT (user_key, agent, fact_id) DO UPDATE SET {updates}",
                rows,
            )

    # -- the model ----------------------------------------------------------------------------

    def _sync_model(self, conn: Connection[Any]) -> None:
        """Make the `embedding` column that of the model (none: no column), in the transaction
        of `conn`; replicas opening at once take turns on the `embedder` row."""
        row = conn.execute(
            "SELECT value FROM search_meta WHERE key = 'embedder' FOR UPDATE"
        ).fetchone()
        wanted = "" if self._model is None else self._model.name
        if self._model is not None:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            (schema,) = conn.execute(
                "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'"
            ).fetchone() or ("public",)
            self._distance = f"OPERATOR({schema}.<#>)"
            (oid,) = conn.execute(f"SELECT '{schema}.vector'::regtype::oid").fetchone() or (0,)
            self._vector_dumpers = (
                type("_Binary", (_VectorDumper,), {"oid": oid}),
                type("_Text", (_VectorTextDumper,), {"oid": oid}),
            )
            self._vector_schema = schema
        if row is not None and row[0] == wanted:
            return
        conn.execute("DROP INDEX IF EXISTS search_facts_embedding")
        conn.execute("ALTER TABLE search_facts DROP COLUMN IF EXISTS embedding")
        if self._model is not None:
            dimensions = len(self._model.encode(["dimensions"])[0]) // 4
            conn.execute(
                f"ALTER TABLE search_facts ADD COLUMN embedding {self._vector_schema}"
                f".vector({dimensions})"
            )
            conn.execute(self._vector_index_sql())
            conn.execute("UPDATE search_users SET revision = NULL")
        _set_meta(conn, "embedder", wanted)

    def _vector_index_sql(self) -> str:
        return (
            "CREATE INDEX search_facts_embedding ON search_facts USING hnsw"
            f" (embedding {self._vector_schema}.vector_ip_ops)"
        )

    # -- connections --------------------------------------------------------------------------

    @contextmanager
    def _connection(self, *, read: bool = False) -> Iterator[Connection[Any]]:
        """A pool connection able to send vectors: one transaction, or with `read` one
        statement at a time (each sees one snapshot; no BEGIN and COMMIT round trips).

        Raises:
            IndexClosedError: `close()` has been called.
        """
        if self._closed:
            raise IndexClosedError("the PostgreSQL search index is closed")
        with self._pool.connection() as conn:
            if self._vector_dumpers is not None:
                for dumper in self._vector_dumpers:
                    conn.adapters.register_dumper(_Embedding, dumper)
            if not read:
                # Derived data: a commit lost to a server crash only leaves the user's indexed
                # revision behind, and the next search rebuilds the user's rows. So a write
                # does not wait for the write-ahead log to reach the disk (the memory's own
                # commit just did).
                conn.execute("SET LOCAL synchronous_commit TO off")
                yield conn
                return
            conn.autocommit = True
            try:
                yield conn
            finally:
                conn.autocommit = False


def _meta(conn: Connection[Any], key: str) -> str:
    row = conn.execute("SELECT value FROM search_meta WHERE key = %s", (key,)).fetchone()
    return "" if row is None else str(row[0])


def _set_meta(conn: Connection[Any], key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO search_meta (key, value) VALUES (%s, %s)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def _set_revision(conn: Connection[Any], user_key: str, revision: int | None) -> None:
    conn.execute(
        "INSERT INTO search_users (user_key, revision) VALUES (%s, %s)"
        " ON CONFLICT (user_key) DO UPDATE SET revision = excluded.revision",
        (user_key, revision),
    )
