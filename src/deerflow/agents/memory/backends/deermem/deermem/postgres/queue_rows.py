"""How the PostgreSQL queue's rows are written and read back: what a put may hold, and the
checks that turn a row DeerMem cannot read into `MemoryCorruptionError` naming the item."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import QueueItem, QueueKey
from deerflow.agents.memory.manager import MemoryCorruptionError

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = [
    "ITEM_SQL",
    "BrokenItemError",
    "append_chunk",
    "check_put",
    "checked_signals",
    "item_turns",
    "key_text",
    "last_turn",
    "one_row",
    "read_item",
]

ITEM_SQL: Final = (  # the columns `read_item` reads
    "SELECT id, generation, key, urgent, signals, trace_id, attempts,"
    " extract(epoch FROM first_at)::float8, extract(epoch FROM last_at)::float8,"
    " extract(epoch FROM due_at)::float8 FROM queue_items"
)


class BrokenItemError(MemoryCorruptionError):
    """An item whose row cannot be read; `row_id` says which."""

    def __init__(self, row_id: int, message: str) -> None:
        super().__init__(f"write queue item {row_id}: {message}; fix or delete the row")
        self.row_id = row_id


def one_row(
    conn: Connection[tuple[Any, ...]], query: str, params: tuple[Any, ...]
) -> tuple[Any, ...]:
    """The row of a query that always gives one (an aggregate, RETURNING of one row)."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, "an aggregate or RETURNING gives one row"
    return row


def key_text(key: QueueKey) -> str:
    """The `key` column: the JSON list `[thread_id, user_id, agent_name]`."""
    return json.dumps(list(key), ensure_ascii=False)


def check_put(key: QueueKey, turns: list[dict[str, Any]], trace_id: str | None) -> None:
    """Refuse what PostgreSQL cannot store or a worker could not read back."""
    thread_id, user_id, agent_name = key
    named = {"thread_id": thread_id, "user_id": user_id, "agent_name": agent_name}
    for name, value in {**named, "trace_id": trace_id}.items():
        if not (isinstance(value, str) or (value is None and name in {"agent_name", "trace_id"})):
            raise ValueError(f"queue {name} must be a string, got {type(value).__name__}")
        if value is not None and "\x00" in value:
            raise ValueError(f"queue {name} must not contain NUL characters")
    if not isinstance(turns, list) or not all(isinstance(turn, dict) for turn in turns):
        raise ValueError("queue turns must be a list of JSON objects")


def checked_signals(signals: Iterable[str]) -> set[str]:
    """The signals of a put as a set, each a string PostgreSQL can store."""
    wanted = set(signals)
    for signal in wanted:
        if not isinstance(signal, str) or "\x00" in signal:
            raise ValueError(f"queue signals must be strings without NUL, got {signal!r}")
    return wanted


def append_chunk(
    conn: Connection[tuple[Any, ...]], item_id: int, turns: list[dict[str, Any]]
) -> None:
    """Store `turns` as the item's newest chunk (none when there are no turns).

    Raises:
        ValueError: a turn that is not JSON (e.g. holds bytes or a non-finite number).
    """
    if turns:
        try:
            text = json.dumps(turns, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"queue turns must be JSON: {exc}") from None
        conn.execute(
            "INSERT INTO queue_chunks (item_id, turns, last_turn) VALUES (%s, %s, %s)",
            (item_id, text, json.dumps(turns[-1], ensure_ascii=False, allow_nan=False)),
        )


def _chunk_list(item_id: int, text: str) -> list[dict[str, Any]]:
    """A chunk's turns, checked."""
    turns = _parsed(item_id, text, "turns")
    if not isinstance(turns, list) or not all(isinstance(turn, dict) for turn in turns):
        raise BrokenItemError(item_id, "turns are not a JSON list of objects")
    return turns


def last_turn(item_id: int, text: str) -> dict[str, Any]:
    """A chunk's last turn, checked."""
    turn = _parsed(item_id, text, "last_turn")
    if not isinstance(turn, dict):
        raise BrokenItemError(item_id, "last_turn is not a JSON object")
    return turn


def _parsed(item_id: int, text: str, column: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BrokenItemError(item_id, f"column {column} is not JSON ({exc})") from None


def item_turns(conn: Connection[tuple[Any, ...]], item_id: int) -> tuple[list[dict[str, Any]], int]:
    """The turns of an item's chunks in order, and the `seq` of its last chunk (0: none)."""
    chunks = conn.execute(
        "SELECT seq, turns FROM queue_chunks WHERE item_id = %s ORDER BY seq", (item_id,)
    ).fetchall()
    turns = [turn for _, text in chunks for turn in _chunk_list(item_id, text)]
    return turns, int(chunks[-1][0]) if chunks else 0


def read_item(conn: Connection[tuple[Any, ...]], row: tuple[Any, ...]) -> tuple[QueueItem, int]:
    """A row of `ITEM_SQL` as an item with its chunks' turns; also its last chunk's `seq`."""
    item_id, _, stored_key, urgent, signals, trace_id, attempts, first, last, due = row
    parts = _parsed(item_id, stored_key, "key")
    if not (
        isinstance(parts, list)
        and len(parts) == 3
        and all(isinstance(part, str) for part in parts[:2])
        and (parts[2] is None or isinstance(parts[2], str))
    ):
        raise BrokenItemError(item_id, f"key {stored_key!r} is not a [thread, user, agent] list")
    turns, last_seq = item_turns(conn, item_id)
    item = QueueItem(
        key=QueueKey(*parts),
        turns=turns,
        signals=sorted(signals),
        trace_id=trace_id,
        urgent=urgent,
        attempts=attempts,
        first_enqueued_at=first,
        last_enqueued_at=last,
        due_at=due,
    )
    return item, last_seq
