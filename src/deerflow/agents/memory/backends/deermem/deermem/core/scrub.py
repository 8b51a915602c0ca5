"""Secret scrubbing: content that looks like a credential is never stored.

`find_secret` (the contract's detector, `deerflow.agents.memory.secret_detector`) names the kind
of secret it sees, or returns None; `refuse_secrets` turns that into the `ValueError` a write path
raises, and the `fact_…` helpers apply it to every text of a fact record.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.core.factfile import FRONT_MATTER_ORDER
from deerflow.agents.memory.manager import find_secret, refuse_secrets

__all__ = ["fact_secret", "find_secret", "refuse_fact_secrets", "refuse_secrets"]


# The text a fact record carries besides its id, times and provenance: a secret in
# a correction's `sourceError` reaches the prompt just as one in its content does.
_FACT_TEXT_FIELDS: Final = ("content", "sourceError", "event_time")
# The fact file format's keys; any other key (a legacy or hand-written one) is scanned, with its
# name, so that `password: ...` is seen. The known ones other than the texts above and `topics`
# hold ids, times, numbers or provenance.
_KNOWN: Final = frozenset({*FRONT_MATTER_ORDER, "content"})


def _fact_texts(fact: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, text) for every text of a fact record that could hold a secret."""
    for key in _FACT_TEXT_FIELDS:
        value = fact.get(key)
        if isinstance(value, str):
            yield key, value
    topics = fact.get("topics")
    if isinstance(topics, list):
        for number, topic in enumerate(topics):
            if isinstance(topic, str):
                yield f"topics[{number}]", topic
    for key, value in fact.items():
        if key not in _KNOWN:
            yield str(key), str(key)
            yield from _named_texts(str(key), str(key), value)


def _named_texts(field: str, key: str, value: Any) -> Iterator[tuple[str, str]]:
    """The texts in an unknown key's value, each as `key: text`, and the nested keys' names."""
    if isinstance(value, str):
        yield field, f"{key}: {value}"
    elif isinstance(value, Mapping):
        for inner, item in value.items():
            yield f"{field}.{inner}", str(inner)
            yield from _named_texts(f"{field}.{inner}", str(inner), item)
    elif isinstance(value, list):
        for number, item in enumerate(value):
            yield from _named_texts(f"{field}[{number}]", key, item)


def fact_secret(fact: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first field of a fact record that seems to hold a credential, and why; or None."""
    for field, text in _fact_texts(fact):
        reason = find_secret(text)
        if reason is not None:
            return field, reason
    return None


def refuse_fact_secrets(fact: Mapping[str, Any], *, where: str = "") -> None:
    """`refuse_secrets` for every text of a fact record (`where` prefixes the field's name).

    Raises:
        ValueError: `"{where}{field}: refused, {reason}; ..."` for the first such field.
    """
    for field, text in _fact_texts(fact):
        refuse_secrets(text, field=f"{where}{field}")
