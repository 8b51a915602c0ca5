"""The durable write queue: debounce, watermark, urgent items, back-pressure, crashes, processes.

The behaviours of the public API run on both kinds of queue (`queues`: SQLite and PostgreSQL);
what is SQLite's own (its journal file, checkpoints, instance files) uses `make_queue`. The
PostgreSQL queue's replicas are in tests/postgres/test_queue.py.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from deerflow.agents.memory.backends.deermem.deermem.config import parse_config
from deerflow.agents.memory.backends.deermem.deermem.core.sqlite import apply_migrations
from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import (
    MIGRATIONS,
    DurableQueue,
    QueueFullError,
    QueueItem,
    QueueKey,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.queue import PostgresQueue
from deerflow.agents.memory.manager import MemoryCorruptionError, MemoryManagerError
from tests.deermem.queue_child import conversation, identity
from tests.postgres.queue_kind import PostgresQueues
from tests.postgres_server import postgres_backend_config

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
KEY = QueueKey("t1", "alice")
OTHER = QueueKey("t2", "alice")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Recorder:
    """A `process` callback that keeps the items; it can fail or block on request."""

    def __init__(self) -> None:
        self.items: list[QueueItem] = []
        self.failures = 0
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.called = threading.Event()

    def __call__(self, item: QueueItem) -> None:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the model is down")
        self.items.append(item)
        self.called.set()

    def threads(self) -> list[str]:
        return [item.key.thread_id for item in self.items]


MakeQueue = Callable[..., DurableQueue]


class SqliteQueues:
    """`DurableQueue`s on one journal: by default the fake clock and no worker; with a worker
    (`start=True`), the wall clock."""

    def __init__(self, journal: Path, process: Recorder, clock: FakeClock) -> None:
        self.journal = journal
        self.clock = clock
        self._process = process
        self._queues: list[DurableQueue] = []

    def make(self, *, start: bool = False, **options: Any) -> DurableQueue:
        settings: dict[str, Any] = {
            "process": self._process,
            "identity": identity,
            "clock": time.time if start else self.clock,
            "start": start,
        }
        self._queues.append(DurableQueue(self.journal, **(settings | options)))
        return self._queues[-1]

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def now(self) -> float:
        return self.clock.now

    def close(self) -> None:
        for queue in self._queues:
            queue.close()


Queues = SqliteQueues | PostgresQueues
Queue = DurableQueue | PostgresQueue


def settle(queue: Queue, count: int) -> None:
    """Wait until `count` items are left: `process` returns a moment before the item is deleted."""
    deadline = time.monotonic() + 10
    while len(queue.pending()) != count:
        assert time.monotonic() < deadline, queue.pending()
        time.sleep(0.005)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / ".queue" / "pending.sqlite3"


@pytest.fixture
def sqlite_queues(journal: Path, recorder: Recorder, clock: FakeClock) -> Iterator[SqliteQueues]:
    """Queues on `journal`, closed after the test."""
    queues = SqliteQueues(journal, recorder, clock)
    yield queues
    queues.close()


@pytest.fixture
def make_queue(sqlite_queues: SqliteQueues) -> MakeQueue:
    """A SQLite queue on `journal`; by default a fake clock and no worker."""
    return sqlite_queues.make


@pytest.fixture(params=["sqlite", "postgres"])
def queues(request: pytest.FixtureRequest, recorder: Recorder, tmp_path: Path) -> Iterator[Queues]:
    """Either kind of queue, for the behaviours both keep (PostgreSQL in a fresh schema)."""
    if request.param == "sqlite":
        yield request.getfixturevalue("sqlite_queues")
        return
    config = parse_config(
        postgres_backend_config(request.getfixturevalue("postgres_url"), tmp_path)
    )
    made = PostgresQueues(config, recorder)
    yield made
    made.close()


def real_time(**options: Any) -> dict[str, Any]:
    return {"clock": time.time, "start": True, **options}


def test_puts_within_the_window_become_one_item_with_the_latest_turns(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make()
    queue.put(KEY, conversation(2), signals=["preference"], trace_id="run-1")
    queues.advance(10)
    queue.put(KEY, conversation(4), signals=["correction"], trace_id="run-2")
    queue.put(OTHER, conversation(2))
    assert queue.run_due() == 0
    queues.advance(30)
    assert queue.run_due() == 2
    assert recorder.threads() == ["t1", "t2"]
    item = recorder.items[0]
    assert item.turns == conversation(4)
    assert item.signals == ["correction", "preference"]
    assert item.trace_id == "run-2"
    # A database's clock also runs while the test does.
    assert item.last_enqueued_at - item.first_enqueued_at == pytest.approx(10, abs=0.5)
    assert not item.urgent
    assert queue.pending() == []


def test_debounce_is_trailing_but_capped_by_the_maximum_wait(
    queues: Queues,
) -> None:
    queue = queues.make(debounce_seconds=30, max_wait_seconds=120)
    queue.put(KEY, conversation(2))
    (item,) = queue.pending()
    assert item.due_at - item.first_enqueued_at == 30
    for _ in range(5):
        queues.advance(20)
        queue.put(KEY, conversation(2))
    (item,) = queue.pending()
    assert item.due_at - item.first_enqueued_at == 120
    queues.advance(19.5)  # 119.5 s after the first put (and the test's own time on a database)
    assert queue.run_due() == 0
    queues.advance(0.5)
    assert queue.run_due() == 1


def test_continuous_chatter_is_processed_within_the_maximum_wait(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make(start=True, debounce_seconds=0.1, max_wait_seconds=0.3)
    processed_while_chatting = False
    for n in range(25):  # a put every 50 ms for 1.25 s, never 0.1 s of quiet
        queue.put(KEY, conversation(2 * n + 2))
        time.sleep(0.05)
        processed_while_chatting = processed_while_chatting or bool(recorder.items)
    assert processed_while_chatting


def test_the_watermark_sends_only_turns_after_the_last_extraction(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make()
    queue.put(KEY, conversation(4))
    assert queue.flush(5)
    queue.put(KEY, conversation(7))
    assert queue.pending()[0].turns == conversation(7)[4:]
    assert queue.flush(5)
    assert [item.turns for item in recorder.items] == [conversation(4), conversation(7)[4:]]


def test_a_200_turn_thread_extended_turn_by_turn_sends_each_turn_once(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make()
    thread = conversation(200)
    assert queue.cursor(KEY) is None
    queue.put(KEY, thread[:2])
    for n in range(2, 200):
        assert queue.cursor(KEY) == f"m{n - 1}"  # the last turn queued, or else extracted
        assert queue.extend(KEY, [thread[n]], after=f"m{n - 1}")
        if n % 37 == 0:
            assert queue.flush(5)  # an extraction now and then moves the watermark
    assert queue.flush(5)
    assert len(recorder.items) == 6
    assert [turn for item in recorder.items for turn in item.turns] == thread
    assert queue.cursor(KEY) == "m199"


def test_extend_after_a_turn_that_is_not_the_last_queued_writes_nothing(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make(max_depth=1)
    queue.put(KEY, conversation(4))
    assert not queue.extend(KEY, conversation(6)[3:], after="m2")  # another add came first
    assert queue.pending()[0].turns == conversation(4)
    assert queue.flush(5)
    queue.put(OTHER, conversation(2))
    with pytest.raises(QueueFullError):
        queue.extend(KEY, conversation(6)[4:], after="m3")  # a new item, like a new key's put
    assert queue.cancel_pending(user_id="alice") == 1
    assert queue.cursor(KEY) is None  # the watermark went with the agent
    assert not queue.extend(KEY, conversation(6)[4:], after="m3")


def four_turns_in_process(queues: Queues, recorder: Recorder) -> Queue:
    """A queue whose worker is inside `process` with KEY's four turns, held until the gate."""
    queue = queues.make(start=True, debounce_seconds=0.0)
    recorder.gate = threading.Event()
    queue.put(KEY, conversation(4))
    assert recorder.entered.wait(10)
    return queue


