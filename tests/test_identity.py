"""The shared naming of stored memory: readable, stable, and never shared by two ids."""

from __future__ import annotations

import re

import pytest

from deerflow.agents.memory.manager import checked_id, checked_user_id, slug_with_digest


def test_ids_differing_only_in_punctuation_get_different_names() -> None:
    ids = ["a.b", "a_b", "a-b", "a b", "a..b", "A.B"]
    names = {slug_with_digest(value, "_", "id") for value in ids}
    assert len(names) == len(ids)
    assert {name.split("_")[0] for name in names} == {"a-b", "A-B"}


def test_names_are_stable_and_bounded() -> None:
    # Pinned: stored memory is found again by this name after a restart or an upgrade.
    assert (
        slug_with_digest("alice@example.com", ".", "user") == "alice-example-com.ff8d9819fc0e12bf"
    )
    assert re.fullmatch(r"thread_[0-9a-f]{16}", slug_with_digest("!!!", "_", "thread"))
    assert len(slug_with_digest("x" * 1024, "_", "id")) == 40 + 1 + 16


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "non-empty"),
        (None, "non-empty"),
        (7, "non-empty"),
        ("x" * 1025, "1024"),
        ("a\x00", "NUL"),
    ],
)
def test_unusable_ids_are_refused_by_name(value: object, problem: str) -> None:
    with pytest.raises(ValueError, match=rf"thread_id: .*{problem}"):
        checked_id(value, "thread_id")


def test_no_user_is_the_default_user() -> None:
    assert checked_user_id(None) == "default"
    assert checked_user_id("a.b") == "a.b"
