"""Whether a new fact says what a stored one says, by meaning: the deterministic gate of
near-duplicate merging (`fact_dedup_enabled`), given an embedding similarity function.

Cosine similarity of whole facts on the shipped static model cannot tell a paraphrase from a
look-alike: "User is vegetarian" / "The user does not eat meat" scores 0.82, but "Lives in
Berlin" / "Lives in Munich" 0.89 and "Prefers dark mode in editors" / "Prefers light mode in
editors" 0.98. Two changes separate them on DeerMem's own dev set
(`tests/deermem/data/paraphrases.json`):

* **Content words only.** Both facts are compared as their content words (stop words and "user"
  dropped, as `governance.content_tokens` does), so "The user is ..." boilerplate stops lifting
  every pair. Words that share their first `PREFIX` letters count as one ("allergy",
  "allergic").
* **No substituted value.** A look-alike keeps the template and swaps the value: each fact has a
  word the other lacks, and the two are close in meaning (Berlin / Munich 0.71, dark / light
  0.64). A pair whose closest such words reach `SUBSTITUTION` is never the same fact, whatever
  its similarity. A paraphrase keeps the value and rewords the rest ("resides" / "lives": 0.48).

The thresholds were chosen on that dev set (of the values that merge no control there, the ones
merging the most paraphrases); a second set, written after them, checks they hold
(docs/benchmarks.md, "Paraphrase merging").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from deerflow.agents.memory.backends.deermem.deermem.governance import content_tokens

__all__ = ["PREFIX", "SUBSTITUTION", "Similarity", "content_words", "paraphrase_scores"]

Similarity = Callable[[str, Sequence[str]], list[float]]
"""The cosine similarity of a text to each of some others (`Embedder.text_similarities`)."""

PREFIX: Final = 5
"""Words sharing this many first letters are one word (a crude stemmer, enough for English)."""
SUBSTITUTION: Final = 0.56
"""Two words, one only in each fact, at least this similar: a swapped value, not a paraphrase."""
_SUBJECT: Final = frozenset({"user", "users"})


def content_words(text: str) -> dict[str, str]:
    """The content words of a fact, keyed by their first `PREFIX` letters."""
    return {word[:PREFIX]: word for word in sorted(content_tokens(text)) if word not in _SUBJECT}


def paraphrase_scores(
    new: str, stored: Sequence[str], similarity: Similarity, *, threshold: float
) -> list[float]:
    """How surely `new` says what each of `stored` says, in 0..1 (0: it does not).

    The score is the cosine similarity of the facts' content words; a pair that swaps a value
    (see the module docstring) scores 0. The swap check runs only for pairs at or above
    `threshold`, the caller's merge threshold, since below it the pair is not merged anyway.
    """
    if not stored:
        return []
    words = content_words(new)
    stored_words = [content_words(text) for text in stored]
    scores = similarity(
        " ".join(words.values()), [" ".join(other.values()) for other in stored_words]
    )
    return [
        0.0 if score >= threshold and _swaps_a_value(words, other, similarity) else score
        for score, other in zip(scores, stored_words, strict=True)
    ]


def _swaps_a_value(a: dict[str, str], b: dict[str, str], similarity: Similarity) -> bool:
    only_a = [word for key, word in a.items() if key not in b]
    only_b = [word for key, word in b.items() if key not in a]
    if not only_a or not only_b:
        return False
    return any(max(similarity(word, only_b)) >= SUBSTITUTION for word in only_a)