def test_turns_appended_while_their_key_is_processed_are_processed_next_alone(
    queues: Queues, recorder: Recorder
) -> None:
    queue = four_turns_in_process(queues, recorder)
    assert queue.extend(KEY, conversation(6)[4:], after="m3")
    recorder.gate.set()
    assert recorder.called.wait(10)
    assert queue.flush(10)
    assert [item.turns for item in recorder.items] == [conversation(4), conversation(6)[4:]]


def test_a_compacted_conversation_is_sent_whole(queues: Queues, recorder: Recorder) -> None:
    queue = queues.make()
    queue.put(KEY, conversation(4))
    assert queue.flush(5)
    compacted = [{"id": "summary", "role": "user", "text": "earlier: ..."}, *conversation(7)[5:]]
    queue.put(KEY, compacted)
    assert queue.flush(5)
    assert recorder.items[-1].turns == compacted


def test_a_conversation_with_nothing_new_is_not_queued(queues: Queues, recorder: Recorder) -> None:
    queue = queues.make()
    queue.put(KEY, conversation(4))
    assert queue.flush(5)
    queue.put(KEY, conversation(4), signals=["goal"])
    assert queue.pending() == []
    assert len(recorder.items) == 1


def test_put_now_is_processed_at_once_beside_the_pending_item_and_its_watermark(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make(start=True, debounce_seconds=60)
    queue.put(KEY, conversation(4), signals=["goal"])
    queue.put_now(KEY, conversation(2), trace_id="summarise")
    assert recorder.called.wait(10)
    settle(queue, 1)
    urgent = recorder.items[0]
    assert (urgent.urgent, urgent.turns, urgent.trace_id) == (True, conversation(2), "summarise")
    (normal,) = queue.pending()
    assert (normal.urgent, normal.turns, normal.signals) == (False, conversation(4), ["goal"])
    # An urgent item is neither replaced by nor replaces the normal one, and moves no watermark.
    queue.close()
    queue = queues.make()
    queue.put_now(KEY, conversation(1))
    queue.put(KEY, conversation(6))
    assert sorted(item.urgent for item in queue.pending()) == [False, True]
    assert queue.flush(5)
    assert [(item.urgent, len(item.turns)) for item in recorder.items[1:]] == [
        (True, 1),
        (False, 6),
    ]


def test_back_pressure_refuses_new_keys_only(queues: Queues) -> None:
    queue = queues.make(max_depth=2)
    queue.put(KEY, conversation(2))
    queue.put(OTHER, conversation(2))
    with pytest.raises(QueueFullError, match="queue_max_depth 2") as refused:
        queue.put(QueueKey("t3", "alice"), conversation(2))
    assert isinstance(refused.value, MemoryManagerError)
    queue.put(KEY, conversation(4))  # replacing is always allowed
    queue.put(QueueKey("t3", "alice"), conversation(2), signals=["correction"])
    queue.put_now(QueueKey("t4", "alice"), conversation(2))
    assert sorted(item.key.thread_id for item in queue.pending()) == ["t1", "t2", "t3", "t4"]


def test_cancel_pending_drops_one_agent_or_all_agents_of_a_user(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make()
    coder = QueueKey("t1", "alice", "coder")
    queue.put(coder, conversation(2))
    assert queue.flush(5)  # gives coder's thread a watermark
    keys = [
        QueueKey("t1", "alice"),
        coder,
        QueueKey("t2", "alice", "coder"),
        QueueKey("t1", "alice", "writer"),
        QueueKey("t1", "bob", "coder"),
    ]
    for key in keys:
        queue.put(key, conversation(4))
    queue.put_now(coder, conversation(1))
    assert queue.cancel_pending(user_id="alice", agent_name="coder") == 3
    assert queue.cancel_pending(user_id="alice") == 1  # the default bucket
    assert [item.key for item in queue.pending()] == [keys[3], keys[4]]
    assert queue.cancel_pending(user_id="alice", all_agents=True) == 1
    assert [item.key for item in queue.pending()] == [keys[4]]
    queue.put(coder, conversation(4))  # its watermark went with the agent
    assert queue.pending()[0].turns == conversation(4)


def test_a_failing_extraction_is_retried_later_and_never_lost(
    queues: Queues, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    queue = queues.make(debounce_seconds=30, max_wait_seconds=120)
    recorder.failures = 4
    queue.put(KEY, conversation(2))
    delays = []
    for attempts in range(1, 5):
        queues.advance(1000)
        with caplog.at_level(logging.WARNING):
            assert queue.run_due() == 1
        (item,) = queue.pending()
        assert item.attempts == attempts
        delays.append(round(item.due_at - queues.now()))
    assert delays == [30, 60, 120, 120]  # doubling from the debounce, capped by the max wait
    assert "failed (attempt 4)" in caplog.text
    queues.advance(119)
    assert queue.run_due() == 0
    queue.put(KEY, conversation(4))  # a newer conversation replaces it as usual
    queues.advance(30)
    assert queue.run_due() == 1
    assert [item.turns for item in recorder.items] == [conversation(4)]
    assert queue.pending() == []


def test_a_failing_extraction_is_retried_by_the_worker(queues: Queues, recorder: Recorder) -> None:
    queue = queues.make(start=True, debounce_seconds=0.05, max_wait_seconds=0.3)
    recorder.failures = 1
    queue.put(KEY, conversation(2))
    assert recorder.called.wait(10)  # after the 1 s floor between retries
    assert recorder.items[0].attempts == 1


def test_flush_processes_everything_within_its_timeout(queues: Queues, recorder: Recorder) -> None:
    queue = queues.make(start=True, debounce_seconds=60)
    for n in range(5):
        queue.put(QueueKey(f"t{n}", "alice"), conversation(2))
    assert queue.flush(10)
    assert sorted(recorder.threads()) == [f"t{n}" for n in range(5)]
    recorder.failures = 1
    queue.put(KEY, conversation(4))
    assert not queue.flush(10)  # it failed once in this flush; no hot retry loop
    assert queue.flush(10)


def test_flush_waits_for_the_workers_item_and_gives_up_at_its_timeout(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make(start=True, debounce_seconds=60)
    recorder.gate = threading.Event()
    queue.put_now(KEY, conversation(2))
    queue.put(OTHER, conversation(2))
    assert recorder.entered.wait(10)  # the worker is inside `process`
    assert not queue.flush(0.2)
    threading.Timer(0.2, recorder.gate.set).start()
    assert queue.flush(10)
    assert sorted(recorder.threads()) == ["t1", "t2"]


def test_a_put_while_its_key_is_processed_keeps_the_newer_turns(
    queues: Queues, recorder: Recorder
) -> None:
    queue = four_turns_in_process(queues, recorder)
    queue.put(KEY, conversation(6), signals=["goal"])
    recorder.gate.set()
    assert recorder.called.wait(10)
    assert queue.flush(10)
    assert [item.turns for item in recorder.items] == [conversation(4), conversation(6)[4:]]


def test_a_replacement_with_nothing_new_is_dropped_without_processing(
    queues: Queues, recorder: Recorder
) -> None:
    queue = four_turns_in_process(queues, recorder)
    queue.put(KEY, conversation(4), signals=["goal"])  # the same turns, while they are processed
    recorder.gate.set()
    assert queue.flush(10)
    assert len(recorder.items) == 1


def test_watermarks_are_kept_for_the_most_recent_keys_only(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make(watermark_max_keys=2)
    keys = [QueueKey(f"t{n}", "alice") for n in range(3)]
    for key in keys:
        queue.put(key, conversation(2))
        assert queue.flush(5)
        queues.advance(1)
    for key in keys:
        queue.put(key, conversation(2))
    # t0's watermark was forgotten, so its conversation is sent again; t1 and t2 had no news.
    assert [(item.key, item.turns) for item in queue.pending()] == [(keys[0], conversation(2))]


def test_items_survive_close_and_overdue_ones_run_at_the_next_start(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make(debounce_seconds=0.1)
    queue.put(KEY, conversation(2), signals=["identity"])
    queue.close()
    time.sleep(0.2)
    queue = queues.make(start=True, debounce_seconds=60)
    assert recorder.called.wait(10)
    assert recorder.items[0].signals == ["identity"]


def items_in_the_database_file(journal: Path, scratch: Path) -> int:
    """The items a reader of the database file alone sees: what a lost WAL would leave."""
    copy = scratch / "without-wal.sqlite3"
    shutil.copyfile(journal, copy)
    try:
        with closing(sqlite3.connect(copy)) as conn:
            return int(conn.execute("SELECT count(*) FROM items").fetchone()[0])
    except sqlite3.DatabaseError:  # no table before the first checkpoint, or a torn copy
        return 0


def test_the_worker_checkpoints_so_puts_leave_the_wal_within_about_a_second(
    make_queue: MakeQueue, journal: Path, tmp_path: Path
) -> None:
    queue = make_queue(**real_time(debounce_seconds=60))
    for n in range(5):  # a few pages: SQLite's own threshold (1,000 pages) is far away
        queue.put(QueueKey(f"t{n}", "alice"), conversation(2))
    deadline = time.monotonic() + 10
    while items_in_the_database_file(journal, tmp_path) != 5:
        assert time.monotonic() < deadline, "the puts never left the WAL"
        time.sleep(0.05)
    assert len(queue.pending()) == 5


def test_concurrent_puts_from_many_threads_are_all_kept(queues: Queues) -> None:
    queue = queues.make()

    def writer(t: int) -> None:
        for n in range(50):
            queue.put(QueueKey(f"w{t}-{n % 25}", "alice"), conversation(n + 1))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pending = queue.pending()
    assert len(pending) == 8 * 25
    # Each key's second put, the longer conversation, replaced its first.
    assert sorted(len(item.turns) for item in pending) == sorted(list(range(26, 51)) * 8)


def test_puts_racing_the_worker_extract_every_turn_exactly_once(
    queues: Queues, recorder: Recorder
) -> None:
    queue = queues.make(start=True, debounce_seconds=0.0)

    def writer(t: int) -> None:
        for n in range(1, 41):  # each put adds turns while earlier ones are being extracted
            queue.put(QueueKey(f"w{t}", "alice"), conversation(n * 3))
            time.sleep(0.001)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert queue.flush(30)
    assert len(recorder.items) > 4  # extractions ran while the threads were still putting
    for t in range(4):
        sent = [
            turn for item in recorder.items if item.key.thread_id == f"w{t}" for turn in item.turns
        ]
        assert sent == conversation(120)


def test_items_of_a_journal_written_before_turns_were_chunked_are_kept(
    journal: Path, make_queue: MakeQueue, recorder: Recorder
) -> None:
    journal.parent.mkdir(parents=True)
    with closing(sqlite3.connect(journal, isolation_level=None)) as conn:
        apply_migrations(conn, MIGRATIONS[:1])
        conn.execute(
            "INSERT INTO items (key, user_id, urgent, turns, signals, first_at, last_at, due_at)"
            " VALUES (?, 'alice', 0, ?, '[\"goal\"]', 0, 0, 0)",
            (json.dumps(KEY), json.dumps(conversation(3))),
        )
    queue = make_queue()
    (item,) = queue.pending()
    assert (item.turns, item.signals) == (conversation(3), ["goal"])
    assert queue.extend(KEY, conversation(5)[3:], after="m2")
    assert queue.flush(5)
    assert recorder.items[0].turns == conversation(5)


def test_chunks_written_before_the_cursor_column_keep_their_cursor(
    journal: Path, make_queue: MakeQueue, recorder: Recorder
) -> None:
    """A journal at schema version 2 gains each chunk's last turn; a chunk an older process
    writes afterwards (without it) still gives the key's cursor."""
    journal.parent.mkdir(parents=True)
    with closing(sqlite3.connect(journal, isolation_level=None)) as conn:
        apply_migrations(conn, MIGRATIONS[:2])
        conn.execute(
            "INSERT INTO items (key, user_id, urgent, signals, first_at, last_at, due_at)"
            " VALUES (?, 'alice', 0, '[]', 0, 0, 0)",
            (json.dumps(KEY),),
        )
        conn.execute(
            "INSERT INTO chunks (item_id, turns) VALUES (1, ?)", (json.dumps(conversation(3)),)
        )
    queue = make_queue()
    assert queue.cursor(KEY) == "m2"
    with closing(sqlite3.connect(journal, isolation_level=None)) as conn:
        (last,) = conn.execute("SELECT last_turn FROM chunks").fetchone()
        assert json.loads(last) == conversation(3)[-1]
        # What a process from before the column appends: no last turn of its own.
        conn.execute(
            "INSERT INTO chunks (item_id, turns) VALUES (1, ?)", (json.dumps(conversation(5)[3:]),)
        )
    assert queue.cursor(KEY) == "m4"
    assert queue.extend(KEY, conversation(7)[5:], after="m4")
    assert queue.cursor(KEY) == "m6"
    assert queue.flush(5)
    assert recorder.items[0].turns == conversation(7)


def test_a_corrupt_journal_is_reported_not_reset(tmp_path: Path) -> None:
    path = tmp_path / "pending.sqlite3"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(MemoryCorruptionError, match="unreadable"):
        DurableQueue(path, process=Recorder(), identity=identity, start=False)
    assert path.read_bytes() == b"not a database" * 100


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.deermem.queue_child", *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=ENV,
    )


def test_sigkill_between_turns_loses_no_acknowledged_turn_and_repeats_none(
    tmp_path: Path, journal: Path, make_queue: MakeQueue, recorder: Recorder
) -> None:
    rng = random.Random(7)
    for round_ in range(3):
        record, thread = tmp_path / f"record-{round_}.txt", f"grow{round_}"
        grower = child("grow", str(journal), str(record), thread)
        assert grower.stdout is not None
        assert grower.stdout.readline() == "2\n"
        time.sleep(rng.uniform(0.1, 0.4))
        grower.send_signal(signal.SIGKILL)
        grower.wait()
        acknowledged = int(["2", *grower.stdout.read().split()][-1])
        # The first and last turn of each item the child extracted, then what it left queued.
        extracted = [
            [int(turn_id[1:]) for turn_id in line.split()[3:]]
            for line in record.read_text().splitlines()
        ]
        assert len(extracted) > 3, "the child extracted along the way"
        before = len(recorder.items)
        assert make_queue().flush(10)
        done = [n for first, last in extracted for n in range(first, last + 1)]
        left = [int(turn["id"][1:]) for item in recorder.items[before:] for turn in item.turns]
        assert {item.key.thread_id for item in recorder.items[before:]} <= {thread}
        # Killed during `process` (its item recorded, not yet finished), the child's last item
        # is sent again; otherwise every turn is sent exactly once, in order.
        first, last = extracted[-1]
        outcomes = (done + left, done[: first - last - 1] + left)
        held = (acknowledged, acknowledged + 1)  # a kill inside `extend` may have committed it
        assert any(sent == list(range(len(sent))) and len(sent) in held for sent in outcomes), (
            acknowledged,
            extracted[-3:],
            left[:3],
            left[-3:],
        )


def recorded(record: Path) -> list[str]:
    """The thread ids in a child's record file, in order."""
    if not record.exists():
        return []
    return [line.split()[1] for line in record.read_text().splitlines()]


def test_sigkill_after_put_loses_no_acknowledged_conversation(
    journal: Path, make_queue: MakeQueue, recorder: Recorder
) -> None:
    rng = random.Random(99)
    acknowledged: set[str] = set()
    possible: set[str] = set()
    for round_ in range(4):
        writer = child("put-loop", str(journal), f"r{round_}-")
        assert writer.stdout is not None
        writer.stdout.readline()  # it is putting
        time.sleep(rng.uniform(0.0, 0.1))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        # A number was printed after its put returned; the put in flight may have committed.
        printed = [f"r{round_}-{line}" for line in ["0", *writer.stdout.read().split()]]
        acknowledged.update(printed)
        possible.update(printed, [f"r{round_}-{len(printed)}"])
    assert len(acknowledged) > 100
    queue = make_queue()
    assert {item.key.thread_id for item in queue.pending()} >= acknowledged
    assert queue.flush(60)
    processed = recorder.threads()
    assert len(processed) == len(set(processed))  # nothing extracted twice
    assert acknowledged <= set(processed) <= possible
    assert make_queue().flush(5)
    assert len(recorder.items) == len(processed)


def test_sigkill_during_processing_processes_the_item_again_once(
    tmp_path: Path, journal: Path, make_queue: MakeQueue, recorder: Recorder
) -> None:
    record = tmp_path / "record.txt"
    staller = child("stall", str(journal), str(record))
    assert staller.stdout is not None
    assert staller.stdout.readline() == "processing\n"
    staller.send_signal(signal.SIGKILL)
    staller.wait()
    assert recorded(record) == ["stalled"]
    # Claimed by a dead process: taken over at once, not after the ten-minute lease.
    make_queue(**real_time())
    assert recorder.called.wait(10)
    assert recorder.threads() == ["stalled"]
    assert make_queue().flush(10)


def test_two_processes_on_one_journal_process_each_item_once(
    tmp_path: Path, journal: Path, make_queue: MakeQueue
) -> None:
    queue = make_queue(clock=time.time, debounce_seconds=0.0)
    threads = [f"t{n}" for n in range(60)]
    for thread in threads:
        queue.put(QueueKey(thread, "alice"), conversation(2))
    queue.close()
    record, go = tmp_path / "record.txt", tmp_path / "go"
    workers = [child("drain", str(journal), str(record), str(go)) for _ in range(2)]
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "ready\n"
    go.touch()
    for worker in workers:
        assert worker.wait(60) == 0
    assert sorted(recorded(record)) == sorted(threads)
    pids = {line.split()[0] for line in record.read_text().splitlines()}
    assert len(pids) == 2  # both took part


def _claim_as(journal: Path, owner: str, now: float) -> None:
    """Write a live claim of `owner` on every item, as its queue object would have."""
    with closing(sqlite3.connect(journal)) as conn, conn:
        conn.execute("UPDATE items SET claimed_by = ?, claimed_until = ?", (owner, now + 600))


@pytest.mark.parametrize("instance_file", [True, False], ids=["left-behind", "absent"])
def test_a_restart_with_the_same_pid_takes_its_predecessors_claims_at_once(
    journal: Path, make_queue: MakeQueue, recorder: Recorder, clock: FakeClock, instance_file: bool
) -> None:
    """PID 1 in a container: the predecessor was this very pid, and its claims are stale."""
    make_queue().put(KEY, conversation(2))
    dead = "0123456789abcdef0123456789abcdef"
    owners = journal.with_name(f"{journal.name}.owners")
    if instance_file:  # killed: its file stays, unlocked (the kernel released the lock)
        (owners / f"{dead}.lock").touch()
    _claim_as(journal, f"{os.getpid()}:{dead}", clock.now)
    restarted = make_queue()
    assert restarted.flush(2)
    assert recorder.threads() == ["t1"]


def test_a_live_queue_objects_claims_are_respected_even_within_one_process(
    journal: Path, make_queue: MakeQueue, recorder: Recorder, clock: FakeClock
) -> None:
    holder = make_queue()
    holder.put(KEY, conversation(2))
    _claim_as(journal, holder._token, clock.now)
    other = make_queue()
    assert not other.flush(0.3)
    assert recorder.items == []
    holder.close()  # gone: its claim is free at once, not after the lease
    assert other.flush(2)
    assert recorder.threads() == ["t1"]


def test_instance_files_of_gone_queues_are_swept_and_live_ones_kept(
    journal: Path, make_queue: MakeQueue
) -> None:
    owners = journal.with_name(f"{journal.name}.owners")
    live = make_queue()
    (owners / "deadbeef.lock").touch()
    make_queue()
    assert not (owners / "deadbeef.lock").exists()
    assert (owners / f"{live._instance}.lock").exists()
    live.close()
    assert not (owners / f"{live._instance}.lock").exists()
