"""search and list_namespaces: queries, filters, pagination, prefixes across a user's buckets."""

from __future__ import annotations

import pytest
from langgraph.store.base import InvalidNamespaceError

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from tests.langgraph_store.conftest import CODER, USER, Driven, new_key

FACTS = [
    ("Prefers pnpm over npm", "preference", 0.9),
    ("Prefers dark mode in every editor", "preference", 0.6),
    ("Works on a Rust compiler", "context", 0.8),
    ("Wants to run a marathon", "goal", 0.4),
    ("Lives in Lisbon", "identity", 0.95),
]


@pytest.fixture
def stored(store: Driven) -> dict[str, str]:
    """The content of each stored fact, by key; one more fact in the coder's bucket."""
    keys = {}
    for content, category, confidence in FACTS:
        key = new_key()
        store.put(USER, key, {"content": content, "category": category, "confidence": confidence})
        keys[key] = content
    coder = new_key()
    store.put(CODER, coder, {"content": "Formats Rust with rustfmt", "category": "preference"})
    keys[coder] = "Formats Rust with rustfmt"
    return keys


def contents(items: list) -> list[str]:  # type: ignore[type-arg]
    return [item.value["content"] for item in items]


def test_a_query_finds_the_relevant_facts_best_first_with_scores(
    store: Driven, stored: dict[str, str]
) -> None:
    found = store.search(USER, query="package manager pnpm")

    assert contents(found)[0] == "Prefers pnpm over npm"
    assert all(item.score is not None for item in found)
    assert [item.score for item in found] == sorted((i.score for i in found), reverse=True)
    assert stored[found[0].key] == "Prefers pnpm over npm"


def test_a_user_prefix_covers_the_agents_buckets_and_an_agent_namespace_only_its_own(
    store: Driven, stored: dict[str, str]
) -> None:
    everything = store.search(USER, limit=100)
    assert sorted(contents(everything)) == sorted(stored.values())
    coder = next(item for item in everything if item.value["content"].startswith("Formats"))
    assert coder.namespace == CODER

    assert contents(store.search(CODER, limit=100)) == ["Formats Rust with rustfmt"]
    assert (
        contents(store.search(USER, query="Rust", limit=10)).count("Formats Rust with rustfmt") == 1
    )


def test_filters_on_category_and_with_operators(store: Driven, stored: dict[str, str]) -> None:
    preferences = store.search(USER, filter={"category": "preference"}, limit=100)
    assert sorted(contents(preferences)) == [
        "Formats Rust with rustfmt",
        "Prefers dark mode in every editor",
        "Prefers pnpm over npm",
    ]
    confident = store.search(USER, filter={"confidence": {"$gte": 0.9}}, limit=100)
    assert sorted(contents(confident)) == ["Lives in Lisbon", "Prefers pnpm over npm"]
    both = store.search(
        USER, query="prefers", filter={"category": "preference", "confidence": {"$lt": 0.7}}
    )
    assert contents(both) == ["Prefers dark mode in every editor"]
    not_context = store.search(USER, filter={"category": {"$ne": "context"}}, limit=100)
    assert "Works on a Rust compiler" not in contents(not_context)
    assert len(not_context) == len(stored) - 1
    assert store.search(USER, filter={"mood": "happy"}) == []


def test_a_query_with_a_filter_still_fills_the_page(
    store: Driven, manager: DeerMemMemoryManager
) -> None:
    # The wanted facts are the least confident, which the backend ranks last.
    for number in range(12):
        confidence = 0.2 if number % 4 == 0 else 0.9
        store.put(
            USER, new_key(), {"content": f"Likes tea number {number}", "confidence": confidence}
        )

    found = store.search(USER, query="tea", filter={"confidence": 0.2}, limit=3)

    assert len(found) == 3
    assert all(item.value["confidence"] == 0.2 for item in found)


