"""Text and FTS5 queries as PostgreSQL full-text search sees them, as pure functions.

The files index tokenizes with FTS5's `porter unicode61 remove_diacritics 2`; the PostgreSQL
index must find the same facts for the same query, so nothing is left to PostgreSQL's own
parser (which keeps `e-mail` whole beside its parts, reads `1.5` as a number, drops English stop
words): `tokens` splits and folds text here the way unicode61 does (letters and digits, lower
case, diacritics removed), the index stores those tokens, and the database only stems each one
(`search_stem`: the Snowball `porter` stemmer, which is the Porter algorithm FTS5 uses; tokens
shorter than 3 bytes are kept as they are, as FTS5 does).

Queries come from `fts_query.build_query`, as FTS5 expressions; `translate` turns one into a
`Query` whose `render` is the equivalent `tsquery` once the words are stemmed. FTS5 syntax is
parsed here, and what FTS5 would reject (`pnpm AND`) raises `QuerySyntaxError`, after which the
text is searched again as plain words, as the files index does. Two forms have no exact
`tsquery` equivalent: `^word` (the first token of the text) is refused like a syntax error, and
`NEAR(a b c, N)` with three or more phrases requires every pair to be within N tokens, a little
looser than FTS5's single window (two phrases are exact). A token longer than 500 characters is
cut to its first 500 (PostgreSQL's limit on a lexeme's size), and positions past 16383 count as
16383 (its limit on positions), which only matters for phrases deep inside very long texts.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "Query",
    "QuerySyntaxError",
    "index_terms",
    "render",
    "tokens",
    "translate",
    "words",
]

_TOKEN = re.compile(r"[^\W_]+")
_LONGEST: Final = 500
"""Tokens are cut to this many characters: PostgreSQL refuses a lexeme of 2 KiB or more (and
500 characters are at most 2000 bytes)."""
_NEAR_DEFAULT: Final = 10
_NEAR_MAX: Final = 32
"""NEAR distances above this are taken as AND: each allowed distance is one alternative."""


class QuerySyntaxError(ValueError):
    """The expression is not valid FTS5 syntax (or uses a form PostgreSQL cannot express)."""


def tokens(text: str) -> list[str]:
    """The tokens unicode61 (`remove_diacritics 2`) makes of text: runs of letters and digits,
    lower case, without diacritics."""
    return [_fold(token[:_LONGEST]) for token in _TOKEN.findall(text)]


def index_terms(text: str) -> str:
    """What the index stores of text: its tokens, space separated."""
    return " ".join(tokens(text))


def _fold(token: str) -> str:
    if token.isascii():
        return token.lower()
    folded = []
    for char in token.lower():
        decomposed = unicodedata.normalize("NFD", char)
        # A letter with diacritics becomes its base letter; Hangul and others stay whole.
        if len(decomposed) > 1 and all(unicodedata.combining(mark) for mark in decomposed[1:]):
            char = decomposed[0]
        if not unicodedata.combining(char):
            folded.append(char)
    return "".join(folded)


@dataclass(frozen=True, slots=True)
class Phrase:
    """Tokens in a row; `prefixes[i]`: token i matches any token it begins."""

    words: tuple[str, ...]
    prefixes: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class Near:
    phrases: tuple[Phrase, ...]
    distance: int


@dataclass(frozen=True, slots=True)
class Binary:
    operator: str  # "&", "|", or "NOT"
    left: Query
    right: Query


Query = Phrase | Near | Binary | None
"""A parsed expression; None matches nothing (a phrase without tokens, as in FTS5)."""


def words(query: Query) -> set[str]:
    """Every token of the query, to be stemmed before `render`."""
    if isinstance(query, Phrase):
        return set(query.words)
    if isinstance(query, Near):
        return {word for phrase in query.phrases for word in phrase.words}
    if isinstance(query, Binary):
        return words(query.left) | words(query.right)
    return set()


def render(query: Query, stems: Mapping[str, str]) -> str | None:
    """The `tsquery` text of `query` with each token replaced by its stem; None matches nothing."""
    if isinstance(query, Phrase):
        if not query.words:
            return None
        lexemes = [
            f"'{stems[word]}'" + (":*" if prefix else "")
            for word, prefix in zip(query.words, query.prefixes, strict=True)
        ]
        return "(" + " <-> ".join(lexemes) + ")"
    if isinstance(query, Near):
        return _near(query, stems)
    if isinstance(query, Binary):
        left, right = render(query.left, stems), render(query.right, stems)
        if query.operator == "|":
            return left if right is None else right if left is None else f"({left} | {right})"
        if left is None:
            return None
        if query.operator == "NOT":
            return left if right is None else f"({left} & !{right})"
        return None if right is None else f"({left} & {right})"
    return None


def _near(query: Near, stems: Mapping[str, str]) -> str | None:
    rendered = [render(phrase, stems) for phrase in query.phrases]
    if any(phrase is None for phrase in rendered):
        return None
    if len(rendered) == 1:
        return rendered[0]
    pairs = []
    for i, left in enumerate(rendered):
        for right in rendered[i + 1 :]:
            if query.distance + 1 > _NEAR_MAX:
                pairs.append(f"({left} & {right})")
                continue
            # NEAR(a b, N): at most N tokens between the end of one and the start of the other.
            options = [
                f"{first} <{gap}> {second}"
                for gap in range(1, query.distance + 2)
                for first, second in ((left, right), (right, left))
            ]
            pairs.append("(" + " | ".join(options) + ")")
    return "(" + " & ".join(pairs) + ")"


def translate(expression: str) -> Query:
    """Parse an FTS5 expression (operators AND, OR, NOT, NEAR(...), parentheses, strings,
    barewords, `*` prefixes, `+` joined phrases, the column filter `body:`).

    Raises:
        QuerySyntaxError: FTS5 would reject it, or it uses `^`.
    """
    parser = _Parser(list(_lex(expression)))
    query = parser.disjunction()
    if parser.peek() is not None:
        raise QuerySyntaxError(f"unexpected {parser.peek()!r} in {expression!r}")
    return query


_PUNCTUATION: Final = frozenset("(),+*:^{}-")


def _lex(expression: str) -> Iterator[str]:
    """FTS5's tokens: strings (kept with their quotes), barewords and punctuation."""
    position = 0
    while position < len(expression):
        char = expression[position]
        if char.isspace():
            position += 1
        elif char == '"':
            end = position + 1
            while True:
                end = expression.find('"', end)
                if end < 0:
                    raise QuerySyntaxError(f"unterminated string in {expression!r}")
                if expression.startswith('""', end):
                    end += 2
                    continue
                break
            yield expression[position : end + 1]
            position = end + 1
        elif char in _PUNCTUATION:
            yield char
            position += 1
        elif _bareword_char(char):
            end = position
            while end < len(expression) and _bareword_char(expression[end]):
                end += 1
            yield expression[position:end]
            position = end
        else:
            raise QuerySyntaxError(f"unexpected {char!r} in {expression!r}")


