"""DeerMem's durable write queue (docs/data-format.md, "The queue database").

`add()` hands the conversation to `DurableQueue.put`, which commits it to a SQLite journal
(`{root}/.queue/pending.sqlite3`) and returns; a daemon worker later calls `process` (the LLM
extraction) for each item once it is due, one item at a time, in due order.

Items. A key (thread, user, agent) has at most one pending normal item. Its turns are stored in
chunks, one row per call that added some, so that a turn is serialised and written once: `extend`
appends the turns that follow the key's cursor (the last turn queued, or else the watermark) and
writes nothing else, which keeps a put of a long thread as cheap as one of a short thread. `put`
hands the whole conversation instead and replaces the pending turns with those after the watermark
(latest conversation wins), even while that item is being processed: the newer turns then stay,
trimmed by the watermark the processing sets. Signals are unioned and the first put's time is kept
either way. `put_now` items (the emergency flush before summarisation drops messages) are due at
once, carry their turns whole, and neither replace nor are replaced by a normal item. A chunk also
keeps its last turn apart, so that finding the cursor does not parse a chunk that holds a whole
thread.

Schedule. A normal item is due `debounce_seconds` after its last put, but no later than
`max_wait_seconds` after its first, so constant chatter cannot starve it. Due times are stored,
so `clock` must be one that every process and every restart agrees on: the wall clock
(`time.time`). `time.monotonic` restarts at boot and would strand items recovered after a
reboot; a wall-clock step merely moves extractions earlier or later by the step.

Watermark. When a normal item has been processed, the chunks it was given are deleted and its
key's watermark becomes the identity of its last turn. `put` keeps only the turns after the FIRST
turn with that identity (a text repeated without a message id then re-sends a few turns rather
than skipping some), or every turn when none has it (the conversation was compacted); so does the
end of a processing whose item `put` replaced meanwhile. An item with nothing new is dropped
without calling `process`. Only the `watermark_max_keys` most recently advanced keys are kept; a
forgotten key re-sends its whole conversation once, which extraction deduplicates.

Durability. `put` commits before it returns. The journal runs in WAL mode with
`synchronous=NORMAL`: a commit has reached the OS when `put` returns, so killing the process
loses nothing, while power loss or a kernel crash may lose the puts since the last checkpoint
(the file stays consistent). `fsync=True` (`synchronous=FULL`) makes each put survive power loss
too, at the price of one fsync per put (`benchmarks/queue_probe.py` measures both).

Checkpoints are the worker's, so that no `put` waits for one: auto-checkpoint is off on the
connection puts use, and the worker runs a PASSIVE checkpoint (which neither blocks nor waits
for puts) on a connection of its own each time it is about to sleep: about once a second while
idle, and once the items due have been processed. While idle, the puts a power loss may take
(those since the last checkpoint) are then about a second's worth, not SQLite's default of up to
1,000 WAL pages. Without a worker (`start=False`) SQLite's default applies.

Delivery is at least once. An item is deleted, and its watermark advanced, in one transaction
after `process` returns; a crash during `process`, or before that commit, processes it again at
the next start, so the caller's apply step must be idempotent. If `process` raises, the item is
kept with `attempts + 1` and is due again `debounce * 2**attempts` seconds later (`attempts`
before this failure; capped at `max_wait_seconds` but never under 1 s, since each retry is an
LLM call): a failing extraction is retried, never dropped.

Processes. Several processes on one host (WAL needs shared memory, so the file cannot live on a
network file system anyway) may share the journal, e.g. a CLI and a server. A worker claims an
item in a write transaction: `claimed_by` (pid and a random instance id) plus a ten-minute lease.
No one else takes the item until the claim is released, the lease expires or the claimant has
gone; a `process` call outliving its lease may run twice. Each queue object holds an exclusive
`flock` on its own file `{journal}.owners/{instance id}.lock` for as long as it is open, and a
claimant is alive exactly while that lock is held: the kernel releases it when the process dies,
so a process restarted with its predecessor's pid (PID 1 in a container) takes the
predecessor's claims at once. (A claim written before instance files existed is judged by its
pid: alive while a process of that pid other than this one runs.) Within a process, the worker
and `flush` take turns on one lock, so `process` is never called concurrently.
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

from deerflow.agents.memory.backends.deermem.deermem.core.atomic import process_alive
from deerflow.agents.memory.backends.deermem.deermem.core.sqlite import (
    apply_migrations,
    immediate_transaction,
)
from deerflow.agents.memory.manager import MemoryCorruptionError, MemoryManagerError

__all__ = [
    "Claim",
    "DurableQueue",
    "QueueFullError",
    "QueueItem",
    "QueueKey",
    "flush_claims",
    "retry_delay",
    "turns_after",
]

logger = logging.getLogger(__name__)

_BUSY_TIMEOUT_S: Final = 30.0
_LEASE_S: Final = 600.0
# How often an idle worker looks for items it was not told about (other processes' puts).
_POLL_S: Final = 1.0
# Retries never come faster than this, even with `debounce_seconds=0`.
_MIN_RETRY_S: Final = 1.0
_JOIN_S: Final = 5.0
_CORRUPTION_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        # `generation` grows with every replacing put: finishing an item that was replaced while
        # it was being processed must keep the newer conversation.
        "CREATE TABLE items (id INTEGER PRIMARY KEY, key TEXT NOT NULL, user_id TEXT NOT NULL,"
        " agent_name TEXT, urgent INTEGER NOT NULL, turns TEXT NOT NULL, signals TEXT NOT NULL,"
        " trace_id TEXT, attempts INTEGER NOT NULL DEFAULT 0,"
        " generation INTEGER NOT NULL DEFAULT 0, first_at REAL NOT NULL, last_at REAL NOT NULL,"
        " due_at REAL NOT NULL, claimed_by TEXT, claimed_until REAL)",
        "CREATE UNIQUE INDEX items_normal ON items (key) WHERE NOT urgent",
        "CREATE INDEX items_due ON items (due_at)",
        "CREATE INDEX items_claimed ON items (claimed_until) WHERE claimed_by IS NOT NULL",
        "CREATE TABLE watermarks (key TEXT PRIMARY KEY, user_id TEXT NOT NULL, agent_name TEXT,"
        " mark TEXT NOT NULL, used_at REAL NOT NULL) WITHOUT ROWID",
        "CREATE INDEX watermarks_used ON watermarks (used_at)",
    ),
    (
        # An item's turns (a JSON list per chunk) are those of its chunks in `seq` order. `seq`
        # only grows while the chunks an extraction was given exist, so the ones appended
        # meanwhile are exactly those above the highest `seq` it read.
        "CREATE TABLE chunks (seq INTEGER PRIMARY KEY, item_id INTEGER NOT NULL,"
        " turns TEXT NOT NULL)",
        "CREATE INDEX chunks_item ON chunks (item_id, seq)",
        "INSERT INTO chunks (item_id, turns) SELECT id, turns FROM items ORDER BY id",
        "ALTER TABLE items DROP COLUMN turns",
    ),
    (
        # A chunk's last turn on its own: the key's cursor, read by every `add()` of a thread,
        # without parsing a first put's chunk, which holds the whole thread.
        "ALTER TABLE chunks ADD COLUMN last_turn TEXT",
        "UPDATE chunks SET last_turn = json_extract(turns, '$[#-1]')",
    ),
)
"""Schema versions; `MIGRATIONS[i]` takes the journal from version i to i + 1."""

# Nobody holds the item: never claimed, lease run out, or claimant dead (params: now, orphans).
_FREE: Final = (
    "(i.claimed_by IS NULL OR i.claimed_until < ? OR i.id IN (SELECT value FROM json_each(?)))"
)
_ITEM_SQL: Final = (
    "SELECT i.id, i.generation, i.key, i.urgent, i.signals, i.trace_id, i.attempts, i.first_at,"
    " i.last_at, i.due_at FROM items AS i"
)
_CHUNKS_SQL: Final = "SELECT seq, turns FROM chunks WHERE item_id = ? ORDER BY seq"
_CLAIMANTS_SQL: Final = "SELECT DISTINCT claimed_by FROM items WHERE claimed_by IS NOT NULL"


class QueueFullError(MemoryManagerError):
    """The queue holds `max_depth` items, so a conversation of a new key was refused.

    Nothing is lost for good: the next turn of that thread hands the whole conversation again.
    """


class QueueKey(NamedTuple):
    """The conversation an item belongs to; a tuple, so hashable, and JSON as a 3-item list."""

    thread_id: str
    user_id: str
    agent_name: str | None = None


@dataclass(frozen=True, slots=True)
class QueueItem:
    """One pending extraction. Times are in the queue's clock (epoch seconds by default).

    `turns` of a normal item are only those after its key's watermark; `signals` are sorted.
    """

    key: QueueKey
    turns: list[dict[str, Any]]
    signals: list[str]
    trace_id: str | None
    urgent: bool
    attempts: int
    first_enqueued_at: float
    last_enqueued_at: float
    due_at: float


@dataclass(frozen=True, slots=True)
class Claim:
    """An item a worker holds: its row, the claim's generation, and what it hands to `process`."""

    row_id: int
    generation: int
    last_seq: int  # the highest chunk handed to `process`
    item: QueueItem


