"""Local sentence embeddings for hybrid retrieval, on by default.

The model is `models/minilm-l6-static`: a static model2vec model distilled once from
all-MiniLM-L6-v2 (Apache-2.0; `scripts/distill_static_model.py` says how). It ships inside this
package, so nothing is downloaded, and runs on numpy without torch: a text's vector is the mean of
its tokens' vectors, 384 float32 numbers of unit length.

numpy and model2vec (base dependencies) are imported in this module only, and only when the model
is loaded: a DeerMem with `retrieval_embeddings: false` never loads them, and a process that only
reads summaries and facts does not either.
Vectors cross the module boundary as bytes (float32, native order), so the index stores them as
BLOBs and nothing else needs numpy.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from deerflow.agents.memory.manager import MemoryManagerError

if TYPE_CHECKING:
    import numpy as np
    from model2vec import StaticModel
    from numpy.typing import NDArray

__all__ = [
    "EXTRA",
    "MODEL_DIR",
    "Embedder",
    "EmbeddingError",
    "missing_modules",
]

EXTRA: Final = "embeddings"
REQUIRED_MODULES: Final = ("numpy", "model2vec")
MODEL_DIR: Final = Path(__file__).resolve().parent / "models" / "minilm-l6-static"
MODEL_NAME: Final = "minilm-l6-static-int8-384"
"""Recorded in the index beside its vectors: a different model means every vector is rebuilt."""


class EmbeddingError(MemoryManagerError):
    """The embedding model could not be loaded or could not encode (a broken install: the
    model ships inside the package, so nothing here is retried or downloaded)."""


def missing_modules() -> list[str]:
    """The modules of the `embeddings` extra that cannot be imported here (none are imported)."""
    missing = []
    for name in REQUIRED_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken or blocked package counts as absent
            found = False
        if not found:
            missing.append(name)
    return missing


class Embedder:
    """Encodes texts with the shipped static model; the model is loaded on first use."""

    name: str = MODEL_NAME

    def __init__(self, model_dir: Path = MODEL_DIR) -> None:
        self._model_dir = model_dir
        self._model: StaticModel | None = None
        self._lock = threading.Lock()

    def check(self) -> None:
        """Fail now if the model files are missing, without loading them (cheap).

        Raises:
            EmbeddingError: the model files are missing.
        """
        if not (self._model_dir / "model.safetensors").is_file():
            # model2vec would take a missing folder for a hub id and try to download it.
            raise EmbeddingError(
                f"embedding model not found in {self._model_dir}; reinstall the package"
            )

    def load(self) -> None:
        """Load the model now (it is otherwise loaded by the first `encode`).

        Raises:
            EmbeddingError: the model files are missing or unreadable.
        """
        self._loaded()

    def encode(self, texts: Sequence[str]) -> list[bytes]:
        """One unit-length vector per text, as float32 bytes; a text with no known token is 0.

        Raises:
            EmbeddingError: the model cannot be loaded or fails on the input.
        """
        if not texts:
            return []
        model = self._loaded()
        try:
            matrix = model.encode(list(texts), show_progress_bar=False)
        except Exception as exc:
            raise EmbeddingError(f"embedding model {self.name} failed to encode: {exc}") from exc
        import numpy as np

        return [row.tobytes() for row in np.ascontiguousarray(matrix, dtype=np.float32)]

    def similarities(self, query: bytes, matrix: bytes) -> list[float]:
        """The cosine similarity of `query` to each vector of `matrix` (`encode`'s, joined)."""
        return [float(score) for score in self._scores(query, matrix)]

    def nearest(
        self, query: bytes, matrix: bytes, weights: NDArray[np.float64], n: int
    ) -> list[tuple[int, float]]:
        """The `n` best rows of `matrix` by cosine similarity times weight, best first.

        Returns `(row, weighted similarity)`; rows of weight 0 are left out.
        """
        import numpy as np

        scores = self._scores(query, matrix) * weights
        rows = np.flatnonzero(weights != 0)
        if len(rows) > n:
            rows = rows[np.argpartition(-scores[rows], n - 1)[:n]]
        # Highest first, equal scores in row order (argpartition alone has no stable order);
        # lexsort's last key is the primary one.
        ordered = rows[np.lexsort((rows, -scores[rows]))]
        return [(row, float(scores[row])) for row in ordered.tolist()]

    def _scores(self, query: bytes, matrix: bytes) -> NDArray[np.float32]:
        import numpy as np

        vector = np.frombuffer(query, dtype=np.float32)
        rows = np.frombuffer(matrix, dtype=np.float32).reshape(-1, len(vector))
        scores: NDArray[np.float32] = rows @ vector
        return scores

    def text_similarities(self, text: str, others: Sequence[str]) -> list[float]:
        """The cosine similarity of `text` to each of `others`."""
        if not others:
            return []
        query, *vectors = self.encode([text, *others])
        return self.similarities(query, b"".join(vectors))

    def _loaded(self) -> StaticModel:
        with self._lock:
            if self._model is None:
                self.check()
                try:
                    from model2vec import StaticModel

                    self._model = StaticModel.from_pretrained(str(self._model_dir))
                except ImportError as exc:
                    raise EmbeddingError(
                        f"retrieval_embeddings needs the `{EXTRA}` extra "
                        f"(pip install 'deerflow-memory[{EXTRA}]'): {exc}"
                    ) from exc
                except Exception as exc:
                    raise EmbeddingError(
                        f"embedding model in {self._model_dir} could not be loaded: {exc}"
                    ) from exc
            return self._model
