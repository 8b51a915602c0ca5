"""Fact vectors beside the FTS5 rows of the retrieval index, as SQL on a connection.

The stdlib sqlite3 here cannot load extensions (so no sqlite-vec): a vector is a float32 BLOB in
table `vectors`, keyed by the fact's rowid in `facts`. A scope's vectors are therefore its rowid
range, as for FTS5, and a search scores only them, by brute force. They are written, replaced
and deleted in the same transactions as the fact rows.

Which model made the vectors is recorded in `meta` (key `embedder`, "" for none). An index opened
with another model, or with none, drops every vector; one opened with a model marks every user
dirty, so each user's rows, vectors included, are rebuilt from the files before their next search.
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
    "load_scope",
    "store_vector",
    "sync_model",
]

VECTORS_TABLE: Final = "CREATE TABLE vectors (id INTEGER PRIMARY KEY, vec BLOB NOT NULL)"


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
    wanted = name or ""
    if row is not None and row[0] == wanted:
        return
    conn.execute("DELETE FROM vectors")
    if name is not None:
        conn.execute("UPDATE users SET revision = NULL")
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('embedder', ?)", (wanted,))


def store_vector(conn: sqlite3.Connection, rowid: int, vector: bytes) -> None:
    conn.execute("INSERT OR REPLACE INTO vectors (id, vec) VALUES (?, ?)", (rowid, vector))


def delete_vector(conn: sqlite3.Connection, rowid: int) -> None:
    conn.execute("DELETE FROM vectors WHERE id = ?", (rowid,))


def load_scope(conn: sqlite3.Connection, lo: int, hi: int) -> ScopeVectors:
    """The vectors of the scope whose rowids are `lo..hi` (only called when there is a model,
    so numpy, part of the `embeddings` extra, is there)."""
    import numpy as np

    rows = conn.execute(
        "SELECT f.fact_id, f.category, f.confidence, f.updated_ts, v.vec"
        " FROM vectors AS v JOIN facts AS f ON f.id = v.id WHERE v.id BETWEEN ? AND ?",
        (lo, hi),
    ).fetchall()
    columns = list(zip(*rows, strict=True)) or [(), (), (), (), ()]
    fact_ids, categories, confidences, updated, vectors = columns
    return ScopeVectors(
        fact_ids=tuple(fact_ids),
        categories=np.asarray(categories, dtype=np.str_),
        confidences=np.asarray(confidences, dtype=np.float64),
        updated=np.asarray(updated, dtype=np.float64),
        matrix=b"".join(vectors),
    )