def _bareword_char(char: str) -> bool:
    return (char.isascii() and (char.isalnum() or char in "_\x1a")) or not char.isascii()


class _Parser:
    def __init__(self, items: list[str]) -> None:
        self._items = items
        self._at = 0

    def peek(self, ahead: int = 0) -> str | None:
        at = self._at + ahead
        return self._items[at] if at < len(self._items) else None

    def take(self, expected: str | None = None) -> str:
        item = self.peek()
        if item is None or (expected is not None and item != expected):
            raise QuerySyntaxError(f"expected {expected or 'more'}, found {item!r}")
        self._at += 1
        return item

    def disjunction(self) -> Query:
        query = self.conjunction()
        while self.peek() == "OR":
            self.take()
            query = Binary("|", query, self.conjunction())
        return query

    def conjunction(self) -> Query:
        query = self.negation()
        while True:
            if self.peek() == "AND":
                self.take()
            elif not self._starts_primary():
                return query
            query = Binary("&", query, self.negation())

    def negation(self) -> Query:
        query = self.primary()
        while self.peek() == "NOT":
            self.take()
            query = Binary("NOT", query, self.primary())
        return query

    def _starts_primary(self) -> bool:
        item = self.peek()
        return item is not None and (item in ("(", "{", "^", "-") or _is_word(item))

    def primary(self) -> Query:
        item = self.peek()
        if item == "(":
            self.take()
            query = self.disjunction()
            self.take(")")
            return query
        if item == "NEAR" and self.peek(1) == "(":
            return self.near()
        if item == "{" or (item is not None and _is_word(item) and self.peek(1) == ":"):
            self.column_filter()
            return self.primary()
        if item in ("^", "-"):
            raise QuerySyntaxError(f"{item!r} has no full-text search equivalent here")
        return self.phrase()

    def column_filter(self) -> None:
        names = []
        if self.peek() == "{":
            self.take()
            while self.peek() not in ("}", None):
                names.append(self.take())
            self.take("}")
        else:
            names.append(self.take())
        self.take(":")
        if [name.casefold() for name in names] != ["body"]:
            raise QuerySyntaxError(f"no such column: {' '.join(names)}")

    def near(self) -> Query:
        self.take("NEAR")
        self.take("(")
        phrases = []
        while self.peek() not in (",", ")", None):
            phrase = self.phrase()
            phrases.append(phrase)
        distance = _NEAR_DEFAULT
        if self.peek() == ",":
            self.take()
            number = self.take()
            if not number.isascii() or not number.isdigit():
                raise QuerySyntaxError(f"NEAR distance {number!r} is not a number")
            distance = int(number)
        self.take(")")
        if not phrases:
            raise QuerySyntaxError("NEAR() without phrases")
        return Near(tuple(phrases), distance)

    def phrase(self) -> Phrase:
        found: list[str] = []
        prefixes: list[bool] = []
        while True:
            item = self.take()
            if not _is_word(item):
                raise QuerySyntaxError(f"unexpected {item!r}")
            text = item[1:-1].replace('""', '"') if item.startswith('"') else item
            found.extend(tokens(text))
            prefixes.extend(False for _ in range(len(found) - len(prefixes)))
            if self.peek() == "*":
                self.take()
                if prefixes:
                    prefixes[-1] = True
            if self.peek() != "+":
                return Phrase(tuple(found), tuple(prefixes))
            self.take()


def _is_word(item: str) -> bool:
    return item.startswith('"') or (item not in ("AND", "OR", "NOT") and _bareword_char(item[0]))