class DurableQueue:
    """A debounced, durable, multi-process queue of conversations awaiting extraction."""

    def __init__(
        self,
        path: Path,
        *,
        process: Callable[[QueueItem], None],
        identity: Callable[[dict[str, Any]], str],
        debounce_seconds: float = 30.0,
        max_wait_seconds: float = 120.0,
        max_depth: int = 0,
        watermark_max_keys: int = 4096,
        fsync: bool = False,
        clock: Callable[[], float] = time.time,
        start: bool = True,
    ) -> None:
        """Open or create the journal at `path`; with `start`, run the worker thread.

        Items left by an earlier process are processed when due (overdue ones at once).

        Args:
            path: the SQLite journal, e.g. `{root}/.queue/pending.sqlite3`.
            process: extracts one item; raising keeps the item for a retry.
            identity: a stable identity of a turn (its message id, else kind and text).
            debounce_seconds: quiet time after a key's last put before it is processed.
            max_wait_seconds: the longest a normal item waits after its first put.
            max_depth: with a positive value, the most items before new keys are refused.
            watermark_max_keys: how many keys keep a watermark (0: all).
            fsync: fsync every commit, so puts survive power loss as well as a process kill.
            clock: the time in seconds, shared by all processes using `path` (see above).
            start: run the worker; without it, only `run_due` and `flush` process items.

        Raises:
            ValueError: a negative setting.
            MemoryCorruptionError: `path` exists but is not a readable SQLite database.
        """
        settings = (debounce_seconds, max_wait_seconds, max_depth, watermark_max_keys)
        if min(settings) < 0:
            raise ValueError(f"queue settings must not be negative, got {settings}")
        self.path = path
        self._process = process
        self._identity = identity
        self._debounce = debounce_seconds
        self._max_wait = max_wait_seconds
        self._max_depth = max_depth
        self._max_marks = watermark_max_keys
        self._clock = clock
        self._instance = uuid.uuid4().hex
        self._token = f"{os.getpid()}:{self._instance}"
        self._owners = path.with_name(f"{path.name}.owners")
        self._lock = threading.Lock()  # the connection
        self._busy = threading.Lock()  # one `process` call at a time
        self._wake = threading.Condition()
        self._poked = False
        self._stopping = False
        path.parent.mkdir(parents=True, exist_ok=True)
        # Held before anything is claimed under the token, and while the journal is open.
        self._liveness: int | None = _hold_liveness(self._owners, self._instance)
        synchronous = f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}"
        self._conn = _connect(path)
        # The worker's own connection, for checkpoints: in WAL mode they run beside a put
        # instead of inside the put that crosses the WAL's size threshold.
        self._checkpointer: sqlite3.Connection | None = None
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(synchronous)
            with self._write() as conn:
                apply_migrations(conn, MIGRATIONS)
                claimants = {row[0] for row in conn.execute(_CLAIMANTS_SQL)}
            _sweep_owners(self._owners, claimants)
            if start:
                self._conn.execute("PRAGMA wal_autocheckpoint=0")
                self._checkpointer = _connect(path)
                self._checkpointer.execute(synchronous)
        except sqlite3.DatabaseError as exc:
            self._close_connection()
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _CORRUPTION_CODES:
                raise MemoryCorruptionError(
                    f"write queue {path} is unreadable ({exc}); moving it aside starts an empty "
                    "queue, and the conversations it held are then never extracted"
                ) from exc
            raise
        self._worker: threading.Thread | None = None
        if start:
            self._worker = threading.Thread(target=self._work, name="deermem-queue", daemon=True)
            self._worker.start()

    def put(
        self,
        key: QueueKey,
        turns: list[dict[str, Any]],
        *,
        signals: Iterable[str] = (),
        trace_id: str | None = None,
    ) -> None:
        """Commit the latest conversation of `key`, replacing the turns of its pending item.

        A conversation with no turn after the watermark, and no pending item, is ignored.

        Raises:
            QueueFullError: `key` has no pending item, `signals` is empty and the queue is full.
        """
        now = self._clock()
        key_text = json.dumps(key)
        with self._write() as conn:
            mark = conn.execute("SELECT mark FROM watermarks WHERE key = ?", (key_text,)).fetchone()
            fresh = turns_after(turns, None if mark is None else mark[0], self._identity)
            due = self._enqueue(conn, key, fresh, set(signals), trace_id, now=now, replace=True)
        self._poke_if_due(due, now)

    def extend(
        self,
        key: QueueKey,
        turns: list[dict[str, Any]],
        *,
        after: str,
        trace_id: str | None = None,
    ) -> bool:
        """Commit `turns`, the ones that follow the turn `after` in the conversation of `key`.

        They are appended to its pending item (or start one) if `after` is still the key's
        `cursor`; otherwise nothing is written, and the caller puts the whole conversation.

        Returns:
            False when `after` is not the key's cursor (any more).

        Raises:
            QueueFullError: `key` has no pending item and the queue is full.
        """
        now = self._clock()
        key_text = json.dumps(key)
        with self._write() as conn:
            if self._cursor(conn, key_text) != after:
                return False
            due = self._enqueue(conn, key, turns, set(), trace_id, now=now, replace=False)
        self._poke_if_due(due, now)
        return True

    def cursor(self, key: QueueKey) -> str | None:
        """The identity of the last turn of `key` queued, else extracted: where `extend` goes on.

        None when the key has neither a pending turn nor a watermark.
        """
        with self._lock:
            return self._cursor(self._conn, json.dumps(key))

    def put_now(
        self,
        key: QueueKey,
        turns: list[dict[str, Any]],
        *,
        signals: Iterable[str] = (),
        trace_id: str | None = None,
    ) -> None:
        """Commit `turns` for processing at once, whole, beside any pending normal item.

        It is always admitted, and neither reads nor advances the key's watermark.
        """
        now = self._clock()
        with self._write() as conn:
            item_id = _insert(conn, key, set(signals), trace_id, now=now, due=now, urgent=True)
            _append(conn, item_id, turns)
        self._poke()

    def pending(self) -> list[QueueItem]:
        """Every item not yet processed (including one being processed), in due order."""
        with self._lock:
            rows = self._conn.execute(f"{_ITEM_SQL} ORDER BY i.due_at, i.id").fetchall()
            return [self._item(self._conn, row)[0] for row in rows]

    def cancel_pending(
        self, *, user_id: str, agent_name: str | None = None, all_agents: bool = False
    ) -> int:
        """Drop the items and watermarks of one agent of a user (or of all its agents).

        An item being processed at that moment still completes; its result is not undone.

        Returns:
            The number of items dropped.
        """
        where = "user_id = ?" if all_agents else "user_id = ? AND agent_name IS ?"
        params = (user_id,) if all_agents else (user_id, agent_name)
        with self._write() as conn:
            conn.execute(
                f"DELETE FROM chunks WHERE item_id IN (SELECT id FROM items WHERE {where})", params
            )
            dropped = conn.execute(f"DELETE FROM items WHERE {where}", params).rowcount
            conn.execute(f"DELETE FROM watermarks WHERE {where}", params)
        return dropped

    def run_due(self) -> int:
        """Process the items due now, one by one; what the worker runs.

        Returns:
            The number of items handed to `process`, including failed ones.
        """
        done = 0
        while not self._stopping:
            with self._busy:
                claim = self._claim(self._clock(), set())
                if claim is None:
                    return done
                self._run(claim)
            done += 1
        return done

    def flush(self, timeout: float) -> bool:
        """Process every pending item now, due or not, each at most once per call.

        Waits for an item another thread or process is processing, until `timeout` (seconds).

        Returns:
            True when the queue is empty at the end.
        """
        return flush_claims(
            timeout,
            self._busy,
            lambda failed: self._claim(math.inf, failed),
            self._run,
            self._item_ids,
            wait=0.01,
        )

    def close(self) -> None:
        """Stop the worker, waiting a few seconds for its current item; items stay journaled."""
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._worker is not None:
            self._worker.join(_JOIN_S)
        if self._worker is None or not self._worker.is_alive():
            self._close_connection()
        # Otherwise the worker closes the connection once its `process` call returns.

    def _admit(self, conn: sqlite3.Connection, *, signals: bool) -> None:
        """Refuse a new key when the queue is full, unless the conversation carries signals."""
        if self._max_depth and not signals:
            (depth,) = conn.execute("SELECT count(*) FROM items").fetchone()
            if depth >= self._max_depth:
                raise QueueFullError(
                    f"memory write queue {self.path} holds {depth} items"
                    f" (queue_max_depth {self._max_depth})"
                )

    def _enqueue(
        self,
        conn: sqlite3.Connection,
        key: QueueKey,
        turns: list[dict[str, Any]],
        signals: set[str],
        trace_id: str | None,
        *,
        now: float,
        replace: bool,
    ) -> float | None:
        """Add `turns` to the pending normal item of `key`, or start one with them.

        With `replace`, they take the place of the item's turns. Returns the item's due time, or
        None when there was nothing to queue.
        """
        row = conn.execute(
            "SELECT id, signals, first_at FROM items WHERE key = ? AND NOT urgent",
            (json.dumps(key),),
        ).fetchone()
        if row is None:
            if not turns:
                return None  # nothing after the watermark: nothing to extract
            self._admit(conn, signals=bool(signals))
            due = now + min(self._debounce, self._max_wait)
            item_id = _insert(conn, key, signals, trace_id, now=now, due=due, urgent=False)
        else:
            item_id, known, first = row
            due = min(now + self._debounce, first + self._max_wait)
            conn.execute(
                "UPDATE items SET signals = ?, trace_id = coalesce(?, trace_id), last_at = ?,"
                " due_at = ?, generation = generation + ? WHERE id = ?",
                (
                    json.dumps(sorted(signals.union(json.loads(known)))),
                    trace_id,
                    now,
                    due,
                    int(replace),
                    item_id,
                ),
            )
            if replace:
                conn.execute("DELETE FROM chunks WHERE item_id = ?", (item_id,))
        _append(conn, item_id, turns)
        return due

    def _cursor(self, conn: sqlite3.Connection, key_text: str) -> str | None:
        # A chunk written by a process that predates `last_turn` has none: SQLite then picks
        # the last turn out of the whole chunk.
        last = conn.execute(
            "SELECT coalesce(c.last_turn, json_extract(c.turns, '$[#-1]')) FROM items AS i"
            " JOIN chunks AS c ON c.item_id = i.id WHERE i.key = ? AND NOT i.urgent"
            " ORDER BY c.seq DESC LIMIT 1",
            (key_text,),
        ).fetchone()
        if last is not None:
            return self._identity(json.loads(last[0]))
        mark = conn.execute("SELECT mark FROM watermarks WHERE key = ?", (key_text,)).fetchone()
        return None if mark is None else str(mark[0])

    def _poke_if_due(self, due: float | None, now: float) -> None:
        if due is not None and due - now < _POLL_S:
            # Otherwise the worker's next poll comes first: waking it now would only make it
            # compete with the caller for the connection and the GIL.
            self._poke()

    def _claim(self, due_by: float, skip: set[int]) -> Claim | None:
        """Take the first item due by `due_by` that nobody holds, dropping ones with no news."""
        now = self._clock()
        with self._write() as conn:
            orphans = self._orphans(conn, now)
            while True:
                row = conn.execute(
                    f"{_ITEM_SQL} WHERE i.due_at <= ? AND i.id NOT IN (SELECT value FROM"
                    f" json_each(?)) AND {_FREE} ORDER BY i.due_at, i.id LIMIT 1",
                    (due_by, json.dumps(sorted(skip)), now, orphans),
                ).fetchone()
                if row is None:
                    return None
                item, last_seq = self._item(conn, row)
                if item.turns:
                    break
                logger.debug("memory write queue: nothing new for %s, dropped", item.key)
                conn.execute("DELETE FROM items WHERE id = ?", (row[0],))
            conn.execute(
                "UPDATE items SET claimed_by = ?, claimed_until = ? WHERE id = ?",
                (self._token, now + _LEASE_S, row[0]),
            )
        return Claim(row[0], row[1], last_seq, item)

    def _run(self, claim: Claim) -> bool:
        """Call `process` on a claimed item and record the outcome; False when it raised."""
        try:
            self._process(claim.item)
        except Exception:
            logger.warning(
                "memory write queue: processing %s failed (attempt %d); it stays queued",
                claim.item.key,
                claim.item.attempts + 1,
                exc_info=True,
            )
            self._finish(claim, ok=False)
            return False
        self._finish(claim, ok=True)
        return True

    def _finish(self, claim: Claim, *, ok: bool) -> None:
        now = self._clock()
        with self._write() as conn:
            if not ok:
                delay = retry_delay(self._debounce, self._max_wait, claim.item.attempts)
                conn.execute(
                    "UPDATE items SET attempts = attempts + 1, due_at = max(due_at, ?),"
                    " claimed_by = NULL, claimed_until = NULL WHERE id = ? AND claimed_by = ?",
                    (now + delay, claim.row_id, self._token),
                )
                return
            row = conn.execute(
                "SELECT generation FROM items WHERE id = ?", (claim.row_id,)
            ).fetchone()
            if row is None:
                return  # cancelled meanwhile (its agent is going): no watermark then
            mark = self._identity(claim.item.turns[-1])
            if row[0] == claim.generation:
                # Chunks appended meanwhile come after the processed ones: they stay.
                conn.execute(
                    "DELETE FROM chunks WHERE item_id = ? AND seq <= ?",
                    (claim.row_id, claim.last_seq),
                )
            else:
                # A put replaced the turns meanwhile, with those after the old watermark.
                self._trim(conn, claim.row_id, mark)
            if conn.execute("SELECT 1 FROM chunks WHERE item_id = ?", (claim.row_id,)).fetchone():
                conn.execute(
                    "UPDATE items SET claimed_by = NULL, claimed_until = NULL"
                    " WHERE id = ? AND claimed_by = ?",
                    (claim.row_id, self._token),
                )
            else:
                conn.execute("DELETE FROM items WHERE id = ?", (claim.row_id,))
            if not claim.item.urgent:
                self._advance(conn, claim.item.key, mark, now)

    def _trim(self, conn: sqlite3.Connection, item_id: int, mark: str) -> None:
        """Keep only the turns of an item after the watermark `mark`, as one chunk."""
        chunks = conn.execute(_CHUNKS_SQL, (item_id,)).fetchall()
        turns = [turn for _, text in chunks for turn in json.loads(text)]
        kept = turns_after(turns, mark, self._identity)
        if len(kept) < len(turns):
            conn.execute("DELETE FROM chunks WHERE item_id = ?", (item_id,))
            _append(conn, item_id, kept)

    def _advance(self, conn: sqlite3.Connection, key: QueueKey, mark: str, now: float) -> None:
        conn.execute(
            "INSERT INTO watermarks (key, user_id, agent_name, mark, used_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (key)"
            " DO UPDATE SET mark = excluded.mark, used_at = excluded.used_at",
            (json.dumps(key), key.user_id, key.agent_name, mark, now),
        )
        if self._max_marks:
            conn.execute(
                "DELETE FROM watermarks WHERE key IN"
                " (SELECT key FROM watermarks ORDER BY used_at DESC LIMIT -1 OFFSET ?)",
                (self._max_marks,),
            )

    def _item(self, conn: sqlite3.Connection, row: tuple[Any, ...]) -> tuple[QueueItem, int]:
        """A row of `_ITEM_SQL` as an item with its chunks' turns; also its last chunk's `seq`."""
        item_id, _, key_text, urgent, signals, trace_id, attempts, first, last, due = row
        chunks = conn.execute(_CHUNKS_SQL, (item_id,)).fetchall()
        item = QueueItem(
            key=QueueKey(*json.loads(key_text)),
            turns=[turn for _, text in chunks for turn in json.loads(text)],
            signals=json.loads(signals),
            trace_id=trace_id,
            urgent=bool(urgent),
            attempts=attempts,
            first_enqueued_at=first,
            last_enqueued_at=last,
            due_at=due,
        )
        return item, chunks[-1][0] if chunks else 0

    def _item_ids(self) -> set[int]:
        with self._lock:
            return {row[0] for row in self._conn.execute("SELECT id FROM items")}

    def _work(self) -> None:
        try:
            while not self._stopping:
                try:
                    wait = self._next_due() - self._clock()
                    if wait <= 0:
                        self.run_due()
                        continue
                    self._checkpoint()
                except Exception:
                    logger.exception("memory write queue %s: worker error", self.path)
                    wait = _POLL_S
                with self._wake:
                    if not (self._poked or self._stopping):
                        self._wake.wait(min(wait, _POLL_S))
                    self._poked = False
        finally:
            if self._stopping:
                self._close_connection()

    def _next_due(self) -> float:
        """When the first item nobody holds is due (read only: no write lock per wake-up)."""
        now = self._clock()
        with self._lock:
            (due,) = self._conn.execute(
                f"SELECT min(i.due_at) FROM items AS i WHERE {_FREE}",
                (now, self._orphans(self._conn, now)),
            ).fetchone()
        return math.inf if due is None else float(due)

    def _checkpoint(self) -> None:
        """Copy the WAL's committed pages into the journal file, syncing both (the worker's job).

        PASSIVE: it neither waits for nor blocks puts; pages a reader still needs stay for the
        next one. Nothing new in the WAL makes it a no-op.
        """
        assert self._checkpointer is not None, "only the worker checkpoints"
        self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _poke(self) -> None:
        with self._wake:
            self._poked = True
            self._wake.notify_all()

    def _orphans(self, conn: sqlite3.Connection, now: float) -> str:
        """The ids (a JSON list) of items whose claim is unexpired but whose claimant has gone.

        Live leases are few (one per working queue object), so their claimants are checked
        here, in Python, once per distinct claimant.
        """
        held = conn.execute(
            "SELECT id, claimed_by FROM items WHERE claimed_by IS NOT NULL AND claimed_until >= ?",
            (now,),
        ).fetchall()
        alive = {self._token: True}
        for _, owner in held:
            if owner not in alive:
                alive[owner] = _claimant_alive(owner, self._owners)
        return json.dumps([row_id for row_id, owner in held if not alive[owner]])

    def _close_connection(self) -> None:
        with self._lock:
            self._conn.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
        if self._liveness is not None:  # a second close finds it released
            # Nothing is claimed under the token any more: the file goes, then the lock.
            (self._owners / f"{self._instance}.lock").unlink(missing_ok=True)
            os.close(self._liveness)
            self._liveness = None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on this object's connection (see `immediate_transaction`)."""
        with self._lock, immediate_transaction(self._conn) as conn:
            yield conn


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(
        path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )


def _insert(
    conn: sqlite3.Connection,
    key: QueueKey,
    signals: set[str],
    trace_id: str | None,
    *,
    now: float,
    due: float,
    urgent: bool,
) -> int:
    """A new item without turns; its id."""
    scope = (json.dumps(key), key.user_id, key.agent_name, urgent)
    payload = (json.dumps(sorted(signals)), trace_id, now, now, due)
    cursor = conn.execute(
        "INSERT INTO items (key, user_id, agent_name, urgent, signals, trace_id,"
        " first_at, last_at, due_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        scope + payload,
    )
    assert cursor.lastrowid is not None, "an INSERT sets lastrowid"
    return cursor.lastrowid


def _append(conn: sqlite3.Connection, item_id: int, turns: list[dict[str, Any]]) -> None:
    """Store `turns` as the item's newest chunk (none when there are no turns)."""
    if turns:
        conn.execute(
            "INSERT INTO chunks (item_id, turns, last_turn) VALUES (?, ?, ?)",
            (
                item_id,
                json.dumps(turns, ensure_ascii=False),
                json.dumps(turns[-1], ensure_ascii=False),
            ),
        )


def flush_claims(
    timeout: float,
    busy: threading.Lock,
    claim: Callable[[set[int]], Claim | None],
    run: Callable[[Claim], bool],
    item_ids: Callable[[], set[int]],
    *,
    wait: float,
) -> bool:
    """A queue's `flush`: claim (`claim(failed)`, due or not, skipping the rows in `failed`)
    and `run` every item under `busy`, each at most once, until none is left or `timeout`
    (seconds) passes; an item held elsewhere is looked at again every `wait` seconds.

    Returns:
        True when the queue (`item_ids`) is empty at the end.
    """
    deadline = time.monotonic() + timeout
    failed: set[int] = set()
    while (remaining := deadline - time.monotonic()) > 0:
        if not busy.acquire(timeout=remaining):
            break
        try:
            claimed = claim(failed)
            if claimed is not None and not run(claimed):
                failed.add(claimed.row_id)
        finally:
            busy.release()
        if claimed is None:
            left = item_ids()
            if left <= failed:
                return not left
            time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
    return not item_ids()


