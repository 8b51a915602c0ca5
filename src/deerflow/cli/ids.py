"""Unique id prefixes, as git takes them: `fact_5c0e` or `5c0e` for a fact, `chg_9f1c` or `9f1c`
for a change.

A full id is passed on untouched. Anything else is looked up among the ids the library shows
(the bucket's facts; the user's changes in every bucket): exactly one match resolves to it, more
than one is refused with the candidates, none is passed on for the library to report (unknown
fact: exit 3; malformed: exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from deerflow.agents.memory.extensions import AgentListing, ChangeListing
from deerflow.agents.memory.manager import MemoryManager, MemoryUnsupportedError

__all__ = ["MIN_PREFIX", "AmbiguousIdError", "resolve_change_id", "resolve_fact_id"]

MIN_PREFIX: Final = 4  # characters after `fact_`/`chg_`; fewer would match half the bucket
FULL_FACT_ID: Final = re.compile(r"fact_[0-9a-f]{32}")
FULL_CHANGE_ID: Final = re.compile(r"chg_[0-9a-f]{32}")
# Every change of a user is a candidate: its whole history is read.
ALL_CHANGES: Final = 2**31 - 1
SHOWN_CANDIDATES: Final = 10


class AmbiguousIdError(ValueError):
    """An id prefix matches several ids."""

    def __init__(self, given: str, candidates: list[str]) -> None:
        self.candidates = candidates
        shown = ", ".join(candidates[:SHOWN_CANDIDATES])
        more = len(candidates) - SHOWN_CANDIDATES
        super().__init__(
            f"{given!r} is ambiguous: it begins {len(candidates)} ids ({shown}"
            + (f", and {more} more" if more > 0 else "")
            + "); give more characters"
        )


def resolve_fact_id(
    manager: MemoryManager, given: str, *, user_id: str, agent_name: str | None
) -> str:
    """The id of the bucket's fact that `given` is, or begins with (`fact_` may be left out).

    Raises:
        AmbiguousIdError: several facts of the bucket begin so.
    """
    if FULL_FACT_ID.fullmatch(given):
        return given
    try:
        document = manager.get_memory(user_id=user_id, agent_name=agent_name)
    except MemoryUnsupportedError:
        return given
    return _resolve(given, "fact_", (str(fact["id"]) for fact in document.get("facts", [])))


def resolve_change_id(manager: MemoryManager, given: str, *, user_id: str) -> str:
    """The id of the user's recorded change that `given` is, or begins with (`chg_` may be
    left out), whichever agent bucket it touched.

    Raises:
        AmbiguousIdError: several changes begin so.
    """
    if FULL_CHANGE_ID.fullmatch(given):
        return given
    if isinstance(manager, ChangeListing):
        return _resolve(given, "chg_", manager.change_ids(user_id=user_id))
    # Otherwise only the buckets that hold facts can be named: a change of an emptied one needs
    # its whole id.
    buckets: list[str | None] = [None]
    if isinstance(manager, AgentListing):
        buckets += manager.agent_names(user_id=user_id)
    try:
        ids = {
            str(entry["change_id"])
            for agent in buckets
            for entry in manager.get_history(user_id=user_id, agent_name=agent, limit=ALL_CHANGES)
        }
    except MemoryUnsupportedError:
        return given
    return _resolve(given, "chg_", ids)


def _resolve(given: str, kind: str, ids: Iterable[str]) -> str:
    known = sorted(set(ids))
    if given in known:
        return given
    if len(given.removeprefix(kind)) < MIN_PREFIX:
        return given
    candidates = [i for i in known if i.startswith((given, kind + given))]
    if len(candidates) > 1:
        raise AmbiguousIdError(given, candidates)
    return candidates[0] if candidates else given
