"""Fact vectors beside the FTS5 rows of the retrieval index, as SQL on a connection.

The stdlib sqlite3 here cannot load extensions (so no sqlite-vec): a vector is a BLOB of float16
numbers in table `vectors`, keyed by the fact's rowid in `facts`. A scope's vectors are therefore
its rowid range, as for FTS5, and a search scores only them, by brute force. They are written,
replaced and deleted in the same transactions as the fact rows.

Half precision halves what a user's first search reads (a 10^5-fact index went from 213 to 96
MB) and moves a cosine similarity by less than 2e-4 (the most over 231 LoCoMo questions against
788 turns), far below what separates two facts in a ranking. A scope is read in one statement,
its rows and vectors together (`read_scope`), and widened back to float32 for scoring.

Which model made the vectors, and in which format, is recorded in `meta` (key `embedder`, "" for
none). An index opened with another model or format, or with none, drops every vector; one opened
with a model marks every user dirty, so each user's rows, vectors included, are rebuilt from the
files before their next search (or all at once by `deerflow memory reindex`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from deerflow.agents.memory.backends.deermem.deermem.core.lexical import HALF_LIFE_DAYS

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "VECTORS_TABLE",
    "ScopeVectors",
    "VectorModel",
    "delete_vector",
    "read_scope",
    "scored_form",
    "store_vector",
    "stored_form",
    "sync_model",
]

VECTORS_TABLE: Final = "CREATE TABLE vectors (id INTEGER PRIMARY KEY, vec BLOB NOT NULL)"
FORMAT: Final = "float16"
"""How a vector is stored; recorded with the model's name, so a change rebuilds the vectors."""
_SCOPE_SQL: Final = (
    "SELECT f.id, f.fact_id, f.category, f.confidence, f.updated_ts, f.ntokens, v.vec"
    " FROM facts AS f LEFT JOIN vectors AS v ON v.id = f.id WHERE f.id BETWEEN ? AND ?"
)


class VectorModel(Protocol):
    """What the index needs of an embedding model (`deermem.embeddings.Embedder` is one)."""

    @property
    def name(self) -> str:
        """Identifies the model; vectors of another model are never compared with its own."""
        ...

    def encode(self, texts: Sequence[str]) -> list[bytes]:
        """One unit-length float32 vector per text."""
        ...

    def similarities(self, query: bytes, matrix: bytes) -> list[float]:
        """The cosine similarity of `query` to each vector of `matrix` (concatenated vectors)."""
        ...

    def nearest(
        self, query: bytes, matrix: bytes, weights: NDArray[np.float64], n: int
    ) -> list[tuple[int, float]]:
        """The `n` best rows by similarity times weight, best first; weight 0 leaves a row out."""
        ...


@dataclass(frozen=True, slots=True)
class ScopeVectors:
    """Every vector of one scope, with what ranking needs of each fact, in one order."""

    fact_ids: tuple[str, ...]
    categories: NDArray[np.str_]
    confidences: NDArray[np.float64]
    updated: NDArray[np.float64]  # Unix seconds
    matrix: bytes  # the vectors, concatenated

    def priors(self, now: float, category: str | None) -> NDArray[np.float64]:
        """Each fact's confidence and recency factor at `now`, as `lexical.rank` applies them
        to the lexical score; 0 for facts not of `category` (if given)."""
        import numpy as np

        age_days = np.maximum(0.0, now - self.updated) / 86400.0
        priors: NDArray[np.float64] = (0.7 + 0.3 * self.confidences) * (
            0.7 + 0.3 * np.power(0.5, age_days / HALF_LIFE_DAYS)
        )
        if category is not None:
            priors[self.categories != category] = 0.0
        return priors


def sync_model(conn: sqlite3.Connection, name: str | None) -> None:
    """Make the stored vectors those of model `name` (None: no vectors), inside a transaction."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    wanted = f"{name}/{FORMAT}" if name else ""
    if row is not None and row[0] == wanted:
        return
    conn.execute("DELETE FROM vectors")
    if name is not None:
        conn.execute("UPDATE users SET revision = NULL")
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('embedder', ?)", (wanted,))


def stored_form(vector: bytes) -> bytes:
    """A model's float32 vector as the index stores it (only called when there is a model, so
    numpy is there)."""
    import numpy as np

    return np.frombuffer(vector, dtype=np.float32).astype(np.float16).tobytes()


def scored_form(vector: bytes) -> bytes:
    """The float32 values a model's `vector` is scored with once stored in `FORMAT`: the
    PostgreSQL index keeps these, so that both engines score a fact alike."""
    import numpy as np

    return np.frombuffer(stored_form(vector), dtype=np.float16).astype(np.float32).tobytes()


def store_vector(conn: sqlite3.Connection, rowid: int, vector: bytes) -> None:
    """Store a model's float32 `vector` for the fact at `rowid`, in `FORMAT`."""
    conn.execute(
        "INSERT OR REPLACE INTO vectors (id, vec) VALUES (?, ?)", (rowid, stored_form(vector))
    )


def delete_vector(conn: sqlite3.Connection, rowid: int) -> None:
    conn.execute("DELETE FROM vectors WHERE id = ?", (rowid,))


def read_scope(
    conn: sqlite3.Connection, lo: int, hi: int
) -> tuple[list[tuple[int, str, str, float, float, int]], ScopeVectors]:
    """The rows of the scope whose rowids are `lo..hi` (`(rowid, fact_id, category, confidence,
    updated_ts, ntokens)`, as `lexical.ScopeRows.of` takes them) and its vectors, in one statement
    (only called when there is a model, so numpy, part of the `embeddings` extra, is there)."""
    import numpy as np

    rows = conn.execute(_SCOPE_SQL, (lo, hi)).fetchall()
    with_vector = [row for row in rows if row[6] is not None]
    half = np.frombuffer(b"".join(row[6] for row in with_vector), dtype=np.float16)
    vectors = ScopeVectors(
        fact_ids=tuple(row[1] for row in with_vector),
        categories=np.asarray([row[2] for row in with_vector], dtype=np.str_),
        confidences=np.asarray([row[3] for row in with_vector], dtype=np.float64),
        updated=np.asarray([row[4] for row in with_vector], dtype=np.float64),
        matrix=half.astype(np.float32).tobytes(),
    )
    return [row[:6] for row in rows], vectors