def turns_after(
    turns: list[dict[str, Any]], mark: str | None, identity: Callable[[dict[str, Any]], str]
) -> list[dict[str, Any]]:
    """The turns after the first one whose identity is `mark`; all of them if none is."""
    if mark is not None:
        for index, turn in enumerate(turns):
            if identity(turn) == mark:
                return turns[index + 1 :]
    return turns


def retry_delay(debounce: float, max_wait: float, attempts: int) -> float:
    """Seconds until an item whose extraction failed after `attempts` earlier failures is due
    again: `debounce * 2**attempts`, capped at `max_wait` but never under one second."""
    return max(_MIN_RETRY_S, min(max_wait, debounce * 2.0 ** min(attempts, 20)))


def _hold_liveness(owners: Path, instance: str) -> int:
    """Create `owners/{instance}.lock` already locked (made and locked under a temporary name,
    then renamed: no one ever sees it unlocked while its owner lives); the descriptor to keep."""
    owners.mkdir(exist_ok=True)
    temporary = owners / f".{instance}.tmp"
    fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(temporary, owners / f"{instance}.lock")
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    return fd


def _claimant_alive(owner: str, owners: Path) -> bool:
    """Whether the queue object that wrote the claim `owner` ("pid:instance") is still open."""
    pid, _, instance = owner.partition(":")
    held = _held(owners / f"{instance}.lock") if instance.isalnum() else None
    if held is None:  # a claim from before instance files: by its pid, never this process's
        return pid.isdigit() and int(pid) != os.getpid() and process_alive(int(pid))
    return held


def _held(path: Path) -> bool | None:
    """Whether a live process holds the `flock` of `path`; None when there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # which also releases a lock taken
    return False


def _sweep_owners(owners: Path, claimants: set[str]) -> None:
    """Remove the instance files of queue objects that are gone and hold no claim."""
    claiming = {owner.partition(":")[2] for owner in claimants}
    for entry in os.scandir(owners):
        gone = entry.name.endswith(".lock") and _held(Path(entry.path)) is False
        if gone and entry.name.removesuffix(".lock") not in claiming:
            Path(entry.path).unlink(missing_ok=True)
