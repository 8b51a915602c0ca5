"""Facts as LangGraph items: keys, values, timestamps and filters.

A key is the fact id in UUID form: the id `fact_<32 hex>` (what `create_fact` makes) is the
key `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` spelling the same 32 hex digits, so LangMem, whose
tools take a UUID, can name every fact. A fact id given as it is (`fact_…`) is accepted as a
key too. An item's value is the fact's public fields without `id` (the key) and `score` (the
search item's score); only `content`, `category` and `confidence` can be written.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from langgraph.store.base import Item, SearchItem

from deerflow.agents.memory.manager import validate_category

__all__ = [
    "WRITABLE_FIELDS",
    "FactWrite",
    "category_filter",
    "fact_id_of",
    "key_of",
    "matches",
    "parse_value",
    "refuse_changed",
    "search_item",
    "stored_item",
    "value_of",
]

FACT_PREFIX: Final = "fact_"
WRITABLE_FIELDS: Final = ("content", "category", "confidence")
NOT_IN_VALUE: Final = ("id", "score")
# A fact without a readable time (a hand-edited file) still needs one on its item.
NO_TIME: Final = datetime(1970, 1, 1, tzinfo=UTC)
_COMPARISONS: Final = ("$gt", "$gte", "$lt", "$lte")


def key_of(fact_id: str) -> str:
    """The item key of a fact: its UUID form when the id spells one, else the id itself."""
    digits = fact_id.removeprefix(FACT_PREFIX)
    if fact_id.startswith(FACT_PREFIX) and len(digits) == 32:
        try:
            return str(uuid.UUID(hex=digits))
        except ValueError:
            pass
    return fact_id


def fact_id_of(key: str) -> str:
    """The fact id an item key names.

    Raises:
        ValueError: the key is neither a UUID string (`str(uuid.uuid4())`) nor a fact id.
    """
    if key.startswith(FACT_PREFIX):
        return key
    try:
        parsed = uuid.UUID(key)
    except ValueError:
        parsed = None
    if parsed is None or str(parsed) != key:
        raise ValueError(
            f"key {key!r}: DeerFlow Memory names items by UUID strings (str(uuid.uuid4())) "
            "or by fact ids (fact_…)"
        )
    return FACT_PREFIX + parsed.hex


@dataclass(frozen=True)
class FactWrite:
    """What a put writes: `content`, the optional fields it names, and the value's other
    fields, which must equal the stored fact's (a value read back may be written back)."""

    content: str
    optional: dict[str, Any]
    unchanged: dict[str, Any]


def parse_value(value: Mapping[str, Any]) -> FactWrite:
    """Split a put's value into what DeerFlow Memory stores and what it must find unchanged.

    Raises:
        ValueError: no `content`, content that is not text (LangMem's `{"content": {...}}`
            from a schema other than `str`), or `id`/`score`, which are not part of a value.
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"value: must be a mapping of fact fields, got {type(value).__name__}")
    if "content" not in value:
        raise ValueError(
            "value: needs 'content', the fact's text (writable fields: "
            f"{', '.join(WRITABLE_FIELDS)})"
        )
    content = value["content"]
    if not isinstance(content, str):
        raise ValueError(
            f"value['content']: a fact's content is text, got {type(content).__name__}; "
            "DeerFlow Memory does not store objects (with LangMem, keep schema=str)"
        )
    if misplaced := [name for name in NOT_IN_VALUE if name in value]:
        raise ValueError(
            f"value: {', '.join(map(repr, misplaced))} is not part of an item's value "
            "(the id is the item's key, the score a search item's)"
        )
    optional = {name: value[name] for name in WRITABLE_FIELDS[1:] if name in value}
    unchanged = {name: field for name, field in value.items() if name not in WRITABLE_FIELDS}
    return FactWrite(content, optional, unchanged)


def refuse_changed(write: FactWrite, fact: Mapping[str, Any] | None) -> None:
    """Raise `ValueError` naming the first field of `write.unchanged` that `fact` does not hold
    with the same value (every one of them, when there is no stored fact)."""
    for name, field in write.unchanged.items():
        if fact is None:
            raise ValueError(
                f"value[{name!r}]: a new fact takes only {', '.join(WRITABLE_FIELDS)}; the "
                "memory backend sets its other fields"
            )
        if name not in fact:
            raise ValueError(
                f"value[{name!r}]: not a field DeerFlow Memory stores for a fact (writable "
                f"fields: {', '.join(WRITABLE_FIELDS)})"
            )
        if fact[name] != field:
            raise ValueError(
                f"value[{name!r}]: kept by the memory backend and cannot be written (writable "
                f"fields: {', '.join(WRITABLE_FIELDS)})"
            )


def value_of(fact: Mapping[str, Any]) -> dict[str, Any]:
    return {name: field for name, field in fact.items() if name not in NOT_IN_VALUE}


def stored_item(namespace: tuple[str, ...], fact: Mapping[str, Any]) -> Item:
    return Item(
        value=value_of(fact),
        key=key_of(fact["id"]),
        namespace=namespace,
        created_at=_time(fact.get("createdAt")),
        updated_at=_time(fact.get("updatedAt")),
    )


def search_item(namespace: tuple[str, ...], fact: Mapping[str, Any]) -> SearchItem:
    score = fact.get("score")
    return SearchItem(
        namespace=namespace,
        key=key_of(fact["id"]),
        value=value_of(fact),
        created_at=_time(fact.get("createdAt")),
        updated_at=_time(fact.get("updatedAt")),
        score=None if score is None else float(score),
    )


def _time(stamp: Any) -> datetime:
    try:
        moment = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return NO_TIME
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def category_filter(conditions: Mapping[str, Any]) -> str | None:
    """The category an equality filter asks for, checked, for the backend's own search.

    Raises:
        ValueError: not one of the fact categories.
    """
    wanted = conditions.get("category")
    return validate_category(wanted) if isinstance(wanted, str) else None


def matches(value: Mapping[str, Any], conditions: Mapping[str, Any]) -> bool:
    """Whether `value` meets a LangGraph filter: equality per field, nested mappings field by
    field, and the operators `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`.

    Raises:
        ValueError: an unknown operator.
    """
    return all(_meets(value.get(name), wanted) for name, wanted in conditions.items())


def _meets(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping) and wanted and all(str(k).startswith("$") for k in wanted):
        return all(_apply(actual, operator, operand) for operator, operand in wanted.items())
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(
            _meets(actual.get(name), field) for name, field in wanted.items()
        )
    return bool(actual == wanted)


def _apply(actual: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(actual == operand)
    if operator == "$ne":
        return bool(actual != operand)
    if operator not in _COMPARISONS:
        raise ValueError(
            f"filter: unknown operator {operator!r} (use $eq, $ne, $gt, $gte, $lt or $lte)"
        )
    if not _comparable(actual, operand):
        return False
    if operator == "$gt":
        return bool(actual > operand)
    if operator == "$gte":
        return bool(actual >= operand)
    if operator == "$lt":
        return bool(actual < operand)
    return bool(actual <= operand)


def _comparable(actual: Any, operand: Any) -> bool:
    def number(field: Any) -> bool:
        return isinstance(field, int | float) and not isinstance(field, bool)

    return (number(actual) and number(operand)) or (
        isinstance(actual, str) and isinstance(operand, str)
    )
