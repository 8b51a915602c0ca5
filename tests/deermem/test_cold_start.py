"""A new process formats memory it has seen before without loading the tokenizer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.core.tokens import shared_cl100k_base

BUDGET = 300
CHILD = """
import json, sys
from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager

manager = DeerMemMemoryManager.from_config(
    {"storage_path": sys.argv[1], "max_injection_tokens": int(sys.argv[2])}
)
if sys.argv[3] == "create":
    manager.create_fact(sys.argv[4], "knowledge", 0.99, user_id="u")
    text = None
else:
    text = manager.get_context("u")
manager.close()
print(json.dumps({"text": text, "tokenizer_loaded": "tiktoken" in sys.modules}))
"""


def child(root: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), str(BUDGET), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def populated(root: Path) -> str:
    """A user whose memory fills the budget, formatted once by a process with the tokenizer."""
    manager = DeerMemMemoryManager.from_config(
        {"storage_path": str(root), "max_injection_tokens": BUDGET}
    )
    summary = {"summary": "Backend engineer at Acme!*\\", "updatedAt": "2025-01-01T00:00:00Z"}
    manager.import_memory(
        {
            "user": {"workContext": summary},
            "history": {"recentMonths": summary | {"summary": "Shipped billing (v2)."}},
            "facts": [
                {
                    "content": f"Fact {n}: prefers tool-{n} for 用户 task {n}!*\\",
                    "category": "correction" if n % 7 == 0 else "preference",
                    "confidence": 0.5 + n / 100,
                }
                for n in range(40)
            ],
        },
        user_id="u",
    )
    text = manager.get_context("u")
    manager.close()
    return text


def cl100k(text: str) -> int:
    return len(shared_cl100k_base().encode_ordinary(text))


def test_known_memory_is_formatted_without_the_tokenizer(tmp_path: Path) -> None:
    expected = populated(tmp_path)
    assert 0 < cl100k(expected) <= BUDGET
    assert expected.count("\n- ") < 42  # the budget binds

    fresh = child(tmp_path, "get_context")
    assert fresh == {"text": expected, "tokenizer_loaded": False}


def test_a_line_no_process_has_counted_loads_the_tokenizer_once(tmp_path: Path) -> None:
    populated(tmp_path)
    assert child(tmp_path, "create", "Moved to Berlin in 2024.")["tokenizer_loaded"] is False

    first = child(tmp_path, "get_context")
    assert first["tokenizer_loaded"] is True
    assert "Moved to Berlin in 2024." in first["text"]
    assert cl100k(first["text"]) <= BUDGET
    second = child(tmp_path, "get_context")
    assert second == {"text": first["text"], "tokenizer_loaded": False}


def test_the_text_is_the_same_with_or_without_stored_counts(tmp_path: Path) -> None:
    expected = populated(tmp_path)
    (tmp_path / ".retrieval" / "tokens.sqlite3").unlink()
    counted_again = child(tmp_path, "get_context")
    assert counted_again == {"text": expected, "tokenizer_loaded": True}
    (tmp_path / ".retrieval" / "tokens.sqlite3").write_bytes(b"garbage" * 1000)
    assert child(tmp_path, "get_context")["text"] == expected


WIDE_CLASSES = """
import json, sys
from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem import governance
from deerflow.agents.memory.backends.deermem.deermem.core import fts_query, tokens

def compiled():
    lazy = (tokens._CJK_CHAR, fts_query._CJK_RUN, governance._TOKEN)
    return [pattern.cache_info().currsize for pattern in lazy]

manager = DeerMemMemoryManager.from_config({"storage_path": sys.argv[1]})
text = manager.get_context("u")
after_read = compiled()
tokens.estimate_tokens("用户喜欢喝茶")
manager.close()
print(json.dumps({"text": text, "after_read": after_read, "after_cjk": compiled()}))
"""


def test_a_read_of_ascii_memory_compiles_no_wide_character_class(tmp_path: Path) -> None:
    """Their compilation took about 9 ms of each cold start."""
    manager = DeerMemMemoryManager.from_config({"storage_path": str(tmp_path)})
    for n in range(5):
        manager.create_fact(f"Prefers tool-{n} for task {n}", "preference", 0.9, user_id="u")
    manager.close()
    done = subprocess.run(
        [sys.executable, "-c", WIDE_CLASSES, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout)
    assert "Prefers tool-4 for task 4" in result["text"]
    assert result["after_read"] == [0, 0, 0]
    assert result["after_cjk"] == [1, 0, 0], "the probe sees a compiled class"
