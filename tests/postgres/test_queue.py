"""The PostgreSQL write queue: the SQLite queue's behaviours, then replicas sharing it.

Time runs on the database's clock, so "an hour later" is made by moving every stored time of
the test's schema an hour back (`Clock.advance`), which is what waiting would have done.
"""

from __future__ import annotations

import logging
import os
import random
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
LONG = os.environ.get("DEERFLOW_LONG_TESTS") == "1"

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
        queue = PostgresQueue(pool if on is None else on, settings, **({"start": False} | options))
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


# -- replicas ----------------------------------------------------------------------------------


class Tracker:
    """A `process` shared by replicas: records who processed what, and any item (a key's
    normal or urgent one) handed to two replicas at once."""

    def __init__(self, work_seconds: float = 0.005) -> None:
        self.done: list[tuple[str, QueueItem]] = []
        self.overlaps: list[tuple[QueueKey, bool]] = []
        self._work = work_seconds
        self._busy: set[tuple[QueueKey, bool]] = set()
        self._lock = threading.Lock()

    def replica(self, name: str) -> Callable[[QueueItem], None]:
        def process(item: QueueItem) -> None:
            held = (item.key, item.urgent)
            with self._lock:
                if held in self._busy:
                    self.overlaps.append(held)
                self._busy.add(held)
            time.sleep(self._work)  # an LLM call takes a while: let the others contend
            with self._lock:
                self._busy.discard(held)
                self.done.append((name, item))

        return process


def wait_until_empty(queue: PostgresQueue, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while queue.pending():
        assert time.monotonic() < deadline, queue.pending()
        time.sleep(0.02)


@pytest.mark.parametrize("count", [2, 3])
def test_replicas_process_every_item_once_and_never_two_at_a_time(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool], count: int
) -> None:
    tracker = Tracker()
    replicas = [
        make_queue(
            on=open_pools(),
            process=tracker.replica(f"r{n}"),
            start=True,
            debounce_seconds=0.0,
            lease_seconds=LEASE_S,
        )
        for n in range(count)
    ]
    threads = [f"t{n}" for n in range(40)]
    for n, thread in enumerate(threads):  # each put reaches some replica
        replicas[n % count].put(QueueKey(thread, "alice"), conversation(2))
        replicas[(n + 1) % count].put_now(QueueKey(thread, "alice"), conversation(1))
    wait_until_empty(replicas[0])
    processed = [(item.key.thread_id, item.urgent) for _, item in tracker.done]
    assert sorted(processed) == sorted((thread, urgent) for thread in threads for urgent in (0, 1))
    assert tracker.overlaps == []
    assert len({name for name, _ in tracker.done}) == count  # every replica took part


def test_debounce_holds_whichever_replica_received_the_puts(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool]
) -> None:
    tracker = Tracker()
    processed_at: list[float] = []

    def process(item: QueueItem) -> None:
        processed_at.append(time.time())
        tracker.replica("worker")(item)

    receivers = [make_queue(on=open_pools(), debounce_seconds=0.6) for _ in range(2)]
    workers = [
        make_queue(on=open_pools(), process=process, start=True, poll_seconds=0.05)
        for _ in range(2)
    ]
    receivers[0].put(KEY, conversation(2))
    time.sleep(0.3)
    receivers[1].put(KEY, conversation(4), signals=["goal"])
    last_put = time.time()
    wait_until_empty(workers[0])
    (item,) = [item for _, item in tracker.done]
    assert (item.turns, item.signals) == (conversation(4), ["goal"])
    # The server and the tests share this host's clock.
    assert processed_at[0] >= last_put + 0.6 - 0.05


def test_a_put_on_one_replica_while_another_processes_the_key_keeps_the_newer_turns(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool], recorder: Recorder
) -> None:
    busy = four_turns_in_process(make_queue, recorder)
    other = make_queue(on=open_pools())
    other.put(KEY, conversation(6), signals=["goal"])
    assert other.extend(KEY, conversation(7)[6:], after="m5")
    assert not other.flush(0.2)  # the key's item is held by the busy replica
    assert recorder.gate is not None
    recorder.gate.set()
    assert recorder.called.wait(10)
    assert other.flush(10)
    assert [item.turns for item in recorder.items] == [conversation(4), conversation(7)[4:]]
    assert busy.pending() == []


def test_a_live_replica_keeps_its_item_past_the_lease_by_renewing_it(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool], recorder: Recorder
) -> None:
    holder = make_queue(start=True, debounce_seconds=0.0, lease_seconds=0.6)
    recorder.gate = threading.Event()
    holder.put_now(KEY, conversation(2))
    assert recorder.entered.wait(10)
    other = make_queue(on=open_pools(), process=Recorder(), lease_seconds=0.6)
    assert not other.flush(1.5)  # two and a half leases: renewed, never taken
    recorder.gate.set()
    assert other.flush(10)
    assert len(recorder.items) == 1


def child(command: str, config: DeerMemConfig, record: Path) -> subprocess.Popen[str]:
    assert config.database_url is not None
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.postgres.queue_child",
            command,
            config.database_url,
            config.database_schema,
            str(record),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=ENV,
    )


def recorded(record: Path) -> list[str]:
    """The thread ids in a child's record file, in order."""
    if not record.exists():
        return []
    return [line.split()[1] for line in record.read_text().splitlines()]


