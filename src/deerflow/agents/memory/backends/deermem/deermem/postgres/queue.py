"""DeerMem's durable write queue in PostgreSQL, shared by every replica of a deployment.

The semantics are those of the SQLite queue (`pipeline/queue.py`): a key (thread, user, agent)
has at most one pending normal item whose turns are stored in chunks; `extend` appends after the
key's cursor, `put` replaces the pending turns with those after the watermark (a put arriving
while the item is processed keeps its newer turns, trimmed by the watermark the processing
sets); `put_now` items are due at once, whole, beside the normal item; an item is due
`debounce_seconds` after its last put but no later than `max_wait_seconds` after its first; a
failed extraction is due again after `retry_delay`; only the `watermark_max_keys` most recently
advanced watermarks are kept (65,536 by default here, against 4,096 per host: a shared queue
serves more threads, and a forgotten watermark costs a whole conversation's extraction);
`max_depth` refuses new keys without signals (`QueueFullError`).
What differs is who shares it: any number of processes on any number of hosts.

Clock. Every time (puts, due times, leases) is the database's `now()`, the start of the
transaction that writes it, so replicas whose clocks disagree still debounce and lease alike.
`QueueItem` times are those timestamps in epoch seconds.

Claims. Each queue object runs one worker thread that claims the first due item nobody holds
with `SELECT … FOR UPDATE SKIP LOCKED` (so replicas never wait for one another), writes
`claimed_by` (its random instance id, with host and pid for an operator's eyes) and
`claimed_until` (now + `lease_seconds`), commits, and calls `process` outside any transaction.
While `process` runs, the claim is renewed every third of the lease; no other replica takes the
item until the lease has run out, so a live replica keeps its item however long the LLM takes,
while a crashed replica's item is taken by another one `lease_seconds` after its last renewal.
Finishing deletes the processed chunks and advances the watermark in one transaction, keeping
the turns a replacing `put` (seen by its `generation`) or an `extend` added meanwhile. Writes
that touch a key's turns or watermark (put, extend, finishing a normal item) take a transaction
advisory lock on the key first, so they apply in some order, as on SQLite's single writer. An
idle worker looks for due items every `poll_seconds`; a put on this object that is due sooner
wakes it at once. `flush` drains the whole shared queue, not only this object's puts.

Delivery is at least once, with deduplication by the apply step. `process` is called once per
due item across all replicas, except when the replica calling it dies (or loses the database
for a whole lease) after `process` committed its result and before the queue's finishing
transaction: the item is then processed again, by whichever replica claims it once the lease
has expired, with the same turns, signals and first put time. (A replica dying before that
commit merely leaves the item to another one.) Exactly once would need the
extraction's commit and the queue's in one transaction, which the engine seam does not offer
(the storage is a part of its own); instead the write pipeline's apply step merges an exact
repeat into the fact already stored, so a repeated extraction adds no fact.

Durability is PostgreSQL's: `put` returns after its transaction committed. Broken rows (turns
that are not a JSON list of objects, a key that is not a `[thread, user, agent]` list) raise
`MemoryCorruptionError` from `pending` and `flush`; the worker logs them and goes on with the
other items, leaving the row for an operator.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import socket
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import (
    Claim,
    QueueFullError,
    QueueItem,
    QueueKey,
    flush_claims,
    retry_delay,
    turns_after,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.queue_rows import (
    ITEM_SQL,
    BrokenItemError,
    append_chunk,
    check_put,
    checked_signals,
    item_turns,
    key_text,
    last_turn,
    one_row,
    read_item,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.schema import migrate

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

    from deerflow.agents.memory.backends.deermem.deermem.engine import QueueSettings

__all__ = ["MIGRATIONS", "PostgresQueue"]

logger = logging.getLogger(__name__)

_JOIN_S: Final = 5.0
_FLUSH_WAIT_S: Final = 0.02  # between looks at an item another replica is processing

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        "CREATE TABLE queue_items (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " key text NOT NULL, user_id text NOT NULL, agent_name text, urgent boolean NOT NULL,"
        " signals text[] NOT NULL, trace_id text, attempts integer NOT NULL DEFAULT 0,"
        " generation integer NOT NULL DEFAULT 0, first_at timestamptz NOT NULL,"
        " last_at timestamptz NOT NULL, due_at timestamptz NOT NULL, claimed_by text,"
        " claimed_until timestamptz)",
        "CREATE UNIQUE INDEX queue_items_normal ON queue_items (key) WHERE NOT urgent",
        "CREATE INDEX queue_items_due ON queue_items (due_at, id)",
        "CREATE INDEX queue_items_scope ON queue_items (user_id, agent_name)",
        # `seq` grows with each chunk; appends to one item are serialised by its key's lock, so
        # the chunks appended while an item is processed are those above the last one it got.
        "CREATE TABLE queue_chunks (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " item_id bigint NOT NULL REFERENCES queue_items (id) ON DELETE CASCADE,"
        " turns text NOT NULL, last_turn text NOT NULL)",
        "CREATE INDEX queue_chunks_item ON queue_chunks (item_id, seq)",
        "CREATE TABLE queue_watermarks (key text PRIMARY KEY, user_id text NOT NULL,"
        " agent_name text, mark text NOT NULL, used_at timestamptz NOT NULL)",
        "CREATE INDEX queue_watermarks_used ON queue_watermarks (used_at)",
        "CREATE INDEX queue_watermarks_scope ON queue_watermarks (user_id, agent_name)",
    ),
)
"""Schema versions of the queue's tables (part "queue" of `schema_versions`)."""

