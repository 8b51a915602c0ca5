"""Token counts kept on disk: a counter answers known lines without loading the tokenizer."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import NoReturn

import pytest
import tiktoken

from deerflow.agents.memory.backends.deermem.deermem.core.token_cache import TokenCache
from deerflow.agents.memory.backends.deermem.deermem.core.tokens import (
    TokenCounter,
    estimate_tokens,
    shared_cl100k_base,
)

LINES = [
    "- [correction | 0.97] Use pnpm, not npm (avoid: used npm)",
    "- Work: a!*\\",  # 1 token more before two newlines than before one
    "- [preference | 0.90] 用户喜欢喝茶",
    "User Context:",
    "",
    "- lone surrogate \ud800 and <|endoftext|>",
    "- " + "long " * 400,
]


def never_loads() -> NoReturn:
    raise AssertionError("the tokenizer was loaded")


def real(text: str) -> int:
    return len(shared_cl100k_base().encode_ordinary(text))


def forms(line: str) -> list[str]:
    return [line, line + "\n", line + "\n\n"]


def test_lines_counted_once_are_known_to_the_next_counter(tmp_path: Path) -> None:
    path = tmp_path / "tokens.sqlite3"
    first = TokenCounter(cache=TokenCache(path))
    assert [first.count(line + "\n") for line in LINES] == [real(line + "\n") for line in LINES]
    first.flush()
    first.close()

    second = TokenCounter(never_loads, cache=TokenCache(path))
    for line in LINES:
        assert [second.count(text) for text in forms(line)] == [real(t) for t in forms(line)]
    assert not second.ready
    second.close()


def test_unflushed_counts_are_not_stored(tmp_path: Path) -> None:
    path = tmp_path / "tokens.sqlite3"
    first = TokenCounter(cache=TokenCache(path))
    first.count("never flushed\n")
    first.close()
    assert TokenCache(path).get("never flushed") is None


def test_a_line_is_stored_with_its_three_forms(tmp_path: Path) -> None:
    cache = TokenCache(tmp_path / "tokens.sqlite3")
    counter = TokenCounter(cache=cache)
    counter.count("- Work: a!*\\\n\n")
    counter.flush()
    assert cache.get("- Work: a!*\\") == tuple(real(t) for t in forms("- Work: a!*\\"))
    assert cache.get("- Work: a!*\\\n") is None  # keyed by the line, not by the text counted


def test_a_corrupt_file_is_recreated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "tokens.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    counter = TokenCounter(cache=TokenCache(path))
    with caplog.at_level(logging.WARNING):
        assert counter.count("hello world\n") == real("hello world\n")
    assert "unreadable; recreating it" in caplog.text
    counter.flush()
    assert TokenCache(path).get("hello world") == tuple(real(t) for t in forms("hello world"))


def test_an_unusable_cache_is_turned_off_and_counts_stay_exact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache's folder should be")
    counter = TokenCounter(cache=TokenCache(blocker / ".retrieval" / "tokens.sqlite3"))
    with caplog.at_level(logging.WARNING):
        counts = [counter.count(line + "\n") for line in LINES]
        counter.flush()
    assert counts == [real(line + "\n") for line in LINES]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "counting with the encoding instead" in warnings[0].getMessage()


def test_a_failed_load_still_estimates(tmp_path: Path) -> None:
    def broken() -> tiktoken.Encoding:
        raise OSError("bundled ranks missing")

    counter = TokenCounter(broken, cache=TokenCache(tmp_path / "tokens.sqlite3"))
    assert counter.count("hello world, again\n") == estimate_tokens("hello world, again\n")
    counter.flush()
    assert TokenCache(tmp_path / "tokens.sqlite3").get("hello world, again") is None


def test_concurrent_counters_share_one_file(tmp_path: Path) -> None:
    # Like processes: each thread has its own cache object (connection) on the same file.
    path = tmp_path / "tokens.sqlite3"
    lines = [f"- [knowledge | 0.{n % 100:02d}] fact number {n}!" for n in range(400)]
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            counter = TokenCounter(cache=TokenCache(path))
            for n in range(len(lines)):
                line = lines[(n + offset) % len(lines)]
                assert counter.count(line + "\n") == real(line + "\n")
                if n % 25 == 0:
                    counter.flush()
            counter.flush()
            counter.close()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n * 50,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    reader = TokenCounter(never_loads, cache=TokenCache(path))
    assert [reader.count(line) for line in lines] == [real(line) for line in lines]