def test_pages_of_a_listing_do_not_overlap_and_cover_everything_newest_first(
    store: Driven, stored: dict[str, str]
) -> None:
    pages = [store.search(USER, limit=2, offset=offset) for offset in range(0, 8, 2)]

    keys = [item.key for page in pages for item in page]
    assert sorted(keys) == sorted(stored)
    assert [len(page) for page in pages] == [2, 2, 2, 0]
    stamps = [(item.updated_at, item.key) for page in pages for item in page]
    assert stamps == sorted(stamps, reverse=True)
    assert store.search(USER, limit=0) == []


def test_pages_of_a_query_do_not_overlap(store: Driven, stored: dict[str, str]) -> None:
    whole = store.search(USER, query="prefers", limit=10)
    first, second = (store.search(USER, query="prefers", limit=1, offset=n) for n in (0, 1))
    assert [item.key for item in first + second] == [item.key for item in whole[:2]]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"filter": {"category": "hobby"}}, ValueError, "category: 'hobby'"),
        ({"filter": {"confidence": {"$in": [1]}}}, ValueError, "unknown operator '\\$in'"),
        ({"limit": -1}, ValueError, "must not be negative"),
    ],
)
def test_a_bad_search_is_refused(
    store: Driven,
    stored: dict[str, str],
    arguments: dict,
    error: type,
    message: str,  # type: ignore[type-arg]
) -> None:
    with pytest.raises(error, match=message):
        store.search(USER, **arguments)


@pytest.mark.parametrize("prefix", [(), ("memories",), ("docs", "alice")])
def test_a_search_that_does_not_name_the_user_is_refused(
    store: Driven, prefix: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.search(prefix)


def test_list_namespaces_lists_the_users_buckets_that_hold_facts(
    store: Driven, stored: dict[str, str]
) -> None:
    store.put(("memories", "alice", "writer"), new_key(), {"content": "Writes in English"})
    buckets = [USER, CODER, ("memories", "alice", "writer")]

    assert store.list_namespaces(prefix=USER) == buckets
    assert store.list_namespaces(prefix=("*", "alice")) == buckets
    assert store.list_namespaces(prefix=USER, suffix=("writer",)) == [buckets[2]]
    assert store.list_namespaces(prefix=USER, suffix=("*", "alice")) == [USER]
    assert store.list_namespaces(prefix=USER, max_depth=2) == [USER]
    assert store.list_namespaces(prefix=USER, limit=1, offset=1) == [CODER]
    assert store.list_namespaces(prefix=CODER) == [CODER]
    assert store.list_namespaces(prefix=("memories", "bob")) == []


def test_an_agent_name_with_underscores_is_a_bucket_named_in_lower_case(store: Driven) -> None:
    """DeerMem folds agent names to lower case: "Code_Bot" and "code_bot" are one bucket, and
    searches and listings name it in lower case (docs/langgraph.md, Namespaces)."""
    key = new_key()
    store.put(("memories", "alice", "Code_Bot"), key, {"content": "Reviews Go code"})

    lower = ("memories", "alice", "code_bot")
    assert store.list_namespaces(prefix=USER) == [lower]
    assert [(item.namespace, item.key) for item in store.search(USER)] == [(lower, key)]
    assert store.get(lower, key).value["content"] == "Reviews Go code"
    assert store.get(("memories", "alice", "Code_Bot"), key).namespace == (
        "memories",
        "alice",
        "Code_Bot",
    )


def test_an_emptied_default_bucket_is_not_listed(store: Driven) -> None:
    key = new_key()
    store.put(USER, key, {"content": "Drinks tea"})
    store.put(CODER, new_key(), {"content": "Uses vim"})
    store.delete(USER, key)

    assert store.list_namespaces(prefix=USER) == [CODER]


@pytest.mark.parametrize("prefix", [None, ("memories",), ("memories", "*")])
def test_list_namespaces_without_a_user_is_refused(
    store: Driven, prefix: tuple[str, ...] | None
) -> None:
    with pytest.raises(InvalidNamespaceError, match="cannot list its users"):
        store.list_namespaces(prefix=prefix)