_FREE: Final = "(claimed_by IS NULL OR claimed_until < now())"
_SECONDS: Final = "%s * interval '1 second'"


class PostgresQueue:
    """A debounced, durable queue of conversations awaiting extraction, shared by replicas."""

    def __init__(
        self,
        pool: ConnectionPool,
        settings: QueueSettings,
        *,
        lease_seconds: float = 600.0,
        poll_seconds: float = 1.0,
        watermark_max_keys: int = 65536,
        start: bool = True,
    ) -> None:
        """Migrate the queue's tables in the pool's schema; with `start`, run the worker.

        Items left by replicas that stopped are processed when due (overdue ones at once).

        Args:
            pool: connections whose `search_path` starts with the engine's schema.
            settings: `process`, `identity`, debounce, maximum wait and depth.
            lease_seconds: how long a claim holds without renewal: a crashed replica's item is
                taken by another one this long after its last renewal.
            poll_seconds: how often an idle worker looks for items other replicas put.
            watermark_max_keys: how many keys keep a watermark (0: all); trimmed every
                1/1024th of it advances, so each queue object may exceed it by that much.
            start: run the worker; without it, only `run_due` and `flush` process items.

        Raises:
            ValueError: a negative setting, or a lease or poll interval that is not positive.
            MemoryCorruptionError: the schema holds a newer version of the queue's tables.
        """
        numbers = {
            "debounce_seconds": settings.debounce_seconds,
            "max_wait_seconds": settings.max_wait_seconds,
            "max_depth": settings.max_depth,
            "watermark_max_keys": watermark_max_keys,
        }
        if min(numbers.values()) < 0:
            raise ValueError(f"queue settings must not be negative, got {numbers}")
        if not (lease_seconds > 0 and poll_seconds > 0):
            raise ValueError(
                f"lease_seconds and poll_seconds must be positive, got {lease_seconds},"
                f" {poll_seconds}"
            )
        self._pool = pool
        self._settings = settings
        self._lease = lease_seconds
        self._poll = poll_seconds
        self._max_marks = watermark_max_keys
        # Trimming reads `watermark_max_keys` index entries: often enough to overshoot the
        # cap by a thousandth, rarely enough to cost a finish little (docs/decisions.md).
        self._trim_every = max(1, watermark_max_keys // 1024)
        self._advances = 0
        self._instance = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        self._busy = threading.Lock()  # one `process` call at a time per queue object
        self._wake = threading.Condition()
        self._poked = False
        self._stopping = False
        self._broken: set[int] = set()  # rows the worker found unreadable and leaves alone
        with pool.connection() as conn:
            self._schema = _first_schema(conn)
            migrate(conn, self._schema, "queue", MIGRATIONS)
        self._worker: threading.Thread | None = None
        if start:
            self._worker = threading.Thread(target=self._work, name="deermem-queue", daemon=True)
            self._worker.start()

    # -- puts --------------------------------------------------------------------------------

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
            ValueError: a key, turn, signal or trace id that cannot be queued.
            QueueFullError: `key` has no pending item, `signals` is empty and the queue is full.
        """
        wanted = checked_signals(signals)
        check_put(key, turns, trace_id)
        with self._transaction() as conn:
            self._lock_key(conn, key)
            mark = conn.execute(
                "SELECT mark FROM queue_watermarks WHERE key = %s", (key_text(key),)
            ).fetchone()
            fresh = turns_after(turns, None if mark is None else mark[0], self._settings.identity)
            wait = self._enqueue(conn, key, fresh, wanted, trace_id, replace=True)
        self._poke_if_due(wait)

    def extend(
        self,
        key: QueueKey,
        turns: list[dict[str, Any]],
        *,
        after: str,
        trace_id: str | None = None,
    ) -> bool:
        """Commit `turns`, the ones that follow the turn `after` in the conversation of `key`,
        if `after` is still the key's `cursor`; otherwise write nothing and return False.

        Raises:
            ValueError: a key, turn or trace id that cannot be queued.
            QueueFullError: `key` has no pending item and the queue is full.
        """
        check_put(key, turns, trace_id)
        with self._transaction() as conn:
            self._lock_key(conn, key)
            if self._cursor(conn, key) != after:
                return False
            wait = self._enqueue(conn, key, turns, set(), trace_id, replace=False)
        self._poke_if_due(wait)
        return True

    def cursor(self, key: QueueKey) -> str | None:
        """The identity of the last turn of `key` queued, else extracted; None for neither."""
        with self._transaction() as conn:
            return self._cursor(conn, key)

    def put_now(
        self,
        key: QueueKey,
        turns: list[dict[str, Any]],
        *,
        signals: Iterable[str] = (),
        trace_id: str | None = None,
    ) -> None:
        """Commit `turns` for processing at once, whole, beside any pending normal item.

        Raises:
            ValueError: a key, turn, signal or trace id that cannot be queued.
        """
        wanted = checked_signals(signals)
        check_put(key, turns, trace_id)
        with self._transaction() as conn:
            item_id = self._insert(conn, key, wanted, trace_id, urgent=True)
            append_chunk(conn, item_id, turns)
        self._poke()

    # -- reading and dropping ----------------------------------------------------------------

    def pending(self) -> list[QueueItem]:
        """Every item not yet processed (including those being processed), in due order.

        Raises:
            MemoryCorruptionError: a row cannot be read.
        """
        with self._transaction() as conn:
            rows = conn.execute(f"{ITEM_SQL} ORDER BY due_at, id").fetchall()
            return [read_item(conn, row)[0] for row in rows]

    def cancel_pending(
        self, *, user_id: str, agent_name: str | None = None, all_agents: bool = False
    ) -> int:
        """Drop the items and watermarks of one agent of a user (or of all its agents).

        An item being processed at that moment still completes; its result is not undone.
        """
        where = (
            "user_id = %s" if all_agents else "user_id = %s AND agent_name IS NOT DISTINCT FROM %s"
        )
        params = (user_id,) if all_agents else (user_id, agent_name)
        with self._transaction() as conn:
            dropped = conn.execute(f"DELETE FROM queue_items WHERE {where}", params).rowcount
            conn.execute(f"DELETE FROM queue_watermarks WHERE {where}", params)
        return dropped

    # -- processing --------------------------------------------------------------------------

    def run_due(self) -> int:
        """Process the items due now, one by one; what the worker runs. Rows that cannot be
        read are logged and left alone.

        Returns:
            The number of items handed to `process`, including failed ones.
        """
        done = 0
        while not self._stopping:
            with self._busy:
                try:
                    claim = self._claim(due_only=True, skip=self._broken)
                except BrokenItemError as exc:
                    logger.error("memory write queue %s: %s", self._schema, exc)
                    self._broken.add(exc.row_id)
                    continue
                if claim is None:
                    return done
                self._run(claim)
            done += 1
        return done

    def flush(self, timeout: float) -> bool:
        """Process every pending item of the shared queue now, due or not, each at most once
        per call; wait for items other replicas hold, until `timeout` (seconds).

        Returns:
            True when the queue is empty at the end.

        Raises:
            MemoryCorruptionError: a row cannot be read (it stays for an operator).
        """
        return flush_claims(
            timeout,
            self._busy,
            lambda failed: self._claim(due_only=False, skip=failed),
            self._run,
            self._item_ids,
            wait=_FLUSH_WAIT_S,
        )

    def close(self) -> None:
        """Stop the worker, waiting a few seconds for its current item; items stay queued.

        The pool is the engine's: it stays open.
        """
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._worker is not None:
            self._worker.join(_JOIN_S)

    # -- inside ------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Connection[tuple[Any, ...]]]:
        with self._pool.connection() as conn, conn.transaction():
            yield conn

    def _lock_key(self, conn: Connection[tuple[Any, ...]], key: QueueKey) -> None:
        """Serialise this transaction with every other one writing the turns of `key`."""
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_id(key_text(key)),))

    def _lock_id(self, name: str) -> int:
        """The advisory lock number of `name` in this schema (locks span the database)."""
        digest = hashlib.blake2b(f"{self._schema}\n{name}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    def _enqueue(
        self,
        conn: Connection[tuple[Any, ...]],
        key: QueueKey,
        turns: list[dict[str, Any]],
        signals: set[str],
        trace_id: str | None,
        *,
        replace: bool,
    ) -> float | None:
        """Add `turns` to the pending normal item of `key`, or start one with them (with
        `replace`, in place of its turns). Returns the seconds until the item is due, or None
        when there was nothing to queue."""
        settings = self._settings
        row = conn.execute(
            "SELECT id, signals FROM queue_items WHERE key = %s AND NOT urgent FOR UPDATE",
            (key_text(key),),
        ).fetchone()
        if row is None:
            if not turns:
                return None  # nothing after the watermark: nothing to extract
            self._admit(conn, signals=bool(signals))
            item_id = self._insert(conn, key, signals, trace_id, urgent=False)
            wait = min(settings.debounce_seconds, settings.max_wait_seconds)
        else:
            item_id, known = row
            (wait,) = one_row(
                conn,
                "UPDATE queue_items SET signals = %s, trace_id = coalesce(%s, trace_id),"
                f" last_at = now(), due_at = least(now() + {_SECONDS}, first_at + {_SECONDS}),"
                " generation = generation + %s WHERE id = %s"
                " RETURNING extract(epoch FROM due_at - now())::float8",
                (
                    sorted(signals.union(known)),
                    trace_id,
                    settings.debounce_seconds,
                    settings.max_wait_seconds,
                    int(replace),
                    item_id,
                ),
            )
            if replace:
                conn.execute("DELETE FROM queue_chunks WHERE item_id = %s", (item_id,))
        append_chunk(conn, item_id, turns)
        return float(wait)

    def _insert(
        self,
        conn: Connection[tuple[Any, ...]],
        key: QueueKey,
        signals: set[str],
        trace_id: str | None,
        *,
        urgent: bool,
    ) -> int:
        """A new item without turns, due at once when urgent; its id."""
        delay = (
            0.0 if urgent else min(self._settings.debounce_seconds, self._settings.max_wait_seconds)
        )
        (item_id,) = one_row(
            conn,
            "INSERT INTO queue_items (key, user_id, agent_name, urgent, signals, trace_id,"
            f" first_at, last_at, due_at) VALUES (%s, %s, %s, %s, %s, %s, now(), now(),"
            f" now() + {_SECONDS}) RETURNING id",
            (
                key_text(key),
                key.user_id,
                key.agent_name,
                urgent,
                sorted(signals),
                trace_id,
                delay,
            ),
        )
        return int(item_id)

    def _admit(self, conn: Connection[tuple[Any, ...]], *, signals: bool) -> None:
        """Refuse a new key when the queue is full, unless the conversation carries signals.

        New keys take turns on one lock for this, so replicas admitting at once never push the
        queue past `max_depth`.
        """
        max_depth = self._settings.max_depth
        if max_depth and not signals:
            # `key` is JSON, so the name "admission" is no key's.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_id("admission"),))
            (depth,) = one_row(conn, "SELECT count(*) FROM queue_items", ())
            if depth >= max_depth:
                raise QueueFullError(
                    f"memory write queue (schema {self._schema}) holds {depth} items"
                    f" (queue_max_depth {max_depth})"
                )

    def _cursor(self, conn: Connection[tuple[Any, ...]], key: QueueKey) -> str | None:
        text = key_text(key)
        last = conn.execute(
            "SELECT c.item_id, c.last_turn FROM queue_items AS i JOIN queue_chunks AS c"
            " ON c.item_id = i.id WHERE i.key = %s AND NOT i.urgent ORDER BY c.seq DESC LIMIT 1",
            (text,),
        ).fetchone()
        if last is not None:
            return self._settings.identity(last_turn(last[0], last[1]))
        mark = conn.execute("SELECT mark FROM queue_watermarks WHERE key = %s", (text,)).fetchone()
        return None if mark is None else str(mark[0])

    def _poke_if_due(self, wait: float | None) -> None:
        if wait is not None and wait < self._poll:
            self._poke()  # otherwise the worker's next poll comes first

    def _poke(self) -> None:
        with self._wake:
            self._poked = True
            self._wake.notify_all()

    def _claim(self, *, due_only: bool, skip: set[int]) -> Claim | None:
        """Take the first item (due now, with `due_only`) that nobody holds, dropping items
        with nothing new; None when there is none."""
        due = "due_at <= now() AND " if due_only else ""
        with self._transaction() as conn:
            while True:
                row = conn.execute(
                    f"{ITEM_SQL} WHERE {due}{_FREE} AND NOT (id = ANY(%s))"
                    " ORDER BY due_at, id LIMIT 1 FOR UPDATE SKIP LOCKED",
                    (sorted(skip),),
                ).fetchone()
                if row is None:
                    return None
                item, last_seq = read_item(conn, row)
                if item.turns:
                    break
                logger.debug("memory write queue: nothing new for %s, dropped", item.key)
                conn.execute("DELETE FROM queue_items WHERE id = %s", (row[0],))
            conn.execute(
                f"UPDATE queue_items SET claimed_by = %s, claimed_until = now() + {_SECONDS}"
                " WHERE id = %s",
                (self._instance, self._lease, row[0]),
            )
        return Claim(row[0], row[1], last_seq, item)

    def _run(self, claim: Claim) -> bool:
        """Call `process` on a claimed item, renewing its lease, and record the outcome;
        False when it raised."""
        try:
            with self._leased(claim.row_id):
                self._settings.process(claim.item)
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

    @contextmanager
    def _leased(self, row_id: int) -> Iterator[None]:
        """Renew the claim on `row_id` every third of the lease until the block ends."""
        done = threading.Event()

        def renew() -> None:
            while not done.wait(self._lease / 3):
                try:
                    with self._transaction() as conn:
                        held = conn.execute(
                            f"UPDATE queue_items SET claimed_until = now() + {_SECONDS}"
                            " WHERE id = %s AND claimed_by = %s",
                            (self._lease, row_id, self._instance),
                        ).rowcount
                except Exception:
                    logger.warning("memory write queue: renewing a lease failed", exc_info=True)
                    continue
                if not held:
                    return  # finished meanwhile, cancelled, or taken after a lapse

        renewer = threading.Thread(target=renew, name="deermem-queue-lease", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            done.set()
            renewer.join()

    def _finish(self, claim: Claim, *, ok: bool) -> None:
        settings = self._settings
        with self._transaction() as conn:
            if not ok:
                delay = retry_delay(
                    settings.debounce_seconds, settings.max_wait_seconds, claim.item.attempts
                )
                conn.execute(
                    "UPDATE queue_items SET attempts = attempts + 1,"
                    f" due_at = greatest(due_at, now() + {_SECONDS}), claimed_by = NULL,"
                    " claimed_until = NULL WHERE id = %s AND claimed_by = %s",
                    (delay, claim.row_id, self._instance),
                )
                return
            if not claim.item.urgent:
                self._lock_key(conn, claim.item.key)
            row = conn.execute(
                "SELECT generation FROM queue_items WHERE id = %s FOR UPDATE", (claim.row_id,)
            ).fetchone()
            if row is None:
                return  # cancelled meanwhile (its agent is going): no watermark then
            mark = settings.identity(claim.item.turns[-1])
            if row[0] == claim.generation:
                # Chunks appended meanwhile come after the processed ones: they stay.
                conn.execute(
                    "DELETE FROM queue_chunks WHERE item_id = %s AND seq <= %s",
                    (claim.row_id, claim.last_seq),
                )
            else:
                # A put replaced the turns meanwhile, with those after the old watermark.
                self._trim(conn, claim.row_id, mark)
            if conn.execute(
                "SELECT 1 FROM queue_chunks WHERE item_id = %s LIMIT 1", (claim.row_id,)
            ).fetchone():
                conn.execute(
                    "UPDATE queue_items SET claimed_by = NULL, claimed_until = NULL"
                    " WHERE id = %s AND claimed_by = %s",
                    (claim.row_id, self._instance),
                )
            else:
                conn.execute("DELETE FROM queue_items WHERE id = %s", (claim.row_id,))
            if not claim.item.urgent:
                self._advance(conn, claim.item.key, mark)

    def _trim(self, conn: Connection[tuple[Any, ...]], item_id: int, mark: str) -> None:
        """Keep only the turns of an item after the watermark `mark`, as one chunk."""
        turns = item_turns(conn, item_id)[0]
        kept = turns_after(turns, mark, self._settings.identity)
        if len(kept) < len(turns):
            conn.execute("DELETE FROM queue_chunks WHERE item_id = %s", (item_id,))
            append_chunk(conn, item_id, kept)

    def _advance(self, conn: Connection[tuple[Any, ...]], key: QueueKey, mark: str) -> None:
        conn.execute(
            "INSERT INTO queue_watermarks (key, user_id, agent_name, mark, used_at)"
            " VALUES (%s, %s, %s, %s, now()) ON CONFLICT (key)"
            " DO UPDATE SET mark = excluded.mark, used_at = excluded.used_at",
            (key_text(key), key.user_id, key.agent_name, mark),
        )
        self._advances += 1
        if not self._max_marks or self._advances % self._trim_every:
            return
        # One replica at a time trims (another one finishing meanwhile leaves it to the next
        # finish): two deleting the same rows in different orders could deadlock.
        (trimming,) = one_row(
            conn, "SELECT pg_try_advisory_xact_lock(%s)", (self._lock_id("watermarks"),)
        )
        if trimming:
            conn.execute(
                "DELETE FROM queue_watermarks WHERE key IN (SELECT key FROM queue_watermarks"
                " ORDER BY used_at DESC OFFSET %s)",
                (self._max_marks,),
            )

    def _item_ids(self) -> set[int]:
        with self._transaction() as conn:
            return {int(row[0]) for row in conn.execute("SELECT id FROM queue_items")}

    def _work(self) -> None:
        while not self._stopping:
            try:
                wait = self._next_due()
                if wait <= 0:
                    self.run_due()
                    continue
            except Exception:
                logger.exception("memory write queue %s: worker error", self._schema)
                wait = self._poll
            with self._wake:
                if not (self._poked or self._stopping):
                    self._wake.wait(min(wait, self._poll))
                self._poked = False

    def _next_due(self) -> float:
        """Seconds until the first item nobody holds (and not known broken) is due."""
        with self._transaction() as conn:
            (wait,) = one_row(
                conn,
                "SELECT extract(epoch FROM min(due_at) - now())::float8 FROM queue_items"
                f" WHERE {_FREE} AND NOT (id = ANY(%s))",
                (sorted(self._broken),),
            )
        return math.inf if wait is None else float(wait)


def _first_schema(conn: Connection[tuple[Any, ...]]) -> str:
    """The schema the pool's connections write to: the first of their `search_path`."""
    (path,) = one_row(conn, "SHOW search_path", ())
    return str(path).split(",")[0].strip().strip('"')
