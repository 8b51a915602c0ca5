"""FTS5 text and queries as PostgreSQL sees them: tokens and translations, exact output."""

from __future__ import annotations

import sqlite3

import pytest

from deerflow.agents.memory.backends.deermem.deermem.core.index import TOKENIZER
from deerflow.agents.memory.backends.deermem.deermem.postgres.tsquery import (
    QuerySyntaxError,
    render,
    tokens,
    translate,
    words,
)


def rendered(expression: str) -> str | None:
    query = translate(expression)
    return render(query, {word: word for word in words(query)})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Müller's e-mail 1.5", ["muller", "s", "e", "mail", "1", "5"]),
        ("Crème BRÛLÉE", ["creme", "brulee"]),
        ("snake_case x\x00y", ["snake", "case", "x", "y"]),
        (" 用户 喜欢 한국 ", ["用户", "喜欢", "한국"]),  # Hangul stays whole
        ("é" * 600, ["e" * 500]),
        ("", []),
    ],
)
def test_tokens_are_unicode61s(text: str, expected: list[str]) -> None:
    assert tokens(text) == expected


def test_tokens_match_fts5s_for_words_porter_leaves_alone() -> None:
    text = "Müller's e-mail 1.5 Crème BRÛLÉE snake_case ÅNGSTRÖM naïve 用户 東京"
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61 remove_diacritics 2')"
    )
    conn.execute("INSERT INTO t (body) VALUES (?)", (text,))
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    found = [term for (term,) in conn.execute("SELECT term FROM v ORDER BY offset")]
    assert tokens(text) == found
    assert "porter" in TOKENIZER


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('"don\'t" OR "up?"', "(('don' <-> 't') | ('up'))"),
        ("pnpm*", "('pnpm':*)"),
        ('"a" + "b"*', "('a' <-> 'b':*)"),
        ("tea NOT coffee", "(('tea') & !('coffee'))"),
        ("(a OR b) c", "((('a') | ('b')) & ('c'))"),
        ("a OR b c", "(('a') | (('b') & ('c')))"),  # AND binds tighter than OR
        ("body: tea", "('tea')"),
        ('"?" OR tea', "('tea')"),  # a phrase without tokens matches nothing
        ('"?" AND tea', None),
        ("NEAR(tea)", "('tea')"),
        (
            "NEAR(green tea, 1)",
            "((('green') <1> ('tea') | ('tea') <1> ('green') | ('green') <2> ('tea')"
            " | ('tea') <2> ('green')))",
        ),
        ("NEAR(a b, 99)", "((('a') & ('b')))"),  # beyond 32: both anywhere
    ],
)
def test_translations(expression: str, expected: str | None) -> None:
    assert rendered(expression) == expected


EXPRESSIONS = [
    "tea AND NOT coffee", "NOT tea", "tea NOT", "NEAR(a b", "NEAR(a, 3)", "NEAR(a b, x)",
    "a:b", "body:a", "{body}: a", "{body tea}: a", "tea OR", "(tea", "tea)", '"a" + b',
    "a + ", "and AND or", "a* b*", "*a", "NEAR", "NEAR tea", "tea.com", "é AND a", "AND",
    "a NEAR(b c)", 'a"b"', "x*y", "NEAR(a b,)", "BODY:a", '"unbalanced', "a - b",
]  # fmt: skip


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_what_fts5_rejects_is_rejected(expression: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize='{TOKENIZER}')")
    try:
        conn.execute("SELECT * FROM t WHERE t MATCH ?", (expression,)).fetchall()
        fts5_accepts = True
    except sqlite3.OperationalError:
        fts5_accepts = False
    try:
        translate(expression)
        accepted = True
    except QuerySyntaxError:
        accepted = False
    assert accepted == fts5_accepts


@pytest.mark.parametrize("expression", ["^tea", "a ^b"])
def test_the_initial_token_form_is_refused(expression: str) -> None:
    with pytest.raises(QuerySyntaxError, match="no full-text search equivalent"):
        translate(expression)