def test_a_replica_killed_during_processing_leaves_its_item_to_another_after_the_lease(
    tmp_path: Path, config: DeerMemConfig, make_queue: MakeQueue, recorder: Recorder
) -> None:
    record = tmp_path / "record.txt"
    staller = child("stall", config, record)
    assert staller.stdout is not None
    assert staller.stdout.readline() == "processing\n"
    other = make_queue(lease_seconds=LEASE_S)
    assert not other.flush(0.3)  # claimed by the child, whose lease runs
    staller.send_signal(signal.SIGKILL)
    staller.wait()
    make_queue(start=True, poll_seconds=0.1)
    assert recorder.called.wait(10)  # once the lease has run out
    assert recorded(record) == ["stall"]
    assert [(item.key.thread_id, item.turns, item.signals) for item in recorder.items] == [
        ("stall", conversation(2), ["goal"])
    ]
    settle(other, 0)
    assert len(recorder.items) == 1


def test_a_replica_killed_after_processing_committed_has_it_processed_again_once(
    tmp_path: Path, config: DeerMemConfig, make_queue: MakeQueue, recorder: Recorder
) -> None:
    """Delivery is at least once: killed between the extraction's commit and the queue's, an
    item is handed out again, alike, for the apply step to recognise."""
    record = tmp_path / "record.txt"
    dying = child("commit-then-die", config, record)
    assert dying.wait(30) == -signal.SIGKILL
    assert recorded(record) == ["commit-then-die"]
    queue = make_queue(lease_seconds=LEASE_S)
    (left,) = queue.pending()
    assert queue.flush(10)  # waits out the dead replica's lease
    (again,) = recorder.items
    assert (again.key, again.turns, again.signals) == (left.key, conversation(2), ["goal"])
    assert again.first_enqueued_at == left.first_enqueued_at
    assert queue.pending() == []
    assert recorded(record) == ["commit-then-die"]


@pytest.mark.parametrize("round_", range(10 if LONG else 1))
def test_replicas_killed_at_random_lose_no_item_and_repeat_only_the_one_they_held(
    tmp_path: Path, config: DeerMemConfig, make_queue: MakeQueue, recorder: Recorder, round_: int
) -> None:
    rng = random.Random(round_)
    queue = make_queue(debounce_seconds=0.0, lease_seconds=LEASE_S)
    threads = [f"k{n}" for n in range(40)]
    for thread in threads:
        queue.put(QueueKey(thread, "crash"), conversation(2))
    records = [tmp_path / "victim.txt", tmp_path / "survivor.txt"]
    victim, survivor = (child("drain", config, record) for record in records)
    for worker in (victim, survivor):
        assert worker.stdout is not None
        assert worker.stdout.readline() == "ready\n"
    time.sleep(rng.uniform(0.05, 0.3))
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert queue.flush(30)  # beside the survivor, once the victim's lease has run out
    survivor.terminate()
    survivor.wait()
    by_victim, by_survivor = (recorded(record) for record in records)
    processed = by_victim + by_survivor + recorder.threads()
    assert sorted(set(processed)) == sorted(threads)
    assert by_victim, "the victim died while working"
    # Only the item the victim was finishing when it died may run twice (at least once).
    repeated = sorted(thread for thread in threads if processed.count(thread) > 1)
    assert repeated in ([], by_victim[-1:])
    assert len(processed) == len(threads) + len(repeated)


# -- bad input and broken rows -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "turns", "message"),
    [
        (QueueKey("t1", "al\x00ice"), conversation(2), "user_id must not contain NUL"),
        (QueueKey("t1", 7), conversation(2), "user_id must be a string"),  # type: ignore[arg-type]
        (KEY, {"id": "m0"}, "list of JSON objects"),
        (KEY, ["hello"], "list of JSON objects"),
        (KEY, [{"id": "m0", "text": b"bytes"}], "must be JSON"),
        (KEY, [{"id": "m0", "score": float("nan")}], "must be JSON"),
    ],
)
def test_what_cannot_be_queued_is_refused_and_nothing_is_written(
    make_queue: MakeQueue, key: QueueKey, turns: Any, message: str
) -> None:
    queue = make_queue()
    for put in (queue.put, queue.put_now):
        with pytest.raises(ValueError, match=message):
            put(key, turns)
    with pytest.raises(ValueError, match="trace_id must not contain NUL"):
        queue.put(KEY, conversation(2), trace_id="\x00")
    with pytest.raises(ValueError, match="signals"):
        queue.put(KEY, conversation(2), signals=[None])  # type: ignore[list-item]
    assert queue.pending() == []


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("queue_chunks.turns", "not json", "column turns is not JSON"),
        ("queue_chunks.turns", '{"id": "m0"}', "turns are not a JSON list of objects"),
        ("queue_items.key", '["t1"]', "is not a \\[thread, user, agent\\] list"),
    ],
)
def test_a_broken_row_is_reported_and_kept_while_the_others_are_processed(
    make_queue: MakeQueue,
    pool: ConnectionPool,
    recorder: Recorder,
    caplog: pytest.LogCaptureFixture,
    column: str,
    value: str,
    message: str,
) -> None:
    queue = make_queue(debounce_seconds=0.0)
    queue.put(KEY, conversation(2))
    queue.put(OTHER, conversation(2))
    table, name = column.split(".")
    with pool.connection() as conn:
        (broken,) = conn.execute("SELECT min(id) FROM queue_items").fetchone() or (None,)
        target = "item_id" if table == "queue_chunks" else "id"
        conn.execute(f"UPDATE {table} SET {name} = %s WHERE {target} = %s", (value, broken))
    with pytest.raises(MemoryCorruptionError, match=message):
        queue.pending()
    with pytest.raises(MemoryCorruptionError, match=f"item {broken}: .*fix or delete"):
        queue.flush(5)
    with caplog.at_level(logging.ERROR):
        assert queue.run_due() == 1  # the other item; the broken one is logged and kept
    assert recorder.threads() == ["t2"]
    assert f"item {broken}" in caplog.text
    with pool.connection() as conn:
        assert conn.execute("SELECT id FROM queue_items").fetchall() == [(broken,)]
