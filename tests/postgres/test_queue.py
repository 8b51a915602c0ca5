"""The PostgreSQL write queue: the SQLite queue's behaviours, then replicas sharing it.

Time runs on the database's clock, so "an hour later" is made by moving every stored time of
the test's schema an hour back (`Clock.advance`), which is what waiting would have done.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig, parse_config
from deerflow.agents.memory.backends.deermem.deermem.engine import QueueSettings
from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import (
    QueueFullError,
    QueueItem,
    QueueKey,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.connection import open_pool
from deerflow.agents.memory.backends.deermem.deermem.postgres.queue import PostgresQueue
from deerflow.agents.memory.manager import MemoryCorruptionError, MemoryManagerError
from tests.deermem.queue_child import conversation, identity
from tests.deermem.test_queue import Recorder
from tests.postgres_server import postgres_backend_config

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
KEY = QueueKey("t1", "alice")
OTHER = QueueKey("t2", "alice")
LEASE_S = 1.0

MakeQueue = Callable[..., PostgresQueue]


class Clock:
    """Moves the test schema's stored times back, as if the database's clock ran ahead."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def advance(self, seconds: float) -> None:
        back = "- %s * interval '1 second'"
        with self._pool.connection() as conn:
            conn.execute(
                f"UPDATE queue_items SET first_at = first_at {back}, last_at = last_at {back},"
                f" due_at = due_at {back}, claimed_until = claimed_until {back}",
                (seconds,) * 4,
            )
            conn.execute(f"UPDATE queue_watermarks SET used_at = used_at {back}", (seconds,))

    def now(self) -> float:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()
            assert row is not None
            return float(row[0])


@pytest.fixture
def config(postgres_url: str, tmp_path: Path) -> DeerMemConfig:
    return parse_config(postgres_backend_config(postgres_url, tmp_path))


@pytest.fixture
def open_pools(config: DeerMemConfig) -> Iterator[Callable[[], ConnectionPool]]:
    """Pools on the test's schema, one per replica; closed after the test."""
    pools: list[ConnectionPool] = []

    def open_one() -> ConnectionPool:
        pools.append(open_pool(config))
        return pools[-1]

    yield open_one
    for pool in pools:
        pool.close()


@pytest.fixture
def pool(open_pools: Callable[[], ConnectionPool]) -> ConnectionPool:
    return open_pools()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def make_queue(pool: ConnectionPool, recorder: Recorder) -> Iterator[MakeQueue]:
    """Queues on the test's schema, closed after the test; by default without a worker."""
    opened: list[PostgresQueue] = []

    def make(
        *,
        on: ConnectionPool | None = None,
        process: Callable[[QueueItem], None] | None = None,
        debounce_seconds: float = 30.0,
        max_wait_seconds: float = 120.0,
        max_depth: int = 0,
        **options: Any,
    ) -> PostgresQueue:
        settings = QueueSettings(
            process=recorder if process is None else process,
            identity=identity,
            debounce_seconds=debounce_seconds,
            max_wait_seconds=max_wait_seconds,
            max_depth=max_depth,
        )
        queue = PostgresQueue(
            pool if on is None else on, settings, **({"start": False} | options)
        )
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close()


@pytest.fixture
def clock(pool: ConnectionPool, make_queue: MakeQueue) -> Clock:
    make_queue()  # the tables exist before the first advance
    return Clock(pool)


def settle(queue: PostgresQueue, count: int) -> None:
    """Wait until `count` items are left: `process` returns a moment before the item is deleted."""
    deadline = time.monotonic() + 10
    while len(queue.pending()) != count:
        assert time.monotonic() < deadline, queue.pending()
        time.sleep(0.01)


# -- the behaviours of the SQLite queue ------------------------------------------------------


def test_puts_within_the_window_become_one_item_with_the_latest_turns(
    make_queue: MakeQueue, recorder: Recorder, clock: Clock
) -> None:
    queue = make_queue()
    queue.put(KEY, conversation(2), signals=["preference"], trace_id="run-1")
    clock.advance(10)
    queue.put(KEY, conversation(4), signals=["correction"], trace_id="run-2")
    queue.put(OTHER, conversation(2))
    assert queue.run_due() == 0
    clock.advance(30)
    assert queue.run_due() == 2
    assert recorder.threads() == ["t1", "t2"]
    item = recorder.items[0]
    assert item.turns == conversation(4)
    assert item.signals == ["correction", "preference"]
    assert item.trace_id == "run-2"
    assert item.last_enqueued_at - item.first_enqueued_at == pytest.approx(10, abs=1)
    assert not item.urgent
    assert queue.pending() == []


