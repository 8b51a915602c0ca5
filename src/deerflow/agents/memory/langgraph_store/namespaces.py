"""Where a LangGraph namespace lands in DeerFlow Memory: a user and one of the user's buckets.

`(root, user_id)` is the user's default bucket and `(root, user_id, agent_name)` that agent's
bucket; `root` is `"memories"` unless the store is given another. Every other shape is refused
with `InvalidNamespaceError`, because the contract has nowhere to keep it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from langgraph.store.base import InvalidNamespaceError, MatchCondition

__all__ = ["Bucket", "NamespaceMap", "matches_all"]

WILDCARD = "*"


@dataclass(frozen=True)
class Bucket:
    """One bucket of one user: `agent_name` None is the user's default bucket."""

    user_id: str
    agent_name: str | None


@dataclass(frozen=True)
class NamespaceMap:
    root: str

    def bucket(self, namespace: tuple[str, ...]) -> Bucket:
        """The bucket an item's namespace names (get, put, delete).

        Raises:
            InvalidNamespaceError: not `(root, user_id)` or `(root, user_id, agent_name)`.
        """
        if len(namespace) not in (2, 3) or namespace[0] != self.root:
            raise InvalidNamespaceError(
                f"namespace {namespace!r}: DeerFlow Memory keeps items under "
                f"({self.root!r}, user_id) or ({self.root!r}, user_id, agent_name)"
            )
        return Bucket(namespace[1], namespace[2] if len(namespace) == 3 else None)

    def searched(self, prefix: tuple[str, ...]) -> Bucket:
        """The bucket a search prefix covers; `agent_name` None covers all the user's buckets.

        Raises:
            InvalidNamespaceError: shorter than `(root, user_id)` (the contract cannot list
                users), or not a prefix of a namespace this store keeps.
        """
        if len(prefix) < 2:
            raise InvalidNamespaceError(
                f"namespace prefix {prefix!r}: name the user, ({self.root!r}, user_id); "
                "DeerFlow Memory cannot list its users"
            )
        return self.bucket(prefix)

    def namespace(self, bucket: Bucket) -> tuple[str, ...]:
        head = (self.root, bucket.user_id)
        return head if bucket.agent_name is None else (*head, bucket.agent_name)

    def listed_user(self, conditions: Sequence[MatchCondition]) -> str:
        """The user a `list_namespaces` call is about: its prefix must name one.

        Raises:
            InvalidNamespaceError: no prefix `(root, user_id)` (or `("*", user_id)`).
        """
        for condition in conditions:
            path = tuple(condition.path)
            if (
                condition.match_type == "prefix"
                and len(path) >= 2
                and path[0] in (self.root, WILDCARD)
                and path[1] != WILDCARD
            ):
                return path[1]
        raise InvalidNamespaceError(
            f"list_namespaces needs prefix=({self.root!r}, user_id): DeerFlow Memory cannot "
            "list its users"
        )


def matches_all(namespace: tuple[str, ...], conditions: Iterable[MatchCondition]) -> bool:
    """Whether `namespace` meets every prefix and suffix condition (`*` matches any label)."""
    return all(_matches(namespace, condition) for condition in conditions)


def _matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(path) > len(namespace):
        return False
    if condition.match_type == "prefix":
        labels = namespace[: len(path)]
    elif condition.match_type == "suffix":
        labels = namespace[len(namespace) - len(path) :]
    else:
        raise ValueError(f"match_type: {condition.match_type!r} is not 'prefix' or 'suffix'")
    return all(want in (WILDCARD, label) for label, want in zip(labels, path, strict=True))
