"""Pure functions that turn text into FTS5 index text and MATCH expressions.

Nothing here touches a database, so every output can be printed and tested exactly. `index.py`
runs what these functions build.

CJK text has no spaces between words, and FTS5's `unicode61` tokenizer would index a whole run of
CJK characters as a single token. `segment` therefore rewrites each run into space-separated words
(jieba's words when the index was created with jieba, overlapping bigrams otherwise) before the
text reaches FTS5, and the same rewrite is applied to queries, so both sides see the same tokens.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from deerflow.agents.memory.backends.deermem.deermem.core.patterns import lazy_pattern

__all__ = [
    "MAX_TERMS",
    "STOP_WORDS",
    "Cut",
    "FtsQuery",
    "Segmenter",
    "bigrams",
    "build_query",
    "choose_segmenter",
    "count_tokens",
    "event_words",
    "jieba_cut",
    "quote",
    "segment",
]

Cut = Callable[[str], list[str]]
"""Splits one run of CJK characters into words."""

MAX_TERMS: Final = 32
"""Distinct terms scored per query; bounds the cost of a whole conversation used as a query."""

_STOP_WORDS: Final = """
    a about above after again against all am an and any are as at be been before being below
    between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself nor now of off on once only or other our ours ourselves
    out over own s same she should so some such t than that the their theirs them themselves
    then there these they this those through to too under until up very was we were what when
    where which while who whom why will with would you your yours yourself yourselves