def test_debounce_is_trailing_but_capped_by_the_maximum_wait(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(debounce_seconds=30, max_wait_seconds=120)
    queue.put(KEY, conversation(2))
    (item,) = queue.pending()
    assert item.due_at - item.first_enqueued_at == 30
    for _ in range(5):
        clock.advance(20)
        queue.put(KEY, conversation(2))
    (item,) = queue.pending()
    assert item.due_at - item.first_enqueued_at == 120
    clock.advance(19.5)  # 119.5 s and a little after the first put
    assert queue.run_due() == 0
    clock.advance(0.5)
    assert queue.run_due() == 1


def test_continuous_chatter_is_processed_within_the_maximum_wait(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue(start=True, debounce_seconds=0.1, max_wait_seconds=0.3)
    processed_while_chatting = False
    for n in range(25):  # a put every 50 ms for 1.25 s, never 0.1 s of quiet
        queue.put(KEY, conversation(2 * n + 2))
        time.sleep(0.05)
        processed_while_chatting = processed_while_chatting or bool(recorder.items)
    assert processed_while_chatting


def test_the_watermark_sends_only_turns_after_the_last_extraction(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue()
    queue.put(KEY, conversation(4))
    assert queue.flush(5)
    queue.put(KEY, conversation(7))
    assert queue.pending()[0].turns == conversation(7)[4:]
    assert queue.flush(5)
    assert [item.turns for item in recorder.items] == [conversation(4), conversation(7)[4:]]


def test_a_200_turn_thread_extended_turn_by_turn_sends_each_turn_once(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue()
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
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(max_depth=1)
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


def four_turns_in_process(make_queue: MakeQueue, recorder: Recorder) -> PostgresQueue:
    """A queue whose worker is inside `process` with KEY's four turns, held until the gate."""
    queue = make_queue(start=True, debounce_seconds=0.0)
    recorder.gate = threading.Event()
    queue.put(KEY, conversation(4))
    assert recorder.entered.wait(10)
    return queue


def test_turns_appended_while_their_key_is_processed_are_processed_next_alone(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = four_turns_in_process(make_queue, recorder)
    assert queue.extend(KEY, conversation(6)[4:], after="m3")
    assert recorder.gate is not None
    recorder.gate.set()
    assert recorder.called.wait(10)
    assert queue.flush(10)
    assert [item.turns for item in recorder.items] == [conversation(4), conversation(6)[4:]]


def test_a_compacted_conversation_is_sent_whole(make_queue: MakeQueue, recorder: Recorder) -> None:
    queue = make_queue()
    queue.put(KEY, conversation(4))
    assert queue.flush(5)
    compacted = [{"id": "summary", "role": "user", "text": "earlier: ..."}, *conversation(7)[5:]]
    queue.put(KEY, compacted)
    assert queue.flush(5)
    assert recorder.items[-1].turns == compacted


def test_a_conversation_with_nothing_new_is_not_queued(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue()
    queue.put(KEY, conversation(4))
    assert queue.flush(5)
    queue.put(KEY, conversation(4), signals=["goal"])
    assert queue.pending() == []
    assert len(recorder.items) == 1


def test_put_now_is_processed_at_once_beside_the_pending_item_and_its_watermark(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue(start=True, debounce_seconds=60)
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
    queue = make_queue()
    queue.put_now(KEY, conversation(1))
    queue.put(KEY, conversation(6))
    assert sorted(item.urgent for item in queue.pending()) == [False, True]
    assert queue.flush(5)
    assert [(item.urgent, len(item.turns)) for item in recorder.items[1:]] == [
        (True, 1),
        (False, 6),
    ]


def test_back_pressure_refuses_new_keys_only(make_queue: MakeQueue) -> None:
    queue = make_queue(max_depth=2)
    queue.put(KEY, conversation(2))
    queue.put(OTHER, conversation(2))
    with pytest.raises(QueueFullError, match="queue_max_depth 2") as refused:
        queue.put(QueueKey("t3", "alice"), conversation(2))
    assert isinstance(refused.value, MemoryManagerError)
    queue.put(KEY, conversation(4))  # replacing is always allowed
    queue.put(QueueKey("t3", "alice"), conversation(2), signals=["correction"])
    queue.put_now(QueueKey("t4", "alice"), conversation(2))
    assert sorted(item.key.thread_id for item in queue.pending()) == ["t1", "t2", "t3", "t4"]


def test_replicas_admitting_new_keys_at_once_never_exceed_the_depth(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool]
) -> None:
    replicas = [make_queue(on=open_pools(), max_depth=10) for _ in range(3)]
    refused: list[int] = []

    def writer(r: int) -> None:
        for n in range(10):
            try:
                replicas[r].put(QueueKey(f"r{r}-{n}", "alice"), conversation(2))
            except QueueFullError:
                refused.append(1)

    threads = [threading.Thread(target=writer, args=(r,)) for r in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (len(replicas[0].pending()), len(refused)) == (10, 20)


def test_cancel_pending_drops_one_agent_or_all_agents_of_a_user(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue()
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
    make_queue: MakeQueue, recorder: Recorder, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    queue = make_queue(debounce_seconds=30, max_wait_seconds=120)
    recorder.failures = 4
    queue.put(KEY, conversation(2))
    delays = []
    for attempts in range(1, 5):
        clock.advance(1000)
        with caplog.at_level(logging.WARNING):
            assert queue.run_due() == 1
        (item,) = queue.pending()
        assert item.attempts == attempts
        delays.append(round(item.due_at - clock.now()))
    assert delays == [30, 60, 120, 120]  # doubling from the debounce, capped by the max wait
    assert "failed (attempt 4)" in caplog.text
    clock.advance(118)
    assert queue.run_due() == 0
    queue.put(KEY, conversation(4))  # a newer conversation replaces it as usual
    clock.advance(30)
    assert queue.run_due() == 1
    assert [item.turns for item in recorder.items] == [conversation(4)]
    assert queue.pending() == []


def test_a_failing_extraction_is_retried_by_the_worker(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue(start=True, debounce_seconds=0.05, max_wait_seconds=0.3)
    recorder.failures = 1
    queue.put(KEY, conversation(2))
    assert recorder.called.wait(10)  # after the 1 s floor between retries
    assert recorder.items[0].attempts == 1


def test_flush_processes_everything_within_its_timeout(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue(start=True, debounce_seconds=60)
    for n in range(5):
        queue.put(QueueKey(f"t{n}", "alice"), conversation(2))
    assert queue.flush(10)
    assert sorted(recorder.threads()) == [f"t{n}" for n in range(5)]
    recorder.failures = 1
    queue.put(KEY, conversation(4))
    assert not queue.flush(10)  # it failed once in this flush; no hot retry loop
    assert queue.flush(10)


def test_flush_waits_for_the_workers_item_and_gives_up_at_its_timeout(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue(start=True, debounce_seconds=60)
    recorder.gate = threading.Event()
    queue.put_now(KEY, conversation(2))
    queue.put(OTHER, conversation(2))
    assert recorder.entered.wait(10)  # the worker is inside `process`
    assert not queue.flush(0.2)
    threading.Timer(0.2, recorder.gate.set).start()
    assert queue.flush(10)
    assert sorted(recorder.threads()) == ["t1", "t2"]


def test_a_put_while_its_key_is_processed_keeps_the_newer_turns(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = four_turns_in_process(make_queue, recorder)
    queue.put(KEY, conversation(6), signals=["goal"])
    assert recorder.gate is not None
    recorder.gate.set()
    assert recorder.called.wait(10)
    assert queue.flush(10)
    assert [item.turns for item in recorder.items] == [conversation(4), conversation(6)[4:]]


def test_a_replacement_with_nothing_new_is_dropped_without_processing(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = four_turns_in_process(make_queue, recorder)
    queue.put(KEY, conversation(4), signals=["goal"])  # the same turns, while they are processed
    assert recorder.gate is not None
    recorder.gate.set()
    assert queue.flush(10)
    assert len(recorder.items) == 1


def test_watermarks_are_kept_for_the_most_recent_keys_only(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue(watermark_max_keys=2)
    keys = [QueueKey(f"t{n}", "alice") for n in range(3)]
    for key in keys:
        queue.put(key, conversation(2))
        assert queue.flush(5)
    for key in keys:
        queue.put(key, conversation(2))
    # t0's watermark was forgotten, so its conversation is sent again; t1 and t2 had no news.
    assert [(item.key, item.turns) for item in queue.pending()] == [(keys[0], conversation(2))]


def test_items_survive_close_and_overdue_ones_run_at_the_next_start(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue(debounce_seconds=0.1)
    queue.put(KEY, conversation(2), signals=["identity"])
    queue.close()
    time.sleep(0.2)
    make_queue(start=True, debounce_seconds=60)
    assert recorder.called.wait(10)
    assert recorder.items[0].signals == ["identity"]


def test_concurrent_puts_from_many_threads_are_all_kept(make_queue: MakeQueue) -> None:
    queue = make_queue()

    def writer(t: int) -> None:
        for n in range(30):
            queue.put(QueueKey(f"w{t}-{n % 15}", "alice"), conversation(n + 1))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pending = queue.pending()
    assert len(pending) == 6 * 15
    # Each key's second put, the longer conversation, replaced its first.
    assert sorted(len(item.turns) for item in pending) == sorted(list(range(16, 31)) * 6)


def test_puts_racing_the_worker_extract_every_turn_exactly_once(
    make_queue: MakeQueue, recorder: Recorder
) -> None:
    queue = make_queue(start=True, debounce_seconds=0.0)

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
