"""Token counting for the injection budget: real cl100k offline, else an estimate."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, NoReturn

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public

from deerflow.agents.memory.backends.deermem.deermem.core import tokens
from deerflow.agents.memory.backends.deermem.deermem.core.tokens import (
    TokenCounter,
    estimate_tokens,
    load_cl100k_base,
    shared_cl100k_base,
)

# Counts from OpenAI's cl100k_base ("hello world" is [15339, 1917]).
KNOWN_COUNTS = [
    ("hello world", 2),
    ("User Context:\n- Work: Senior engineer at Acme.", 12),
    ("- [correction | 0.97] Use pnpm, not npm (avoid: used npm)", 22),
    ("用户喜欢使用 uv 而不是 pip 来管理 Python 依赖。", 23),
    ("<|endoftext|>", 7),  # special-token markers in stored text are ordinary text
    ("", 0),
]

SAMPLES = [
    "hello world",
    "The user prefers uv over pip for Python package management and dislikes poetry.",
    "Use pnpm, not npm (avoid: used npm)",
    "src/deerflow/agents/memory/backends/deermem/deermem/core/tokens.py",
    "https://github.com/bytedance/deer-flow/pull/5251",
    "Meeting on 2024-05-17 at 14:30 with 12 people, budget $45,000.",
    "def format_context(summaries: Mapping[str, Any], *, max_tokens: int = 2000) -> str:",
    "Internationalization and localization requirements were underestimated considerably.",
    "用户在字节跳动工作，负责智能体框架的记忆模块。",
    "ユーザーは東京に住んでいます。",
    "사용자는 서울에 살고 있습니다.",
    "User Context:\n- Work: Senior engineer at Acme.\n- Personal: Lives in Berlin.",
]


def _offline(*_: Any, **__: Any) -> NoReturn:
    raise AssertionError("token counting tried to reach the network")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Make every route tiktoken could use to download its ranks fail loudly."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(tiktoken.load, "read_file", _offline)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", _offline)
    monkeypatch.setattr(socket.socket, "connect", _offline)
    monkeypatch.setattr(socket, "create_connection", _offline)


@pytest.mark.usefixtures("no_network")
def test_loads_offline_and_matches_cl100k() -> None:
    counter = TokenCounter(load_cl100k_base)  # not the shared encoding: another test may have it
    assert counter.load() is True
    assert counter.ready
    for text, expected in KNOWN_COUNTS:
        assert counter.count(text) == expected, text


@pytest.mark.usefixtures("no_network")
def test_count_loads_lazily_on_first_use() -> None:
    counter = TokenCounter(load_cl100k_base)
    assert not counter.ready
    assert counter.count("hello world") == 2
    assert counter.ready


def test_counters_share_one_encoding() -> None:
    first, second = TokenCounter(), TokenCounter()
    assert first.load()
    assert second.load()
    assert shared_cl100k_base() is shared_cl100k_base()


def test_constants_mirror_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ask tiktoken's own constructor for its parameters, with the download replaced by nothing.
    monkeypatch.setattr(tiktoken_ext.openai_public, "load_tiktoken_bpe", lambda *_, **__: {})
    spec = tiktoken_ext.openai_public.cl100k_base()
    assert spec["pat_str"] == tokens.CL100K_PAT_STR
    assert spec["special_tokens"] == tokens.CL100K_SPECIAL_TOKENS
    with open(tiktoken_ext.openai_public.__file__, encoding="utf-8") as source:
        assert tokens.CL100K_SHA256 in source.read()


def test_bundled_ranks_are_checked_against_the_pinned_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "CL100K_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="pinned hash"):
        load_cl100k_base()


def test_failed_load_falls_back_to_the_estimate_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    def broken() -> tiktoken.Encoding:
        nonlocal calls
        calls += 1
        raise OSError("bundled ranks missing")

    counter = TokenCounter(broken)
    with caplog.at_level(logging.WARNING):
        assert counter.load() is False
        counts = [counter.count(text) for text in SAMPLES]
    assert counts == [estimate_tokens(text) for text in SAMPLES]
    assert calls == 1
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "cl100k_base unavailable (bundled ranks missing); token counts are estimated"
    ]


def test_estimate_is_within_a_factor_of_two() -> None:
    encoding = load_cl100k_base()
    for text in SAMPLES:
        real = len(encoding.encode_ordinary(text))
        assert real / 2 <= estimate_tokens(text) <= real * 2, text


def test_estimate_rule() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("hello world") == 2
    assert estimate_tokens("Internationalization") == 4  # ceil(20 / 6)
    assert estimate_tokens("v1.2.3, ok!") == 9  # v 1 . 2 . 3 , ok !
    assert estimate_tokens("用户喜欢") == 5  # ceil(4 * 1.25)
    assert estimate_tokens("用户 uses pnpm") == 5  # ceil(2 * 1.25) + 1 + 1


def test_concurrent_first_use_loads_once() -> None:
    calls = 0
    real = load_cl100k_base()

    def slow() -> tiktoken.Encoding:
        nonlocal calls
        calls += 1
        time.sleep(0.05)
        return real

    counter = TokenCounter(slow)
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(counter.count("hello world")))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == 1
    assert results == [2] * 8