"""
STOP_WORDS: Final = frozenset(_STOP_WORDS.split())
"""English function words (NLTK's list without the negations `no`, `not`, `don`): a plain-text
query drops them when it has other words, because every fact has some and they only add noise."""

# Han, kana and Hangul: the scripts written without spaces between words.
_CJK_RUN = lazy_pattern(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")
# unicode61 keeps letters and digits and splits on everything else, the underscore included.
_TOKEN = re.compile(r"[^\W_]+")
# Signs that the user wrote FTS5 syntax on purpose: a quoted phrase, an upper-case operator,
# NEAR(...), or a prefix star at the end of a word.
_SYNTAX = re.compile(r'"[^"]*"|\b(?:AND|OR|NOT)\b|\bNEAR\(|\w\*(?=\s|\)|$)')
# The pieces of an FTS5 expression that can be scored on their own: strings and barewords.
_PIECE = re.compile(r'"(?:[^"]|"")*"\*?|[^\s(),"]+')
# The distance in NEAR(a b, 5) is not a term.
_NEAR_DISTANCE = re.compile(r",\s*\d+\s*\)")
_OPERATORS: Final = frozenset({"AND", "OR", "NOT", "NEAR"})
# English month names, fixed: `%B` would follow the process locale.
_MONTHS: Final = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


def bigrams(run: str) -> list[str]:
    """Overlapping character pairs of a CJK run; a single character stays itself."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def jieba_cut() -> Cut | None:
    """jieba's search-mode segmentation, or None when jieba is not installed."""
    try:
        jieba = importlib.import_module("jieba")
    except ImportError:
        return None

    def cut(run: str) -> list[str]:
        return [word for word in jieba.lcut_for_search(run) if word.strip()]

    return cut


@dataclass(frozen=True, slots=True)
class Segmenter:
    """The CJK segmenter an index uses.

    Attributes:
        name: what the index records ("jieba" or "bigram").
        cut: the segmenter.
        stale: the index's CJK rows were cut another way: every user must be rebuilt.
    """

    name: str
    cut: Cut
    stale: bool


def choose_segmenter(recorded: str | None) -> Segmenter:
    """The segmenter of an index that recorded `recorded` (None: a new index, which takes jieba
    if importable). The choice is fixed for the life of the index: one built with jieba, opened
    where jieba is missing, falls back to bigrams and is stale, because its CJK rows no longer
    match how queries are cut."""
    if recorded == "bigram":
        return Segmenter("bigram", bigrams, stale=False)
    jieba = jieba_cut()
    if jieba is not None:
        return Segmenter(recorded or "jieba", jieba, stale=False)
    return Segmenter("bigram", bigrams, stale=recorded is not None)


def segment(text: str, cut: Cut) -> str:
    """Rewrite every CJK run of `text` as space-separated words; other text is unchanged."""
    if text.isascii():
        return text
    return _CJK_RUN().sub(lambda match: " " + " ".join(cut(match.group())) + " ", text)


def event_words(event_time: str | None) -> str:
    """When a fact happened, as the words a question would use: `2023-05-08` → `8 May 2023`.

    Indexed with the fact, so "what did I do in May 2023?" matches what happened then. Empty
    when there is no event time or it is not an ISO-8601 date (a derived index refuses nothing).
    """
    if not event_time:
        return ""
    try:
        moment = datetime.fromisoformat(event_time.strip())
    except ValueError:
        return ""
    return f"{moment.day} {_MONTHS[moment.month - 1]} {moment.year}"


def count_tokens(segmented: str) -> int:
    """Roughly the number of tokens `unicode61` makes of segmented text (at least 1)."""
    return max(1, len(_TOKEN.findall(segmented)))


def quote(word: str) -> str:
    """An FTS5 string for `word`: FTS5 tokenizes it, so no character in it acts as syntax."""
    return '"' + word.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class FtsQuery:
    """What to run for one search.

    Attributes:
        match: the MATCH expression that decides which facts are candidates.
        terms: MATCH expressions of the single terms that are scored (BM25) among the candidates.
        syntax: True when `match` is the user's own FTS5 expression, which may fail to parse.
    """

    match: str
    terms: tuple[str, ...]
    syntax: bool


def build_query(
    text: str, cut: Cut, *, plain: bool = False, stop_words: frozenset[str] = frozenset()
) -> FtsQuery | None:
    """Build the FTS5 query for search text, or None when there is nothing to search for.

    Plain text becomes one quoted string per whitespace-separated word, OR-ed, so `don't` and
    `e-mail` are phrases of their tokens and punctuation is harmless. Text that looks like
    deliberate FTS5 syntax passes through unchanged (after CJK segmentation), unless `plain`
    is set, which the caller does after FTS5 rejected the expression. Plain words made only of
    `stop_words` (case-insensitively) are dropped, unless nothing else would remain.

    Args:
        text: the user's query.
        cut: the CJK segmenter the index was built with.
        plain: treat `text` as plain words even if it looks like FTS5 syntax.
        stop_words: lower-case words that plain text does not search for (`STOP_WORDS`).
    """
    segmented = segment(text, cut)
    if not plain and segmented.count('"') % 2 == 0 and _SYNTAX.search(segmented):
        terms = _distinct(
            _piece_term(piece) for piece in _PIECE.findall(_NEAR_DISTANCE.sub(")", segmented))
        )
        if terms:
            return FtsQuery(match=segmented.strip(), terms=terms, syntax=True)
    words = [word for word in segmented.split() if _TOKEN.search(word)]
    content = [word for word in words if not _only_stop_words(word, stop_words)]
    terms = _distinct(quote(word) for word in content or words)
    if not terms:
        return None
    return FtsQuery(match=" OR ".join(terms), terms=terms, syntax=False)


def _only_stop_words(word: str, stop_words: frozenset[str]) -> bool:
    """True when every token of `word` (`what's`: `what`, `s`) is a stop word."""
    return bool(stop_words) and all(
        token in stop_words for token in _TOKEN.findall(word.casefold())
    )


def _piece_term(piece: str) -> str:
    """The scorable term of one piece of an FTS5 expression, or "" for an operator or a sign."""
    if piece.startswith('"'):
        return piece if _TOKEN.search(piece) else ""
    if piece in _OPERATORS or not _TOKEN.search(piece):
        return ""
    word = piece.rstrip("*")
    return quote(word) + ("*" if word != piece else "")


def _distinct(terms: Iterable[str]) -> tuple[str, ...]:
    """Non-empty terms, first occurrence wins, case-insensitively, at most `MAX_TERMS`."""
    seen: dict[str, str] = {}
    for term in terms:
        if term and term.casefold() not in seen:
            seen[term.casefold()] = term
    return tuple(seen.values())[:MAX_TERMS]
